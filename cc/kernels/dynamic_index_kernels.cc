// The kernels of cc/ops/dynamic_index_ops.cc: validate, then call cc/core/dynamic_index.h
// under the index's lock.
#include <algorithm>
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "cc/core/csr_batch.h"
#include "cc/core/dynamic_index.h"
#include "cc/core/dynamic_relayout.h"
#include "cc/core/errors.h"
#include "cc/core/missing_lookups.h"
#include "cc/kernels/row_sharding.h"
#include "cc/kernels/shape_checks.h"
#include "cc/kernels/tf_status.h"
#include "tensorflow/core/framework/op_kernel.h"
#include "tensorflow/core/framework/resource_mgr.h"
#include "tensorflow/core/framework/resource_op_kernel.h"
#include "absl/synchronization/mutex.h"

namespace tf_embedding {
namespace {

using ::tensorflow::OpKernel;
using ::tensorflow::OpKernelConstruction;
using ::tensorflow::OpKernelContext;
using ::tensorflow::Tensor;
using ::tensorflow::TensorShape;

class DynamicIndexResource : public tensorflow::ResourceBase {
 public:
  DynamicIndexResource(std::string table_name, DynamicIndexOptions options)
      : table_name(std::move(table_name)), index(std::move(options)) {}

  std::string DebugString() const override {
    return absl::StrCat("DynamicIndex of table '", table_name, "'");
  }

  const std::string table_name;
  absl::Mutex mu;
  DynamicIndex index TF_GUARDED_BY(mu);
};

class DynamicIndexOp : public tensorflow::ResourceOpKernel<DynamicIndexResource> {
 public:
  explicit DynamicIndexOp(OpKernelConstruction* ctx) : ResourceOpKernel(ctx) {
    OP_REQUIRES_OK(ctx, ctx->GetAttr("table_name", &table_name_));
    OP_REQUIRES_OK(ctx, ctx->GetAttr("block_rows", &options_.block_rows));
    OP_REQUIRES_OK(ctx, ctx->GetAttr("strided", &options_.strided));
    OP_REQUIRES_OK(ctx, ctx->GetAttr("admit_after", &options_.admit_after));
    OP_REQUIRES_OK(ctx, ctx->GetAttr("evict_after_steps", &options_.evict_after_steps));
    OP_REQUIRES_OK(ctx, ctx->GetAttr("evict_every_steps", &options_.evict_every_steps));
    OP_REQUIRES_OK(ctx, ctx->GetAttr("refuse_when_full", &options_.refuse_when_full));
    OP_REQUIRES_OK(ctx, ctx->GetAttr("candidate_capacity", &options_.candidate_capacity));
    OP_REQUIRES_OK(ctx, ctx->GetAttr("pool_rows", &options_.pool_rows));
    OP_REQUIRES_OK(ctx, ToAbslStatus(CheckDynamicIndexOptions(table_name_, options_)));
  }

 private:
  absl::Status CreateResource(DynamicIndexResource** resource) override
      TF_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    *resource = new DynamicIndexResource(table_name_, options_);
    return absl::OkStatus();
  }

  std::string table_name_;
  DynamicIndexOptions options_;
};

absl::Status LookupIndex(OpKernelContext* ctx,
                         tensorflow::core::RefCountPtr<DynamicIndexResource>* index) {
  return tensorflow::LookupResource(ctx, tensorflow::HandleFromInput(ctx, 0), index);
}

class DynamicLookupOp : public OpKernel {
 public:
  explicit DynamicLookupOp(OpKernelConstruction* ctx) : OpKernel(ctx) {
    OP_REQUIRES_OK(ctx, ctx->GetAttr("table_name", &table_name_));
  }

  void Compute(OpKernelContext* ctx) override {
    const Tensor& keys = ctx->input(1);
    const Tensor& training = ctx->input(2);
    OP_REQUIRES_OK(ctx, CheckRank(table_name_, "", "keys", keys.shape(), 1));
    OP_REQUIRES_OK(ctx, CheckRank(table_name_, "", "training", training.shape(), 0));
    const auto flat_keys = keys.flat<int64_t>();
    OP_REQUIRES_OK(ctx, ToAbslStatus(CheckDynamicKeys(table_name_, flat_keys.data(),
                                                      flat_keys.size())));
    tensorflow::core::RefCountPtr<DynamicIndexResource> index;
    OP_REQUIRES_OK(ctx, LookupIndex(ctx, &index));
    Tensor* rows = nullptr;
    OP_REQUIRES_OK(ctx, ctx->allocate_output(0, keys.shape(), &rows));
    std::vector<int64_t> admitted_rows, admitted_pool_rows;
    {
      absl::MutexLock lock(&index->mu);
      index->index.Lookup(flat_keys.data(), flat_keys.size(), training.scalar<bool>()(),
                          IntraOpSharder(ctx), rows->flat<int64_t>().data(), &admitted_rows,
                          &admitted_pool_rows);
    }
    OP_REQUIRES_OK(ctx, OutputVector(ctx, 1, admitted_rows));
    OP_REQUIRES_OK(ctx, OutputVector(ctx, 2, admitted_pool_rows));
  }

