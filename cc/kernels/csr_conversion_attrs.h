// The attrs of TfeFeaturesToCsr as the table and feature specs of the conversion, read the same
// way by its TF kernel and its XLA kernel (cc/xla).
#ifndef TF_EMBEDDING_CC_KERNELS_CSR_CONVERSION_ATTRS_H_
#define TF_EMBEDDING_CC_KERNELS_CSR_CONVERSION_ATTRS_H_

#include <vector>

#include "absl/status/status.h"
#include "cc/core/csr_conversion.h"
#include "tensorflow/core/framework/op_kernel.h"

namespace tf_embedding {

absl::Status ReadCsrConversionAttrs(tensorflow::OpKernelConstruction* ctx, TableSpec* table,
                                    std::vector<FeatureSpec>* features);

}  // namespace tf_embedding

#endif  // TF_EMBEDDING_CC_KERNELS_CSR_CONVERSION_ATTRS_H_
