// The sparse-apply kernels of every optimizer rule in AllRules (cc/core/optimizers.h): one kernel
// template, instantiated per rule and per gradient form. TfeSparseApply<Rule> groups the lookups
// of N CSR batches by id; TfeSparseApply<Rule>Rows merges N lists of already-summed rows. Either
// way the kernel then sums each id's gradient and updates the table and slot rows in place, under
// the variables' exclusive locks.
#include <algorithm>
#include <array>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "cc/core/errors.h"
#include "cc/core/gradient_aggregation.h"
#include "cc/core/optimizers.h"
#include "cc/core/parallel_steps.h"
#include "cc/kernels/csr_inputs.h"
#include "cc/kernels/gradient_groups_pool.h"
#include "cc/kernels/row_sharding.h"
#include "cc/kernels/sparse_apply_checks.h"
#include "cc/kernels/tf_status.h"
#include "cc/kernels/variable_access.h"
#include "cc/ops/sparse_apply_op_names.h"
#include "tensorflow/core/framework/op_kernel.h"
#include "tensorflow/core/framework/tensor_shape.h"

namespace tf_embedding {
namespace {

using ::tensorflow::OpKernel;
using ::tensorflow::OpKernelConstruction;
using ::tensorflow::OpKernelContext;
using ::tensorflow::Tensor;
using ::tensorflow::Var;

absl::Status ReadLearningRate(OpKernelContext* ctx, const std::string& table_name, float* lr) {
  const Tensor* t = nullptr;
  TF_RETURN_IF_ERROR(ctx->input("learning_rate", &t));
  TF_RETURN_IF_ERROR(CheckLearningRateShape(table_name, t->shape()));
  *lr = t->scalar<float>()();
  return ToAbslStatus(CheckLearningRate(table_name, *lr));
}

// A form of the gradient inputs: kRead views and checks the tensors, kGroup validates the views
// and groups them by id, all before the kernel takes any lock. kGradients names the input that
// holds the gradient rows, for messages.
template <typename View, auto kRead, auto kGroup, const char* kGradientsInput>
struct GradientForm {
  static constexpr const char* kGradients = kGradientsInput;

  static absl::Status Group(OpKernelContext* ctx, const std::string& table_name, int64_t* dim,
                            GradientGroups* groups) {
    std::vector<View> views;
    TF_RETURN_IF_ERROR(kRead(ctx, table_name, dim, &views));
    return ToAbslStatus(kGroup(views, *dim, groups).WithContext(TableContext(table_name)));
  }
};

constexpr char kActivationGradients[] = "activation_gradients";
constexpr char kRows[] = "rows";
// TfeSparseApply<Rule>: N CSR batches with their activation gradients.
using CsrGradients =
    GradientForm<GradientBatch, ReadGradientBatches, GroupLookupsById, kActivationGradients>;
// TfeSparseApply<Rule>Rows: N lists of unique ids with their summed rows.
using RowGradients = GradientForm<SortedRows, ReadSortedRows, GroupSortedRows, kRows>;

template <typename Rule, typename Gradients>
class SparseApplyOp : public OpKernel {
 public:
  static constexpr int kNumVariables = 1 + Rule::kNumSlots;

  explicit SparseApplyOp(OpKernelConstruction* ctx) : OpKernel(ctx) {
    OP_REQUIRES_OK(ctx, ctx->GetAttr("table_name", &table_name_));
    OP_REQUIRES_OK(ctx, ReadHyperparameters(ctx, &common_));
    OP_REQUIRES_OK(ctx, ReadHyperparameters(ctx, &rule_));
  }

