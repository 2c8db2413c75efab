// TfeFeaturesLookup: for each of several tables, TfeFeaturesToCsr followed by TfeEmbeddingLookup,
// in one op, for lookups that no update follows (core: features_lookup.h), on the intra-op pool.
#include <functional>
#include <string>
#include <utility>
#include <vector>

#include "cc/core/claiming_sharder.h"
#include "cc/core/csr_conversion.h"
#include "cc/core/errors.h"
#include "cc/core/features_lookup.h"
#include "cc/kernels/csr_conversion_attrs.h"
#include "cc/kernels/tf_status.h"
#include "cc/kernels/variable_access.h"
#include "tensorflow/core/framework/op_kernel.h"
#include "tensorflow/core/framework/tensor.h"

namespace tf_embedding {
namespace {

using ::tensorflow::OpKernel;
using ::tensorflow::OpKernelConstruction;
using ::tensorflow::OpKernelContext;
using ::tensorflow::Tensor;
using ::tensorflow::TensorShape;

class FeaturesLookupOp : public OpKernel {
 public:
  explicit FeaturesLookupOp(OpKernelConstruction* ctx) : OpKernel(ctx) {
    OP_REQUIRES_OK(ctx, ReadTablesLookupAttrs(ctx, &tables_, &features_));
    for (const auto& features : features_) num_features_ += features.size();
  }

  void Compute(OpKernelContext* ctx) override {
    std::vector<FeatureTensors> tensors;
    OP_REQUIRES_OK(ctx, ReadFeatureTensors(ctx, num_features_, &tensors));
    const size_t num_tables = tables_.size();
    std::vector<tensorflow::core::RefCountPtr<tensorflow::Var>> vars(num_tables);
    std::vector<tensorflow::Var*> raw_vars;
    for (size_t t = 0; t < num_tables; ++t) {
      OP_REQUIRES_OK(ctx, LookupVariable(ctx, t, &vars[t]));
      raw_vars.push_back(vars[t].get());
    }
    const SharedVariableLocks locks(raw_vars);
    std::vector<TableFeatures> tables(num_tables);
    size_t first_feature = 0;
    for (size_t t = 0; t < num_tables; ++t) {
      tables[t].spec = &tables_[t];
      tables[t].features = &features_[t];
      tables[t].tensors = &tensors[first_feature];
      first_feature += features_[t].size();
      OP_REQUIRES_OK(ctx, ReadTable(vars[t].get(), &tables[t]));
    }
    absl::Status allocation;  // a failed allocation, which the core call ends with
    const LookupOutputs outputs = [&](size_t t, int64_t rows, float** activations,
                                      int64_t** row_counts) {
      allocation = AllocateOutputs(ctx, t, rows, tables[t].dim);
      if (!allocation.ok()) return Status::Error(std::string(allocation.message()));
      *activations = ctx->mutable_output(t)->flat<float>().data();
      *row_counts = ctx->mutable_output(num_tables + t)->flat<int64_t>().data();
      return Status();
    };
    // The caller is an inter-op thread: it and num_threads - 1 tasks on the intra-op pool.
    const auto* workers = ctx->device()->tensorflow_cpu_worker_threads();
    const Sharder shard = ClaimingSharder(
        workers->num_threads - 1,
        [workers](std::function<void()> task) { workers->workers->Schedule(std::move(task)); });
    const Status status = LookUpTablesFeatures(tables, outputs, workers->num_threads, shard);
    OP_REQUIRES_OK(ctx, allocation);
    OP_REQUIRES_OK(ctx, ToAbslStatus(status));
  }

 private:
  // Checks the variable as the lookup does and views it in *table.
  // REQUIRES: var->mu() held.
  static absl::Status ReadTable(tensorflow::Var* var, TableFeatures* table) {
    const std::string& name = table->spec->name;
    TF_RETURN_IF_ERROR(CheckFloatMatrixVariable(var, TableContext(name) + "table"));
    const Tensor& data = *var->tensor();
    TF_RETURN_IF_ERROR(ToAbslStatus(CheckTableHoldsVocabulary(*table->spec, data.dim_size(0))));
    AdviseHugePages(var);
    table->table = data.flat<float>().data();
    table->dim = data.dim_size(1);
    return absl::OkStatus();
  }

  // Allocates table t's activations [rows, dim] and feature_row_counts [its features], unless
  // they are (LookupOutputs asks again for the same rows).
  absl::Status AllocateOutputs(OpKernelContext* ctx, size_t t, int64_t rows, int64_t dim) const {
    if (ctx->mutable_output(t) != nullptr) return absl::OkStatus();
    Tensor* output = nullptr;
    TF_RETURN_IF_ERROR(ctx->allocate_output(t, TensorShape({rows, dim}), &output));
    return ctx->allocate_output(tables_.size() + t,
                                TensorShape({static_cast<int64_t>(features_[t].size())}),
                                &output);
  }

  std::vector<TableSpec> tables_;
  std::vector<std::vector<FeatureSpec>> features_;
  size_t num_features_ = 0;
};

REGISTER_KERNEL_BUILDER(Name("TfeFeaturesLookup").Device(::tensorflow::DEVICE_CPU),
                        FeaturesLookupOp);

}  // namespace
}  // namespace tf_embedding
