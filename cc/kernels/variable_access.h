// Resource-variable access for the lookup and apply kernels: lookup + checks, locking several
// variables in order, and TF's copy-on-write rule before an in-place update. Only exported
// TensorFlow symbols are used: training_op_helpers.h copies with functor::DenseUpdate, which
// libtensorflow_framework does not export.
#ifndef TF_EMBEDDING_CC_KERNELS_VARIABLE_ACCESS_H_
#define TF_EMBEDDING_CC_KERNELS_VARIABLE_ACCESS_H_

#include <algorithm>
#include <cstring>
#include <functional>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "cc/core/huge_pages.h"
#include "cc/kernels/shape_checks.h"
#include "tensorflow/core/framework/op_kernel.h"
#include "tensorflow/core/framework/resource_mgr.h"
#include "tensorflow/core/framework/resource_var.h"
#include "tensorflow/core/platform/errors.h"
#include "tensorflow/core/platform/mutex.h"

namespace tf_embedding {

// The variable behind resource input `index`.
inline absl::Status LookupVariable(tensorflow::OpKernelContext* ctx, int index,
                                   tensorflow::core::RefCountPtr<tensorflow::Var>* var) {
  return tensorflow::LookupResource(ctx, tensorflow::HandleFromInput(ctx, index), var);
}

// Checks that `var` holds an initialized float32 matrix. `what` names it in messages.
// REQUIRES: var->mu() held (shared or exclusive).
inline absl::Status CheckFloatMatrixVariable(tensorflow::Var* var, const std::string& what) {
  if (!var->is_initialized) {
    return absl::FailedPreconditionError(absl::StrCat(what, " variable is not initialized"));
  }
  const tensorflow::Tensor& t = *var->tensor();
  TF_RETURN_IF_ERROR(CheckFloatVariableType(what, t.dtype()));
  return CheckMatrixVariableShape(what, t.shape());
}

// Backs the variable's buffer with huge pages if it is large (cc/core/huge_pages.h). Call it
// where the kernel reads or updates rows of the buffer at random.
// REQUIRES: var->mu() held (shared or exclusive).
inline void AdviseHugePages(tensorflow::Var* var) {
  const tensorflow::Tensor& t = *var->tensor();
  AdviseHugePages(t.tensor_data().data(), t.TotalBytes());
}

// Holds the locks (`Lock`: tensorflow::mutex_lock, exclusive, or tf_shared_lock) of several
// variables, each mutex once. They are taken in increasing mutex address, the order Var::mu()
// prescribes, so an op holding them cannot deadlock against TensorFlow's own training ops (which
// lock in that order too) nor against another op that locks several.
template <typename Lock>
class VariableLocksInOrder {
 public:
  explicit VariableLocksInOrder(std::vector<tensorflow::Var*> vars) {
    const auto by_mutex = [](tensorflow::Var* a, tensorflow::Var* b) {
      return std::less<>()(a->mu(), b->mu());
    };
    std::sort(vars.begin(), vars.end(), by_mutex);
    locks_.reserve(vars.size());
    for (size_t i = 0; i < vars.size(); ++i) {
      if (i == 0 || vars[i]->mu() != vars[i - 1]->mu()) locks_.emplace_back(*vars[i]->mu());
    }
  }

 private:
  std::vector<Lock> locks_;
};

using ExclusiveVariableLocks = VariableLocksInOrder<tensorflow::mutex_lock>;
using SharedVariableLocks = VariableLocksInOrder<tensorflow::tf_shared_lock>;

// TF's copy-on-write rule for in-place updates: a ReadVariableOp result (or any other tensor)
// may alias the variable's buffer; if so, give the variable a private copy first so the update
// does not change values someone else already holds.
// REQUIRES: var->mu() held exclusively; the variable holds float32.
inline absl::Status EnsureUnsharedBuffer(tensorflow::OpKernelContext* ctx,
                                         tensorflow::Var* var) {
  tensorflow::Tensor* current = var->tensor();
  if (current->RefCountIsOne()) return absl::OkStatus();
  tensorflow::Tensor copy;
  tensorflow::AllocatorAttributes attr;
  attr.set_gpu_compatible(true);
  attr.set_nic_compatible(true);
  TF_RETURN_IF_ERROR(ctx->allocate_temp(current->dtype(), current->shape(), &copy, attr));
  std::memcpy(copy.flat<float>().data(), current->flat<float>().data(),
              current->NumElements() * sizeof(float));
  *current = copy;
  return absl::OkStatus();
}

}  // namespace tf_embedding

#endif  // TF_EMBEDDING_CC_KERNELS_VARIABLE_ACCESS_H_