  void Compute(OpKernelContext* ctx) override {
    float lr;
    OP_REQUIRES_OK(ctx, ReadLearningRate(ctx, table_name_, &lr));
    // Validate and group the gradients before locking: only the id bound and the dimension need
    // the table, so the variables stay locked for the update alone.
    int64_t dim = -1;
    const GradientGroupsPool::Lease lease = groups_pool_.Take();
    GradientGroups& groups = *lease.get();
    OP_REQUIRES_OK(ctx, Gradients::Group(ctx, table_name_, &dim, &groups));

    std::array<tensorflow::core::RefCountPtr<Var>, kNumVariables> refs;
    std::vector<Var*> vars;
    OP_REQUIRES_OK(ctx, LookupDistinctVariables(ctx, &refs, &vars));
    ExclusiveVariableLocks locks(vars);
    OP_REQUIRES_OK(ctx, CheckVariables(vars, dim));
    const int64_t rows = vars[0]->tensor()->dim_size(0);
    OP_REQUIRES_OK(ctx, ToAbslStatus(CheckIdsBelow(groups, rows)
                                         .WithContext(TableContext(table_name_))));
    const int64_t units = rule_.UpdatesUntouchedRows() ? rows : groups.num_unique();
    // Nothing to update: do not copy a shared buffer for nothing.
    if (units == 0) return;
    for (Var* var : vars) {
      OP_REQUIRES_OK(ctx, EnsureUnsharedBuffer(ctx, var));
      AdviseHugePages(var);
    }
    Update(ctx, lr, groups, dim, rows, vars);
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
        return ToAbslStatus(TableError(table_name_, VariableName<Rule>(i),
                                       " is the same variable as ",
                                       "another input; each must be distinct"));
      }
      vars->push_back((*refs)[i].get());
    }
    return absl::OkStatus();
  }

  // Sums and applies on the intra-op pool (ApplyGroups).
  // REQUIRES: the variables' locks held and their buffers unshared.
  void Update(OpKernelContext* ctx, float lr, const GradientGroups& groups, int64_t dim,
              int64_t rows, const std::vector<Var*>& vars) const {
    std::array<float*, Rule::kNumSlots> slots;
    for (int k = 0; k < Rule::kNumSlots; ++k) {
      slots[k] = vars[1 + k]->tensor()->flat<float>().data();
    }
    ApplyGroups(rule_, common_, lr, groups, dim, rows, vars[0]->tensor()->flat<float>().data(),
                slots, IntraOpSharder(ctx));
  }

  // Every variable holds an initialized float matrix of the table's shape, whose dim is the
  // gradients'.
  // REQUIRES: the variables' locks held.
  absl::Status CheckVariables(const std::vector<Var*>& vars, int64_t dim) const {
    std::vector<tensorflow::TensorShape> shapes;
    for (int i = 0; i < kNumVariables; ++i) {
      TF_RETURN_IF_ERROR(
          CheckFloatMatrixVariable(vars[i], TableContext(table_name_) + VariableName<Rule>(i)));
      shapes.push_back(vars[i]->tensor()->shape());
    }
    return CheckVariableShapes<Rule>(table_name_, Gradients::kGradients, shapes, dim);
  }

  std::string table_name_;
  CommonUpdateParams common_;
  Rule rule_;
  GradientGroupsPool groups_pool_;
};

// What REGISTER_KERNEL_BUILDER expands to, for an op name computed at startup.
template <typename Rule, typename Gradients>
void RegisterSparseApplyKernel(const std::string& op_name) {
  tensorflow::kernel_factory::OpKernelRegistrar registrar(
      tensorflow::register_kernel::Name(op_name.c_str())
          .Device(tensorflow::DEVICE_CPU)
          .Build(),
      "tf_embedding::SparseApplyOp", [](OpKernelConstruction* ctx) -> OpKernel* {
        return new SparseApplyOp<Rule, Gradients>(ctx);
      });
}

[[maybe_unused]] const bool kRegistered = [] {
  AllRules::ForEach([](auto rule) {
    using Rule = decltype(rule);
    RegisterSparseApplyKernel<Rule, CsrGradients>(SparseApplyOpName<Rule>());
    RegisterSparseApplyKernel<Rule, RowGradients>(SparseApplyRowsOpName<Rule>());
  });
  return true;
}();

}  // namespace
}  // namespace tf_embedding