 private:
  static absl::Status OutputVector(OpKernelContext* ctx, int output,
                                   const std::vector<int64_t>& values) {
    Tensor* tensor = nullptr;
    TF_RETURN_IF_ERROR(ctx->allocate_output(
        output, TensorShape({static_cast<int64_t>(values.size())}), &tensor));
    std::copy(values.begin(), values.end(), tensor->flat<int64_t>().data());
    return absl::OkStatus();
  }

  std::string table_name_;
};

class DropMissingLookupsOp : public OpKernel {
 public:
  explicit DropMissingLookupsOp(OpKernelConstruction* ctx) : OpKernel(ctx) {
    OP_REQUIRES_OK(ctx, ctx->GetAttr("table_name", &table_name_));
  }

  void Compute(OpKernelContext* ctx) override {
    const Tensor& row_splits = ctx->input(0);
    const Tensor& rows = ctx->input(1);
    const Tensor& gains = ctx->input(2);
    for (const auto& [name, tensor] : {std::pair{"row_splits", &row_splits},
                                       std::pair{"rows", &rows}, std::pair{"gains", &gains}}) {
      OP_REQUIRES_OK(ctx, CheckRank(table_name_, "", name, tensor->shape(), 1));
    }
    const int64_t lookups = rows.NumElements();
    OP_REQUIRES_OK(ctx, ToAbslStatus(gains.NumElements() == lookups ? Status() : TableError(
                            table_name_, gains.NumElements(), " gains for ", lookups, " rows")));
    const int64_t* splits = row_splits.flat<int64_t>().data();
    OP_REQUIRES_OK(ctx, ToAbslStatus(ValidateRowSplits(splits, row_splits.NumElements(), lookups)
                                         .WithContext(TableContext(table_name_))));
    const int64_t* row_values = rows.flat<int64_t>().data();
    const int64_t kept = std::count_if(row_values, row_values + lookups,
                                       [](int64_t row) { return row >= 0; });
    Tensor *kept_splits = nullptr, *kept_rows = nullptr, *kept_gains = nullptr;
    OP_REQUIRES_OK(ctx, ctx->allocate_output(0, row_splits.shape(), &kept_splits));
    OP_REQUIRES_OK(ctx, ctx->allocate_output(1, TensorShape({kept}), &kept_rows));
    OP_REQUIRES_OK(ctx, ctx->allocate_output(2, TensorShape({kept}), &kept_gains));
    DropMissingLookups(splits, row_splits.NumElements(), row_values,
                       gains.flat<float>().data(), lookups, kept_splits->flat<int64_t>().data(),
                       kept_rows->flat<int64_t>().data(), kept_gains->flat<float>().data());
  }

 private:
  std::string table_name_;
};

// Records as [n, 3] int64 (key, count, last step).
absl::Status OutputRecords(OpKernelContext* ctx, int output,
                           const std::vector<KeyRecord>& records) {
  Tensor* tensor = nullptr;
  TF_RETURN_IF_ERROR(ctx->allocate_output(
      output, TensorShape({static_cast<int64_t>(records.size()), 3}), &tensor));
  auto matrix = tensor->matrix<int64_t>();
  for (size_t i = 0; i < records.size(); ++i) {
    matrix(i, 0) = records[i].key;
    matrix(i, 1) = records[i].count;
    matrix(i, 2) = records[i].last_seen;
  }
  return absl::OkStatus();
}

// The stats as the ops' [step, occupied, candidates, admitted, evicted, refused] output.
absl::Status OutputStats(OpKernelContext* ctx, int index, const DynamicIndexStats& stats) {
  Tensor* tensor = nullptr;
  TF_RETURN_IF_ERROR(ctx->allocate_output(index, TensorShape({6}), &tensor));
  auto flat = tensor->flat<int64_t>();
  flat(0) = stats.step;
  flat(1) = stats.occupied;
  flat(2) = stats.candidates;
  flat(3) = stats.admitted;
  flat(4) = stats.evicted;
  flat(5) = stats.refused;
  return absl::OkStatus();
}

class DynamicIndexExportOp : public OpKernel {
 public:
  using OpKernel::OpKernel;

  void Compute(OpKernelContext* ctx) override {
    tensorflow::core::RefCountPtr<DynamicIndexResource> index;
    OP_REQUIRES_OK(ctx, LookupIndex(ctx, &index));
    std::vector<KeyRecord> rows, candidates;
    DynamicIndexStats stats;
    {
      absl::MutexLock lock(&index->mu);
      index->index.Export(&rows, &candidates, &stats);
    }
    OP_REQUIRES_OK(ctx, OutputRecords(ctx, 0, rows));
    OP_REQUIRES_OK(ctx, OutputRecords(ctx, 1, candidates));
    OP_REQUIRES_OK(ctx, OutputStats(ctx, 2, stats));
  }
};

// The stats alone: no copy of the records (a table's worth of them).
class DynamicIndexStatsOp : public OpKernel {
 public:
  using OpKernel::OpKernel;

