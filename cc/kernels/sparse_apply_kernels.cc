// TfeSparseApply{Sgd,Adagrad,AdagradMomentum,Adam,Ftrl}: one kernel template, instantiated per
// optimizer rule of core/optimizers.h. Sums the gradients of N batches per unique id and
// updates the table and slot rows in place, under the variables' exclusive locks.
#include <algorithm>
#include <array>
#include <cmath>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "cc/core/gradient_aggregation.h"
#include "cc/core/optimizers.h"
#include "cc/kernels/csr_inputs.h"
#include "cc/kernels/variable_access.h"
#include "tensorflow/core/framework/op_kernel.h"
#include "tensorflow/core/framework/tensor_shape.h"
#include "tensorflow/core/util/work_sharder.h"

namespace tf_embedding {
namespace {

using ::tensorflow::OpKernel;
using ::tensorflow::OpKernelConstruction;
using ::tensorflow::OpKernelContext;
using ::tensorflow::Tensor;
using ::tensorflow::Var;

// Sharding cost of a rule's per-element work, in units of one multiply-add.
constexpr int64_t kRuleCost = 20;

absl::Status ReadCommonParams(OpKernelConstruction* ctx, CommonUpdateParams* p) {
  TF_RETURN_IF_ERROR(ctx->GetAttr("clip_gradient_min", &p->clip_gradient_min));
  TF_RETURN_IF_ERROR(ctx->GetAttr("clip_gradient_max", &p->clip_gradient_max));
  TF_RETURN_IF_ERROR(ctx->GetAttr("clip_weight_min", &p->clip_weight_min));
  TF_RETURN_IF_ERROR(ctx->GetAttr("clip_weight_max", &p->clip_weight_max));
  TF_RETURN_IF_ERROR(ctx->GetAttr("weight_decay_factor", &p->weight_decay_factor));
  return ctx->GetAttr("multiply_weight_decay_factor_by_learning_rate",
                      &p->multiply_weight_decay_factor_by_learning_rate);
}

// The optimizer attrs of each rule; the names are those of optimizers.py's _kernel_attrs().
absl::Status ReadRuleParams(OpKernelConstruction*, SgdRule*) { return absl::OkStatus(); }

absl::Status ReadRuleParams(OpKernelConstruction*, AdagradRule*) { return absl::OkStatus(); }

absl::Status ReadRuleParams(OpKernelConstruction* ctx, AdagradMomentumRule* rule) {
  TF_RETURN_IF_ERROR(ctx->GetAttr("momentum", &rule->momentum));
  TF_RETURN_IF_ERROR(ctx->GetAttr("use_nesterov", &rule->use_nesterov));
  TF_RETURN_IF_ERROR(ctx->GetAttr("exponent", &rule->exponent));
  TF_RETURN_IF_ERROR(ctx->GetAttr("beta2", &rule->beta2));
  return ctx->GetAttr("epsilon", &rule->epsilon);
}

absl::Status ReadRuleParams(OpKernelConstruction* ctx, AdamRule* rule) {
  TF_RETURN_IF_ERROR(ctx->GetAttr("beta_1", &rule->beta_1));
  TF_RETURN_IF_ERROR(ctx->GetAttr("beta_2", &rule->beta_2));
  TF_RETURN_IF_ERROR(ctx->GetAttr("epsilon", &rule->epsilon));
  TF_RETURN_IF_ERROR(ctx->GetAttr("lazy_adam", &rule->lazy_adam));
  return ctx->GetAttr("sum_inside_sqrt", &rule->sum_inside_sqrt);
}

absl::Status ReadRuleParams(OpKernelConstruction* ctx, FtrlRule* rule) {
  TF_RETURN_IF_ERROR(ctx->GetAttr("learning_rate_power", &rule->learning_rate_power));
  TF_RETURN_IF_ERROR(
      ctx->GetAttr("l1_regularization_strength", &rule->l1_regularization_strength));
  TF_RETURN_IF_ERROR(
      ctx->GetAttr("l2_regularization_strength", &rule->l2_regularization_strength));
  TF_RETURN_IF_ERROR(ctx->GetAttr("beta", &rule->beta));
  TF_RETURN_IF_ERROR(
      ctx->GetAttr("multiply_linear_by_learning_rate", &rule->multiply_linear_by_learning_rate));
  return ctx->GetAttr("allow_zero_accumulator", &rule->allow_zero_accumulator);
}

absl::Status ReadLearningRate(OpKernelContext* ctx, const std::string& table_name, float* lr) {
  const Tensor* t = nullptr;
  TF_RETURN_IF_ERROR(ctx->input("learning_rate", &t));
  if (t->dims() != 0) {
    return TableError(table_name, absl::StrCat("learning_rate must be a scalar, got shape ",
                                               t->shape().DebugString()));
  }
  *lr = t->scalar<float>()();
  if (!std::isfinite(*lr)) {
    return TableError(table_name, absl::StrCat("learning_rate must be finite, got ", *lr));
  }
  return absl::OkStatus();
}

template <typename Rule>
class SparseApplyOp : public OpKernel {
 public:
  static constexpr int kNumVariables = 1 + Rule::kNumSlots;

