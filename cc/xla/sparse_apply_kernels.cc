// XLA kernels of the sparse-apply ops of every optimizer rule in AllRules, both gradient forms
// (TfeSparseApply<Rule> and TfeSparseApply<Rule>Rows): the gradient terms are grouped by id,
// then UpdateElement, the TF kernels' own definition of the update (cc/core/optimizers.h),
// updates the touched rows of the table and slots, or every row for a rule that updates
// untouched rows.
//
// XLA cannot fail at run time, so where the TF kernel rejects data the XLA kernel gives it a
// defined meaning (docs/internals.md, "XLA"): ids outside [0, rows) are skipped, and a
// non-finite learning rate leaves every variable unchanged.
#include <algorithm>
#include <array>
#include <string>
#include <vector>

#include "cc/core/errors.h"
#include "cc/core/optimizers.h"
#include "cc/kernels/shape_checks.h"
#include "cc/kernels/sparse_apply_checks.h"
#include "cc/kernels/status.h"
#include "cc/ops/sparse_apply_op_names.h"
#include "cc/xla/batch_ops.h"
#include "cc/xla/gradient_terms.h"
#include "cc/xla/registration.h"
#include "cc/xla/xla_math.h"
#include "tensorflow/compiler/tf2xla/xla_op_kernel.h"
#include "tensorflow/compiler/tf2xla/xla_resource.h"
#include "xla/hlo/builder/lib/constants.h"

namespace tf_embedding {
namespace {

using ::tensorflow::TensorShape;
using ::tensorflow::XlaOpKernelContext;

// The gradient forms, as in the TF kernels: how the gradient inputs become terms, and the
// name of the input that holds the gradient rows.
struct CsrGradients {
  static constexpr char kGradients[] = "activation_gradients";
  static absl::Status Read(XlaOpKernelContext* ctx, const std::string& table_name,
                           int64_t* dim, GradientTerms* terms) {
    return ReadCsrGradientTerms(ctx, table_name, dim, terms);
  }
};

struct RowGradients {
  static constexpr char kGradients[] = "rows";
  static absl::Status Read(XlaOpKernelContext* ctx, const std::string& table_name,
                           int64_t* dim, GradientTerms* terms) {
    return ReadRowGradientTerms(ctx, table_name, dim, terms);
  }
};

template <typename Rule, typename Gradients>
class SparseApplyXlaOp : public tensorflow::XlaOpKernel {
 public:
  static constexpr int kNumVariables = 1 + Rule::kNumSlots;

  explicit SparseApplyXlaOp(tensorflow::OpKernelConstruction* ctx) : XlaOpKernel(ctx) {
    OP_REQUIRES_OK(ctx, ctx->GetAttr("table_name", &table_name_));
    OP_REQUIRES_OK(ctx, ReadHyperparameters(ctx, &common_));
    OP_REQUIRES_OK(ctx, ReadHyperparameters(ctx, &rule_));
  }

