// The one place where cc/core's Status becomes TensorFlow's: core reports only bad inputs, so a
// failed Status is an InvalidArgumentError with its message.
#ifndef TF_EMBEDDING_CC_KERNELS_TF_STATUS_H_
#define TF_EMBEDDING_CC_KERNELS_TF_STATUS_H_

#include "absl/status/status.h"
#include "cc/core/status.h"

namespace tf_embedding {

inline absl::Status ToAbslStatus(const Status& status) {
  return status.ok() ? absl::OkStatus() : absl::InvalidArgumentError(status.message());
}

}  // namespace tf_embedding

#endif  // TF_EMBEDDING_CC_KERNELS_TF_STATUS_H_