  explicit SparseApplyOp(OpKernelConstruction* ctx) : OpKernel(ctx) {
    OP_REQUIRES_OK(ctx, ctx->GetAttr("table_name", &table_name_));
    OP_REQUIRES_OK(ctx, ReadCommonParams(ctx, &common_));
    OP_REQUIRES_OK(ctx, ReadRuleParams(ctx, &rule_));
  }

  void Compute(OpKernelContext* ctx) override {
    float lr;
    OP_REQUIRES_OK(ctx, ReadLearningRate(ctx, table_name_, &lr));
    // Validate and sort the batches before locking: only the id bound and the dimension need
    // the table, so the variables stay locked for the update alone.
    int64_t dim = -1;
    std::vector<GradientBatch> batches;
    OP_REQUIRES_OK(ctx, ReadGradientBatches(ctx, table_name_, &dim, &batches));
    LookupGroups groups;
    const std::string error = GroupLookupsById(batches, dim, &groups);
    OP_REQUIRES(ctx, error.empty(), TableError(table_name_, error));

    std::array<tensorflow::core::RefCountPtr<Var>, kNumVariables> refs;
    std::vector<Var*> vars;
    OP_REQUIRES_OK(ctx, LookupDistinctVariables(ctx, &refs, &vars));
    ExclusiveVariableLocks locks(vars);
    OP_REQUIRES_OK(ctx, CheckVariables(vars, dim));
    const int64_t rows = vars[0]->tensor()->dim_size(0);
    const std::string bound_error = CheckIdsBelow(groups, rows);
    OP_REQUIRES(ctx, bound_error.empty(), TableError(table_name_, bound_error));
    const int64_t units = rule_.UpdatesUntouchedRows() ? rows : groups.num_unique();
    // Nothing to update: do not copy a shared buffer for nothing.
    if (units == 0) return;
    for (Var* var : vars) {
      OP_REQUIRES_OK(ctx, EnsureUnsharedBuffer(ctx, var));
      AdviseHugePages(var);
    }
    Update(ctx, lr, groups, dim, units, vars);
  }

 private:
  // The table and slot variables (inputs 0 .. kNumSlots): `refs` keeps them alive, `vars`
  // borrows them. Rejects a variable passed twice, which would self-deadlock on its lock.
  absl::Status LookupDistinctVariables(
      OpKernelContext* ctx, std::array<tensorflow::core::RefCountPtr<Var>, kNumVariables>* refs,
      std::vector<Var*>* vars) const {
    for (int i = 0; i < kNumVariables; ++i) {
      TF_RETURN_IF_ERROR(LookupVariable(ctx, i, &(*refs)[i]));
      if (std::find(vars->begin(), vars->end(), (*refs)[i].get()) != vars->end()) {
        return TableError(table_name_, absl::StrCat(VariableName(i), " is the same variable as ",
                                                    "another input; each must be distinct"));
      }
      vars->push_back((*refs)[i].get());
    }
    return absl::OkStatus();
  }

