// TfeFeaturesLookup: TfeFeaturesToCsr followed by TfeEmbeddingLookup in one op, for lookups that
// no update follows. Pooled rank-2 sparse features without weights, valid and in row order (what
// tf.sparse ops and tf.data give), and pooled ragged features without weights are combined
// straight from their indices or row splits (core: sparse_lookup.h), each range of rows checking
// its lookups right before combining them, on the intra-op pool; any other input, or one that
// fails those checks, is converted (CsrBuilder, with its errors) and its batch looked up. Both
// give the bits of the two ops.
#include <atomic>
#include <string>
#include <vector>

#include "cc/core/csr_batch.h"
#include "cc/core/csr_conversion.h"
#include "cc/core/errors.h"
#include "cc/core/lookup.h"
#include "cc/core/sparse_lookup.h"
#include "cc/kernels/csr_conversion_attrs.h"
#include "cc/kernels/row_sharding.h"
#include "cc/kernels/tf_status.h"
#include "cc/kernels/variable_access.h"
#include "tensorflow/core/framework/op_kernel.h"
#include "tensorflow/core/framework/tensor.h"
#include "tensorflow/core/util/work_sharder.h"

namespace tf_embedding {
namespace {

using ::tensorflow::OpKernel;
using ::tensorflow::OpKernelConstruction;
using ::tensorflow::OpKernelContext;
using ::tensorflow::Tensor;
using ::tensorflow::TensorShape;

// Row ranges per intra-op thread in the direct path.
constexpr int64_t kRangesPerThread = 4;

class FeaturesLookupOp : public OpKernel {
 public:
  explicit FeaturesLookupOp(OpKernelConstruction* ctx) : OpKernel(ctx) {
    OP_REQUIRES_OK(ctx, ReadCsrConversionAttrs(ctx, &table_, &features_));
  }

  void Compute(OpKernelContext* ctx) override {
    std::vector<FeatureTensors> tensors;
    OP_REQUIRES_OK(ctx, ReadFeatureTensors(ctx, features_.size(), &tensors));
    tensorflow::core::RefCountPtr<tensorflow::Var> var;
    OP_REQUIRES_OK(ctx, LookupVariable(ctx, 0, &var));
    tensorflow::tf_shared_lock lock(*var->mu());
    OP_REQUIRES_OK(ctx, CheckFloatMatrixVariable(var.get(), TableContext(table_.name) + "table"));
    const Tensor& table = *var->tensor();
    // Ids are checked against vocabulary_size, so the table must hold that many rows.
    OP_REQUIRES(ctx, table.dim_size(0) >= table_.vocabulary_size,
                ToAbslStatus(TableError(table_.name, "the table has ", table.dim_size(0),
                                        " rows but vocabulary_size is ",
                                        table_.vocabulary_size)));
    AdviseHugePages(var.get());
    std::vector<SparseLookups> lookups;
    float* out = nullptr;
    if (DirectLookups(tensors, &lookups)) {
      int64_t rows = 0;
      for (const SparseLookups& feature : lookups) rows += feature.rows;
      if (!AllocateOutputs(ctx, rows, table.dim_size(1), &out)) return;
      if (LookUpDirectly(ctx, lookups, table, out)) return;
      // Invalid or out of order: the conversion reports the error or orders the lookups, and
      // gives the same rows, so its lookup overwrites the same outputs.
    }
    ConvertAndLookUp(ctx, tensors, table, out);
  }

 private:
  // The features as SparseLookups if every one may be combined directly (AsSparseLookups) and
  // their rows stack within the limit; else false (the conversion then checks them).
  bool DirectLookups(const std::vector<FeatureTensors>& tensors,
                     std::vector<SparseLookups>* lookups) const {
    int64_t rows = 0;
    for (size_t f = 0; f < features_.size(); ++f) {
      const FeatureSpec& spec = features_[f];
      FeatureLayout layout;
      SparseLookups feature;
      if (!AsSparseLookups(table_.name, spec, tensors[f], &layout, &feature) ||
          !CheckStackedRows(table_.name, spec, rows, layout.num_rows).ok()) {
        return false;
      }
      rows += layout.num_rows;
      lookups->push_back(feature);
    }
    return true;
  }

