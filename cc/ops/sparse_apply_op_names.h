// The names of an optimizer rule's two sparse-apply ops, shared by their op registrations
// (optimizer_ops.cc) and kernel registrations (cc/kernels/sparse_apply_kernels.cc).
#ifndef TF_EMBEDDING_CC_OPS_SPARSE_APPLY_OP_NAMES_H_
#define TF_EMBEDDING_CC_OPS_SPARSE_APPLY_OP_NAMES_H_

#include <string>

namespace tf_embedding {

// TfeSparseApply<kName>: gradients as N CSR batches with their activation gradients.
template <typename Rule>
std::string SparseApplyOpName() {
  return std::string("TfeSparseApply") + Rule::kName;
}

// TfeSparseApply<kName>Rows: gradients as N lists of unique ids with already-summed rows.
template <typename Rule>
std::string SparseApplyRowsOpName() {
  return SparseApplyOpName<Rule>() + "Rows";
}

}  // namespace tf_embedding

#endif  // TF_EMBEDDING_CC_OPS_SPARSE_APPLY_OP_NAMES_H_