  void Compile(XlaOpKernelContext* ctx) override {
    const int lr_index = ctx->num_inputs() - 1;
    OP_REQUIRES_OK(ctx, CheckLearningRateShape(table_name_, ctx->InputShape(lr_index)));
    int64_t dim = -1;
    GradientTerms terms;
    OP_REQUIRES_OK(ctx, Gradients::Read(ctx, table_name_, &dim, &terms));
    std::array<xla::XlaOp, kNumVariables> values;
    std::vector<TensorShape> shapes(kNumVariables);
    OP_REQUIRES_OK(ctx, ReadDistinctVariables(ctx, &values, &shapes));
    OP_REQUIRES_OK(ctx, CheckVariableShapes<Rule>(table_name_, Gradients::kGradients, shapes,
                                                  dim));
    const int64_t rows = shapes[0].dim_size(0);
    const bool all_rows = rule_.UpdatesUntouchedRows();
    // Nothing to update.
    if (rows == 0 || (terms.size == 0 && !all_rows)) return;

    xla::XlaBuilder* builder = ctx->builder();
    const xla::XlaOp lr = ctx->Input(lr_index);
    const xla::XlaOp lr_is_finite = xla::IsFinite(lr);
    IdGroups groups;
    if (terms.size > 0) groups = GroupById(terms.ids, terms.rows, terms.size, dim, rows);
    std::array<xla::XlaOp, kNumVariables> updated;
    if (all_rows) {
      // Untouched rows get a zero gradient; a non-finite learning rate keeps every old value.
      xla::XlaOp gradients = xla::Broadcast(xla::Zero(builder, xla::F32), {rows, dim});
      if (terms.size > 0) {
        gradients = ScatterRows(gradients, groups.ids, groups.sums, Combine::kReplace);
      }
      updated = ApplyRule(lr, gradients, values);
      const xla::XlaOp keep_new = xla::Broadcast(lr_is_finite, {rows, dim});
      for (int i = 0; i < kNumVariables; ++i) {
        updated[i] = xla::Select(keep_new, updated[i], values[i]);
      }
    } else {
      // The first term of each id points at its row, the others (and all of them under a
      // non-finite learning rate) out of range, where the scatters skip them.
      const xla::XlaOp targets = xla::Select(
          xla::And(groups.is_first, xla::Broadcast(lr_is_finite, {terms.size})), groups.ids,
          xla::Broadcast(xla::ConstantR0<int64_t>(builder, rows), {terms.size}));
      std::array<xla::XlaOp, kNumVariables> touched;
      for (int i = 0; i < kNumVariables; ++i) touched[i] = GatherRows(values[i], targets, dim);
      updated = ApplyRule(lr, groups.sums, touched);
      for (int i = 0; i < kNumVariables; ++i) {
        updated[i] = ScatterRows(values[i], targets, updated[i], Combine::kReplace);
      }
    }
    for (int i = 0; i < kNumVariables; ++i) {
      OP_REQUIRES_OK(ctx, ctx->AssignVariable(i, tensorflow::DT_FLOAT, updated[i]));
    }
  }

 private:
  // Reads the table and slot variables (inputs 0 .. kNumSlots). Rejects a variable passed
  // twice, as the TF kernel does: its updates would overwrite each other.
  absl::Status ReadDistinctVariables(XlaOpKernelContext* ctx,
                                     std::array<xla::XlaOp, kNumVariables>* values,
                                     std::vector<TensorShape>* shapes) const {
    std::vector<tensorflow::XlaResource*> resources;
    for (int i = 0; i < kNumVariables; ++i) {
      tensorflow::XlaResource* resource = nullptr;
      TF_RETURN_IF_ERROR(ctx->GetResourceInput(i, &resource));
      if (std::find(resources.begin(), resources.end(), resource) != resources.end()) {
        return ToAbslStatus(TableError(table_name_, VariableName<Rule>(i),
                                       " is the same variable as another input; each must be "
                                       "distinct"));
      }
      resources.push_back(resource);
      TF_RETURN_IF_ERROR(
          ctx->ReadVariableInput(i, tensorflow::DT_FLOAT, &(*shapes)[i], &(*values)[i]));
    }
    return absl::OkStatus();
  }

  // The rule over whole arrays: `gradients` and `variables` (table, then slots) are [n, dim].
  std::array<xla::XlaOp, kNumVariables> ApplyRule(
      xla::XlaOp lr, xla::XlaOp gradients,
      const std::array<xla::XlaOp, kNumVariables>& variables) const {
    const XlaValue rate(lr);
    XlaValue weights(variables[0]);
    std::array<XlaValue, Rule::kNumSlots> slots;
    for (int k = 0; k < Rule::kNumSlots; ++k) slots[k] = XlaValue(variables[1 + k]);
    UpdateElement(rule_, common_, rate, common_.WeightDecay(rate), XlaValue(gradients), weights,
                  slots);
    std::array<xla::XlaOp, kNumVariables> updated;
    updated[0] = weights.op();
    for (int k = 0; k < Rule::kNumSlots; ++k) updated[1 + k] = slots[k].op();
    return updated;
  }

  std::string table_name_;
  CommonUpdateParams common_;
  Rule rule_;
};

template <typename Rule, typename Gradients>
void Register(const std::string& op_name) {
  RegisterXlaKernel({op_name}, CreateXlaKernel<SparseApplyXlaOp<Rule, Gradients>>);
}

[[maybe_unused]] const bool kRegistered = [] {
  AllRules::ForEach([](auto rule) {
    using Rule = decltype(rule);
    Register<Rule, CsrGradients>(SparseApplyOpName<Rule>());
    Register<Rule, RowGradients>(SparseApplyRowsOpName<Rule>());
  });
  return true;
}();

}  // namespace
}  // namespace tf_embedding