  // Combines each feature's rows straight from its lookups, in ranges of rows on the intra-op
  // pool, each range checking its lookups first (CombineSparseRows), into the allocated outputs.
  // Returns whether all were valid and in row order; if not, the outputs are partly written.
  bool LookUpDirectly(OpKernelContext* ctx, const std::vector<SparseLookups>& lookups,
                      const Tensor& table, float* out) const {
    const int64_t dim = table.dim_size(1);
    const float* table_data = table.flat<float>().data();
    const auto* workers = ctx->device()->tensorflow_cpu_worker_threads();
    std::atomic<bool> valid{true};
    for (size_t f = 0; f < lookups.size(); ++f) {
      const SparseLookups& feature = lookups[f];
      // A few ranges per thread, so that uneven ranges even out; their bounds in rows, and in
      // lookups by binary search (the first range from 0 and the last to nnz whatever the
      // order, so the lookup ranges cover every lookup: CombineSparseRows).
      const int64_t ranges = std::min<int64_t>(std::max<int64_t>(feature.rows, 1),
                                               kRangesPerThread * workers->num_threads);
      const auto row_bound = [&](int64_t i) { return feature.rows * i / ranges; };
      const auto lookup_bound = [&](int64_t i) {
        if (i == 0) return int64_t{0};
        return i == ranges ? feature.nnz : FirstLookupOfRow(feature, row_bound(i));
      };
      const int64_t cost = (feature.nnz / ranges + 1) * (dim + kRowFetchCost);
      tensorflow::Shard(workers->num_threads, workers->workers, ranges, cost,
                        [&](int64_t begin, int64_t end) {
        for (int64_t i = begin; i < end; ++i) {
          if (!CombineSparseRows(feature, table_.vocabulary_size, table_.combiner, table_data,
                                 dim, row_bound(i), row_bound(i + 1), lookup_bound(i),
                                 lookup_bound(i + 1), out)) {
            valid.store(false, std::memory_order_relaxed);
          }
        }
      });
      out += feature.rows * dim;
      RowCounts(ctx)[f] = feature.rows;
    }
    return valid.load();
  }

  // The conversion's batch looked up; into `out` if the outputs are already allocated (for as
  // many rows as the batch has), else into outputs it allocates.
  void ConvertAndLookUp(OpKernelContext* ctx, const std::vector<FeatureTensors>& tensors,
                        const Tensor& table, float* out) const {
    CsrBuilder builder(table_);
    OP_REQUIRES_OK(ctx, ToAbslStatus(builder.AddFeatures(features_, tensors)));
    std::vector<int64_t> row_splits(builder.num_rows() + 1), ids(builder.num_lookups());
    std::vector<float> gains(builder.num_lookups());
    builder.Build(row_splits.data(), ids.data(), gains.data());
    const CsrBatch batch{row_splits.data(), static_cast<int64_t>(row_splits.size()),
                         ids.data(),        static_cast<int64_t>(ids.size()),
                         gains.data(),      static_cast<int64_t>(gains.size())};
    const int64_t dim = table.dim_size(1);
    if (out == nullptr && !AllocateOutputs(ctx, batch.num_rows(), dim, &out)) return;
    const float* table_data = table.flat<float>().data();
    ShardOutputRows(ctx, batch.num_rows(), batch.num_ids, dim, [&](int64_t begin, int64_t end) {
      CombineRows(batch, table_data, dim, begin, end, out);
    });
    const std::vector<int64_t>& counts = builder.feature_row_counts();
    std::copy(counts.begin(), counts.end(), RowCounts(ctx));
  }

  // Allocates activations [rows, dim] (its buffer in *out) and feature_row_counts [num
  // features]; on failure reports it on ctx and returns false.
  bool AllocateOutputs(OpKernelContext* ctx, int64_t rows, int64_t dim, float** out) const {
    Tensor *activations = nullptr, *row_counts = nullptr;
    const absl::Status status = [&] {
      TF_RETURN_IF_ERROR(ctx->allocate_output(0, TensorShape({rows, dim}), &activations));
      return ctx->allocate_output(1, TensorShape({static_cast<int64_t>(features_.size())}),
                                  &row_counts);
    }();
    if (!status.ok()) {
      ctx->CtxFailure(__FILE__, __LINE__, status);
      return false;
    }
    *out = activations->flat<float>().data();
    return true;
  }

  static int64_t* RowCounts(OpKernelContext* ctx) {
    return ctx->mutable_output(1)->flat<int64_t>().data();
  }

  TableSpec table_;
  std::vector<FeatureSpec> features_;
};

REGISTER_KERNEL_BUILDER(Name("TfeFeaturesLookup").Device(::tensorflow::DEVICE_CPU),
                        FeaturesLookupOp);

}  // namespace
}  // namespace tf_embedding
