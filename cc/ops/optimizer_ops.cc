// The sparse-apply ops of every optimizer rule in AllRules (cc/core/optimizers.h), declared from
// the rule's description (docs/kernels.md): TfeSparseApply<Rule> sums the gradients of N CSR
// batches, TfeSparseApply<Rule>Rows takes N lists of already-summed rows. Both take the table,
// the rule's slots (inputs named after them, in kSlotNames order), the gradients, then
// learning_rate; their attrs are N, table_name, the hyperparameters every optimizer shares, then
// the rule's own.
#include <initializer_list>
#include <string>

#include "absl/strings/str_cat.h"
#include "cc/core/hyperparameters.h"
#include "cc/core/optimizers.h"
#include "cc/ops/sparse_apply_op_names.h"
#include "tensorflow/core/framework/common_shape_fns.h"
#include "tensorflow/core/framework/op.h"

namespace tf_embedding {
namespace {

using ::tensorflow::register_op::OpDefBuilderWrapper;

// Declares an attr for each of Params' hyperparameters, in their listed order.
template <typename Params>
void AddHyperparameterAttrs(OpDefBuilderWrapper& op) {
  for (const auto& hyperparameter : Params::Hyperparameters()) {
    op.Attr(AttrDeclaration(hyperparameter));
  }
}

// Registers `op_name`, an op of Rule whose gradients arrive as the N-list `gradient_inputs`.
// Stateful: it updates its variables, so it must never be merged with an identical op or pruned.
template <typename Rule>
void RegisterSparseApplyOp(const std::string& op_name,
                           std::initializer_list<const char*> gradient_inputs) {
  OpDefBuilderWrapper op(op_name.c_str());
  op.Input("table: resource");
  for (const char* slot : Rule::kSlotNames) op.Input(absl::StrCat(slot, ": resource"));
  for (const char* input : gradient_inputs) op.Input(input);
  op.Input("learning_rate: float").Attr("N: int >= 1").Attr("table_name: string = ''");
  AddHyperparameterAttrs<CommonUpdateParams>(op);
  AddHyperparameterAttrs<Rule>(op);
  op.SetIsStateful().SetShapeFn(tensorflow::shape_inference::NoOutputs);
  op();
}

[[maybe_unused]] const bool kRegistered = [] {
  AllRules::ForEach([](auto rule) {
    using Rule = decltype(rule);
    RegisterSparseApplyOp<Rule>(SparseApplyOpName<Rule>(),
                                {"row_splits: N * int64", "ids: N * int64", "gains: N * float",
                                 "activation_gradients: N * float"});
    RegisterSparseApplyOp<Rule>(SparseApplyRowsOpName<Rule>(),
                                {"unique_ids: N * int64", "rows: N * float"});
  });
  return true;
}();

}  // namespace
}  // namespace tf_embedding