  void Compute(OpKernelContext* ctx) override {
    tensorflow::core::RefCountPtr<DynamicIndexResource> index;
    OP_REQUIRES_OK(ctx, LookupIndex(ctx, &index));
    DynamicIndexStats stats;
    {
      absl::MutexLock lock(&index->mu);
      stats = index->index.Stats();
    }
    OP_REQUIRES_OK(ctx, OutputStats(ctx, 0, stats));
  }
};

// TfeDynamicIndexImport, and with `kPlaced` TfeDynamicIndexImportPlaced: the records placed for
// this index's layout first, the moved keys' saved and new rows out.
template <bool kPlaced>
class DynamicIndexImportOp : public OpKernel {
 public:
  explicit DynamicIndexImportOp(OpKernelConstruction* ctx) : OpKernel(ctx) {
    OP_REQUIRES_OK(ctx, ctx->GetAttr("table_name", &table_name_));
  }

  void Compute(OpKernelContext* ctx) override {
    std::vector<KeyRecord> rows, candidates;
    OP_REQUIRES_OK(ctx, ReadRecords(ctx->input(1), "row_records", &rows));
    OP_REQUIRES_OK(ctx, ReadRecords(ctx->input(2), "candidate_records", &candidates));
    const Tensor& stats_tensor = ctx->input(3);
    OP_REQUIRES(ctx, stats_tensor.dims() == 1 && stats_tensor.dim_size(0) == 6,
                ToAbslStatus(TableError(table_name_, "the index's stats must have shape [6], "
                                        "got ", stats_tensor.shape().DebugString())));
    const auto flat = stats_tensor.flat<int64_t>();
    DynamicIndexStats stats;
    stats.step = flat(0);
    stats.admitted = flat(3);
    stats.evicted = flat(4);
    stats.refused = flat(5);
    tensorflow::core::RefCountPtr<DynamicIndexResource> index;
    OP_REQUIRES_OK(ctx, LookupIndex(ctx, &index));
    absl::MutexLock lock(&index->mu);
    if (!kPlaced) {
      OP_REQUIRES_OK(ctx, ToAbslStatus(index->index.Import(table_name_, rows, candidates,
                                                           stats)));
      return;
    }
    std::vector<KeyRecord> placed;
    std::vector<int64_t> saved_rows, new_rows;
    OP_REQUIRES_OK(ctx, ToAbslStatus(PlaceRows(table_name_, index->index, rows, &placed,
                                               &saved_rows, &new_rows)));
    OP_REQUIRES_OK(ctx, ToAbslStatus(index->index.Import(table_name_, placed, candidates,
                                                         stats)));
    OP_REQUIRES_OK(ctx, OutputVector(ctx, 0, saved_rows));
    OP_REQUIRES_OK(ctx, OutputVector(ctx, 1, new_rows));
  }

 private:
  absl::Status ReadRecords(const Tensor& tensor, const char* name,
                           std::vector<KeyRecord>* records) const {
    if (tensor.dims() != 2 || tensor.dim_size(1) != 3) {
      return ToAbslStatus(TableError(table_name_, "the index's ", name, " must have shape "
                                     "[n, 3], got ", tensor.shape().DebugString()));
    }
    const auto matrix = tensor.matrix<int64_t>();
    records->resize(tensor.dim_size(0));
    for (int64_t i = 0; i < tensor.dim_size(0); ++i) {
      (*records)[i] = KeyRecord{matrix(i, 0), matrix(i, 1), matrix(i, 2)};
    }
    return absl::OkStatus();
  }

  static absl::Status OutputVector(OpKernelContext* ctx, int index,
                                   const std::vector<int64_t>& values) {
    Tensor* output = nullptr;
    TF_RETURN_IF_ERROR(ctx->allocate_output(
        index, tensorflow::TensorShape({static_cast<int64_t>(values.size())}), &output));
    std::copy(values.begin(), values.end(), output->flat<int64_t>().data());
    return absl::OkStatus();
  }

  std::string table_name_;
};

REGISTER_KERNEL_BUILDER(Name("TfeDynamicIndex").Device(tensorflow::DEVICE_CPU), DynamicIndexOp);
REGISTER_KERNEL_BUILDER(Name("TfeDynamicLookup").Device(tensorflow::DEVICE_CPU),
                        DynamicLookupOp);
REGISTER_KERNEL_BUILDER(Name("TfeDropMissingLookups").Device(tensorflow::DEVICE_CPU),
                        DropMissingLookupsOp);
REGISTER_KERNEL_BUILDER(Name("TfeDynamicIndexExport").Device(tensorflow::DEVICE_CPU),
                        DynamicIndexExportOp);
REGISTER_KERNEL_BUILDER(Name("TfeDynamicIndexStats").Device(tensorflow::DEVICE_CPU),
                        DynamicIndexStatsOp);
REGISTER_KERNEL_BUILDER(Name("TfeDynamicIndexImport").Device(tensorflow::DEVICE_CPU),
                        DynamicIndexImportOp<false>);
REGISTER_KERNEL_BUILDER(Name("TfeDynamicIndexImportPlaced").Device(tensorflow::DEVICE_CPU),
                        DynamicIndexImportOp<true>);

}  // namespace
}  // namespace tf_embedding