  // Sums and applies on the intra-op pool, over the `units` unique ids, or every table row for
  // a rule that updates untouched rows. Each unit is summed and updated by one thread, so the
  // result does not depend on how the range is split.
  // REQUIRES: the variables' locks held and their buffers unshared.
  void Update(OpKernelContext* ctx, float lr, const LookupGroups& groups, int64_t dim,
              int64_t units, const std::vector<Var*>& vars) const {
    float* table = vars[0]->tensor()->flat<float>().data();
    std::array<float*, Rule::kNumSlots> slots;
    for (int k = 0; k < Rule::kNumSlots; ++k) {
      slots[k] = vars[1 + k]->tensor()->flat<float>().data();
    }
    const bool all_rows = rule_.UpdatesUntouchedRows();
    const int64_t lookups_per_id =
        groups.gains.size() / std::max<int64_t>(groups.num_unique(), 1) + 1;
    const int64_t cost = (all_rows ? kRuleCost : lookups_per_id + kRuleCost) * dim;
    const auto* workers = ctx->device()->tensorflow_cpu_worker_threads();
    tensorflow::Shard(workers->num_threads, workers->workers, units, cost,
                      [&](int64_t begin, int64_t end) {
                        std::vector<float> scratch(dim);
                        if (all_rows) {
                          UpdateAllRows(rule_, common_, lr, groups, dim, begin, end, table, slots,
                                        scratch.data());
                        } else {
                          UpdateTouchedRows(rule_, common_, lr, groups, dim, begin, end, table,
                                            slots, scratch.data());
                        }
                      });
  }

  static std::string VariableName(int i) {
    return i == 0 ? "table" : absl::StrCat("slot '", Rule::kSlotNames[i - 1], "'");
  }

  // Every variable holds a float matrix of the table's shape, whose dim is the gradients'.
  // REQUIRES: the variables' locks held.
  absl::Status CheckVariables(const std::vector<Var*>& vars, int64_t dim) const {
    for (int i = 0; i < kNumVariables; ++i) {
      TF_RETURN_IF_ERROR(
          CheckFloatMatrixVariable(vars[i], absl::StrCat("Table '", table_name_, "': ",
                                                         VariableName(i))));
    }
    const tensorflow::TensorShape& shape = vars[0]->tensor()->shape();
    for (int i = 1; i < kNumVariables; ++i) {
      if (vars[i]->tensor()->shape() != shape) {
        return TableError(table_name_,
                          absl::StrCat(VariableName(i), " has shape ",
                                       vars[i]->tensor()->shape().DebugString(),
                                       " but the table has shape ", shape.DebugString()));
      }
    }
    if (shape.dim_size(1) != dim) {
      return TableError(table_name_,
                        absl::StrCat("activation_gradients have dimension ", dim,
                                     " but the table has shape ", shape.DebugString()));
    }
    return absl::OkStatus();
  }

  std::string table_name_;
  CommonUpdateParams common_;
  Rule rule_;
};

#define TFE_REGISTER_SPARSE_APPLY(name, Rule) \
  REGISTER_KERNEL_BUILDER(Name(name).Device(tensorflow::DEVICE_CPU), SparseApplyOp<Rule>)

TFE_REGISTER_SPARSE_APPLY("TfeSparseApplySgd", SgdRule);
TFE_REGISTER_SPARSE_APPLY("TfeSparseApplyAdagrad", AdagradRule);
TFE_REGISTER_SPARSE_APPLY("TfeSparseApplyAdagradMomentum", AdagradMomentumRule);
TFE_REGISTER_SPARSE_APPLY("TfeSparseApplyAdam", AdamRule);
TFE_REGISTER_SPARSE_APPLY("TfeSparseApplyFtrl", FtrlRule);

}  // namespace
}  // namespace tf_embedding
