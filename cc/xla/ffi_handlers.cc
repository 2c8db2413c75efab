// The handlers of the XLA CPU custom calls (custom_calls.h): each runs its TF kernel's cc/core
// code on XLA's buffers, with the TF kernel's checks and messages, and returns an
// InvalidArgument error where the TF kernel fails, so the compiled step raises
// InvalidArgumentError naming the table (and feature). Tables and slots are updated in place:
// the sparse-apply calls alias their results to the variables' buffers.
//
// Threads: the handlers shard their loops (cc/core/parallel_steps.h) on the thread pool XLA
// gives custom calls, its run's intra-op pool, which TensorFlow sets to the device's intra-op
// pool: the uncompiled kernels' threads. The sparse-apply handlers are asynchronous: their work
// runs as tasks on that pool (RunOnPool), so that XLA runs the tables' calls side by side.
#include <algorithm>
#include <array>
#include <cstdint>
#include <cstring>
#include <functional>
#include <memory>
#include <string>
#include <string_view>
#include <variant>
#include <vector>

#include "cc/core/claiming_sharder.h"
#include "cc/core/csr_batch.h"
#include "cc/core/csr_conversion.h"
#include "cc/core/errors.h"
#include "cc/core/features_lookup.h"
#include "cc/core/gradient_aggregation.h"
#include "cc/core/huge_pages.h"
#include "cc/core/optimizers.h"
#include "cc/core/parallel_steps.h"
#include "cc/core/pool_job.h"
#include "cc/kernels/gradient_groups_pool.h"
#include "cc/ops/sparse_apply_op_names.h"
#include "cc/xla/custom_calls.h"
#include "xla/ffi/api/ffi.h"

// The process's FFI registry, in libtensorflow_cc. Declared here rather than through
// xla/ffi/ffi_api.h, which needs MLIR headers that TensorFlow's wheel does not ship.
namespace xla::ffi {
const XLA_FFI_Api* GetXlaFfiApi();
}  // namespace xla::ffi

namespace tf_embedding {
namespace {

namespace ffi = ::xla::ffi;

ffi::Error ToFfiError(const Status& status) {
  if (status.ok()) return ffi::Error::Success();
  return ffi::Error::InvalidArgument(status.message());
}

// A Sharder on XLA's intra-op pool (ClaimingSharder): the caller, the thread running the
// program, and a task per pool thread but one, so that a call's work runs on as many threads as
// the pool has, as the TF kernels' does. A task more left 3 threads on 2 cores at 2 threads and
// took a 2-thread compiled training step from 25-36 ms to 36-39 ms (Zipf ids, alternating op
// libraries). XLA runs independent custom calls (one per table) on the same pool, and a caller
// that blocked until its queued tasks ran could wait for pool threads that are all blocked the
// same way: claimed shards never wait for a task that has not started.
Sharder PoolSharder(ffi::ThreadPool& pool) {
  return ClaimingSharder(pool.num_threads() - 1,
                         [&pool](std::function<void()> task) { pool.Schedule(std::move(task)); });
}

template <typename T>
T* Data(const ffi::AnyBuffer& buffer) {
  return static_cast<T*>(buffer.untyped_data());
}

// The element count of a buffer, as the core views count.
int64_t Size(const ffi::AnyBuffer& buffer) {
  return static_cast<int64_t>(buffer.element_count());
}

// A CSR batch of a compiled step. Its ids and gains may be longer than its row_splits say: the
// conversion's custom call sizes them for every input id, and the lookups it drops (pruned ids
// and weights, positions past max_sequence_length) leave padding after the last row, which the
// view leaves out. Anything else is left for ValidateCsrBatch to reject.
CsrBatch CompiledCsrBatch(const ffi::AnyBuffer& row_splits, const ffi::AnyBuffer& ids,
                          const ffi::AnyBuffer& gains) {
  CsrBatch batch{Data<int64_t>(row_splits), Size(row_splits), Data<int64_t>(ids), Size(ids),
                 Data<float>(gains),        Size(gains)};
  if (batch.num_row_splits >= 1 && batch.num_ids == batch.num_gains) {
    const int64_t end = batch.row_splits[batch.num_row_splits - 1];
    if (end >= 0 && end <= batch.num_ids) batch.num_ids = batch.num_gains = end;
  }
  return batch;
}

// Checks that `buffer` is a float matrix of `rows` x `dim` (`rows` < 0: any). XLA compiled the
// call for the shapes the tf2xla kernel checked; this guards the handler against a call built
// otherwise.
Status CheckMatrix(const ffi::AnyBuffer& buffer, const char* what, int64_t rows, int64_t dim) {
  const auto dims = buffer.dimensions();
  if (buffer.element_type() == ffi::DataType::F32 && dims.size() == 2 &&
      (rows < 0 || dims[0] == rows) && dims[1] == dim) {
    return Status();
  }
  return InvalidArgument(what, " of the custom call is not a float matrix of the expected shape");
}

// TfeEmbeddingLookup and TfeEmbeddingLookupDense: the activations of a CSR batch.
ffi::Error Lookup(ffi::ThreadPool pool, ffi::AnyBuffer table, ffi::AnyBuffer row_splits,
                  ffi::AnyBuffer ids, ffi::AnyBuffer gains,
                  ffi::Result<ffi::AnyBuffer> activations, std::string_view table_name) {
  const std::string name(table_name);
  const auto table_dims = table.dimensions();
  if (table_dims.size() != 2) return ToFfiError(TableError(name, "table must be a matrix"));
  const int64_t rows = table_dims[0], dim = table_dims[1];
  const CsrBatch batch = CompiledCsrBatch(row_splits, ids, gains);
  Status status = ValidateCsrBatch(batch, rows).WithContext(TableContext(name));
  if (status.ok()) status = CheckMatrix(*activations, "activations", batch.num_rows(), dim);
  if (!status.ok()) return ToFfiError(status);
  AdviseHugePages(table.untyped_data(), table.size_bytes());
  LookUpRows(batch, Data<float>(table), dim, Data<float>(*activations), PoolSharder(pool));
  return ffi::Error::Success();
}

// The N CSR batches of operands [first, first + 4N): row_splits, ids, gains and
// activation_gradients, N of each.
Status ReadGradientBatches(const ffi::RemainingArgs& args, size_t first, int64_t num_batches,
                           int64_t dim, std::vector<GradientBatch>* batches) {
  batches->assign(num_batches, GradientBatch());
  for (int64_t b = 0; b < num_batches; ++b) {
    ffi::AnyBuffer operands[4] = {ffi::AnyBuffer(nullptr), ffi::AnyBuffer(nullptr),
                                  ffi::AnyBuffer(nullptr), ffi::AnyBuffer(nullptr)};
    for (int64_t k = 0; k < 4; ++k) {
      const auto operand = args.get<ffi::AnyBuffer>(first + k * num_batches + b);
      if (operand.has_error()) return Status::Error(operand.error().message());
      operands[k] = operand.value();
    }
    GradientBatch& batch = (*batches)[b];
    batch.csr = CompiledCsrBatch(operands[0], operands[1], operands[2]);
    TFE_RETURN_IF_ERROR(CheckMatrix(operands[3], "activation_gradients",
                                    std::max<int64_t>(batch.csr.num_rows(), 0), dim)
                            .WithContext(BatchContext(b)));
    batch.activation_gradients = Data<float>(operands[3]);
  }
  return Status();
}

// The N lists of operands [first, first + 2N): unique_ids, then rows.
Status ReadSortedRows(const ffi::RemainingArgs& args, size_t first, int64_t num_lists,
                     int64_t dim, std::vector<SortedRows>* lists) {
  lists->assign(num_lists, SortedRows());
  for (int64_t b = 0; b < num_lists; ++b) {
    const auto ids = args.get<ffi::AnyBuffer>(first + b);
    const auto rows = args.get<ffi::AnyBuffer>(first + num_lists + b);
    if (ids.has_error()) return Status::Error(ids.error().message());
    if (rows.has_error()) return Status::Error(rows.error().message());
    const int64_t num_ids = Size(ids.value());
    TFE_RETURN_IF_ERROR(
        CheckMatrix(rows.value(), "rows", num_ids, dim).WithContext(BatchContext(b)));
    (*lists)[b] = {Data<int64_t>(ids.value()), num_ids, Data<float>(rows.value())};
  }
  return Status();
}

// The one GradientGroups pool of each handler: XLA may run a handler concurrently.
template <typename Tag>
GradientGroupsPool& GroupsPool() {
  static GradientGroupsPool* pool = new GradientGroupsPool();
  return *pool;
}

// TfeEmbeddingGradient: the unique ids ascending, then distinct negative ids (-1, -2, ...)
// with zero rows up to the number of lookups, the static size of the outputs.
ffi::Error Gradient(ffi::ThreadPool pool, ffi::RemainingArgs args,
                    ffi::Result<ffi::AnyBuffer> unique_ids, ffi::Result<ffi::AnyBuffer> values,
                    std::string_view table_name, int64_t num_batches, int64_t vocabulary_size) {
  const std::string name(table_name);
  const auto dims = values->dimensions();
  if (dims.size() != 2) return ToFfiError(TableError(name, "values must be a matrix"));
  const int64_t capacity = dims[0], dim = dims[1];
  std::vector<GradientBatch> batches;
  const GradientGroupsPool::Lease lease = GroupsPool<struct GradientTag>().Take();
  GradientGroups& groups = *lease.get();
  Status status = ReadGradientBatches(args, 0, num_batches, dim, &batches);
  if (status.ok()) status = GroupLookupsById(batches, dim, &groups);
  if (status.ok() && vocabulary_size >= 0) status = CheckIdsBelow(groups, vocabulary_size);
  const int64_t num_unique = groups.num_unique();
  if (status.ok() && (Size(*unique_ids) != capacity || num_unique > capacity)) {
    status = InvalidArgument("the gradient's outputs hold ", capacity, " ids, fewer than its ",
                             num_unique, " unique ids");
  }
  if (!status.ok()) return ToFfiError(status.WithContext(TableContext(name)));
  int64_t* out_ids = Data<int64_t>(*unique_ids);
  std::copy(groups.unique_ids.begin(), groups.unique_ids.end(), out_ids);
  for (int64_t u = num_unique; u < capacity; ++u) out_ids[u] = num_unique - u - 1;
  float* out = Data<float>(*values);
  std::fill(out + num_unique * dim, out + capacity * dim, 0.0f);
  SumGroups(groups, dim, out, PoolSharder(pool));
  return ffi::Error::Success();
}

// Reads the hyperparameters of Params (hyperparameters.h) from the call's attributes.
template <typename Params>
Status ReadHyperparameters(const ffi::Dictionary& attributes, Params* params) {
  for (const auto& hyperparameter : Params::Hyperparameters()) {
    Status status;
    std::visit(
        [&](auto member) {
          using Value = std::remove_reference_t<decltype(params->*member)>;
          const auto value = attributes.get<Value>(hyperparameter.name);
          if (value.has_error()) {
            status = InvalidArgument("attribute ", hyperparameter.name, ": ",
                                     value.error().message());
          } else {
            params->*member = value.value();
          }
        },
        hyperparameter.member);
    TFE_RETURN_IF_ERROR(status);
  }
  return Status();
}

// The gradient forms of the sparse-apply handlers, as the TF kernels': how many operands a
// list holds per element, how they are read as views, and how the views are grouped by id.
template <int64_t kOperands, typename View, auto kRead, auto kGroup>
struct GradientForm {
  using Views = std::vector<View>;
  static constexpr int64_t kOperandsPerBatch = kOperands;
  static Status Read(const ffi::RemainingArgs& args, size_t first, int64_t n, int64_t dim,
                     Views* views) {
    return kRead(args, first, n, dim, views);
  }
  static Status Group(const Views& views, int64_t dim, GradientGroups* groups) {
    return kGroup(views, dim, groups);
  }
};
// TfeSparseApply<Rule>: row_splits, ids, gains and activation_gradients per batch.
using CsrGradients = GradientForm<4, GradientBatch, ReadGradientBatches, GroupLookupsById>;
// TfeSparseApply<Rule>Rows: unique_ids and rows per list.
using RowGradients = GradientForm<2, SortedRows, ReadSortedRows, GroupSortedRows>;

// A call's Future, failed with `error`.
ffi::Future Failed(ffi::Error error) {
  ffi::Promise promise;
  promise.SetError(std::move(error));
  return ffi::Future(promise);
}

// Runs `body` (its loops on the Sharder it is given) as the call's asynchronous work: on tasks
// of XLA's pool (PoolJob), so that XLA starts the next independent custom call, such as the
// next table's, while this one runs. The Future fails with the body's error, in table `name`'s
// context. A pool of one thread runs the body in the call.
ffi::Future RunOnPool(ffi::ThreadPool& pool, PoolJob::Body body, const std::string& name) {
  ffi::Promise promise;
  ffi::Future future(promise);
  auto done = [promise, name](const Status& status) mutable {
    if (status.ok()) {
      promise.SetAvailable();
    } else {
      promise.SetError(ToFfiError(status.WithContext(TableContext(name))));
    }
  };
  if (pool.num_threads() <= 1) {
    done(body(PoolSharder(pool)));
  } else {
    PoolJob::Start(pool.num_threads(),
                   [&pool](std::function<void()> task) { pool.Schedule(std::move(task)); },
                   std::move(body), std::move(done));
  }
  return future;
}

// TfeSparseApply<Rule>[Rows]. Operands: the table, Rule's slots, the gradient lists, the
// learning rate; results: the table and slots, aliased to their operands. The call checks its
// operands and returns; grouping the gradient by id and the row updates run on XLA's pool
// (RunOnPool).
template <typename Rule, typename Gradients>
ffi::Future SparseApply(ffi::ThreadPool pool, ffi::RemainingArgs args, ffi::RemainingRets rets,
                        ffi::Dictionary attributes) {
  constexpr int kNumVariables = 1 + Rule::kNumSlots;
  const auto table_name = attributes.get<std::string_view>("table_name");
  const auto num_batches = attributes.get<int64_t>("num_batches");
  if (table_name.has_error()) return Failed(table_name.error());
  if (num_batches.has_error()) return Failed(num_batches.error());
  const std::string name(table_name.value());
  const int64_t n = num_batches.value();
  const auto fail = [&](const Status& status) {
    return Failed(ToFfiError(status.WithContext(TableContext(name))));
  };
  if (static_cast<int64_t>(args.size()) != kNumVariables + Gradients::kOperandsPerBatch * n + 1 ||
      static_cast<int64_t>(rets.size()) != kNumVariables) {
    return fail(Status::Error("the custom call has the wrong number of operands"));
  }
  CommonUpdateParams common;
  Rule rule;
  Status status = ReadHyperparameters(attributes, &common);
  if (status.ok()) status = ReadHyperparameters(attributes, &rule);
  const auto lr = args.get<ffi::AnyBuffer>(args.size() - 1);
  if (lr.has_error()) return Failed(lr.error());
  if (status.ok() && (lr.value().element_type() != ffi::DataType::F32 || Size(lr.value()) != 1)) {
    status = Status::Error("learning_rate must be a float scalar");
  }
  if (!status.ok()) return fail(status);
  const float learning_rate = *Data<float>(lr.value());
  // The TF kernel's order of checks: the learning rate, the gradients, then the ids against
  // the table.
  status = CheckLearningRate(name, learning_rate);
  if (!status.ok()) return Failed(ToFfiError(status));
  std::array<float*, kNumVariables> variables;
  int64_t rows = 0, dim = 0;
  for (int i = 0; i < kNumVariables; ++i) {
    const auto in = args.get<ffi::AnyBuffer>(i);
    auto out = rets.get<ffi::AnyBuffer>(i);
    if (in.has_error()) return Failed(in.error());
    if (out.has_error()) return Failed(out.error());
    const auto dims = in.value().dimensions();
    if (i == 0 && dims.size() == 2) rows = dims[0], dim = dims[1];
    status = CheckMatrix(in.value(), "variable", rows, dim);
    ffi::Result<ffi::AnyBuffer> result = out.value();
    if (status.ok() && (result->untyped_data() != in.value().untyped_data() ||
                        result->size_bytes() != in.value().size_bytes())) {
      status = Status::Error("the custom call's results do not alias its variables");
    }
    if (!status.ok()) return fail(status);
    variables[i] = Data<float>(in.value());
  }
  typename Gradients::Views views;
  status = Gradients::Read(args, kNumVariables, n, dim, &views);
  if (!status.ok()) return fail(status);
  auto body = [views = std::move(views), variables, rows, dim, rule, common,
               learning_rate](const Sharder& shard) {
    const GradientGroupsPool::Lease lease = GroupsPool<Rule>().Take();
    GradientGroups& groups = *lease.get();
    TFE_RETURN_IF_ERROR(Gradients::Group(views, dim, &groups));
    TFE_RETURN_IF_ERROR(CheckIdsBelow(groups, rows));
    std::array<float*, Rule::kNumSlots> slots;
    for (int k = 0; k < Rule::kNumSlots; ++k) slots[k] = variables[1 + k];
    for (int i = 0; i < kNumVariables; ++i) {
      AdviseHugePages(variables[i], static_cast<size_t>(rows * dim) * sizeof(float));
    }
    ApplyGroups(rule, common, learning_rate, groups, dim, rows, variables[0], slots, shard);
    return Status();
  };
  return RunOnPool(pool, std::move(body), name);
}

// The table and feature specs of the attributes `prefix`... (AddCsrConversionAttributes).
ffi::Error ReadConversionSpecs(const ffi::Dictionary& attributes, const std::string& prefix,
                               TableSpec* table, std::vector<FeatureSpec>* specs) {
  const auto table_name = attributes.get<std::string_view>(prefix + "table_name");
  const auto vocabulary_size = attributes.get<int64_t>(prefix + "vocabulary_size");
  const auto combiner = attributes.get<int64_t>(prefix + "combiner");
  const auto kinds = attributes.get<ffi::Span<const int64_t>>(prefix + "input_kinds");
  const auto has_weights = attributes.get<ffi::Span<const int64_t>>(prefix + "has_weights");
  const auto max_sequence_lengths =
      attributes.get<ffi::Span<const int64_t>>(prefix + "max_sequence_lengths");
  const auto prune_invalid = attributes.get<ffi::Span<const int64_t>>(prefix + "prune_invalid");
  for (const ffi::Error* error :
       {table_name.has_error() ? &table_name.error() : nullptr,
        vocabulary_size.has_error() ? &vocabulary_size.error() : nullptr,
        combiner.has_error() ? &combiner.error() : nullptr,
        kinds.has_error() ? &kinds.error() : nullptr,
        has_weights.has_error() ? &has_weights.error() : nullptr,
        max_sequence_lengths.has_error() ? &max_sequence_lengths.error() : nullptr,
        prune_invalid.has_error() ? &prune_invalid.error() : nullptr}) {
    if (error != nullptr) return *error;
  }
  *table = TableSpec{std::string(table_name.value()), vocabulary_size.value(),
                     static_cast<Combiner>(combiner.value())};
  const size_t num_features = kinds.value().size();
  if (has_weights.value().size() != num_features ||
      max_sequence_lengths.value().size() != num_features ||
      prune_invalid.value().size() != num_features) {
    return ToFfiError(TableError(table->name, "the custom call's feature attributes differ in "
                                 "length"));
  }
  specs->assign(num_features, FeatureSpec());
  for (size_t f = 0; f < num_features; ++f) {
    const auto feature_name =
        attributes.get<std::string_view>(prefix + "feature_name_" + std::to_string(f));
    if (feature_name.has_error()) return feature_name.error();
    (*specs)[f] = FeatureSpec{std::string(feature_name.value()),
                              static_cast<InputKind>(kinds.value()[f]),
                              has_weights.value()[f] != 0, max_sequence_lengths.value()[f],
                              prune_invalid.value()[f] != 0};
  }
  return ffi::Error::Success();
}

// Feature f's tensors from operands [first, first + 4N): ids, row_info, dense_shapes and
// weights, N of each.
ffi::Error ReadFeatureOperands(const ffi::RemainingArgs& args, size_t first, int64_t num_features,
                               int64_t f, FeatureTensors* t) {
  ffi::AnyBuffer operands[4] = {ffi::AnyBuffer(nullptr), ffi::AnyBuffer(nullptr),
                                ffi::AnyBuffer(nullptr), ffi::AnyBuffer(nullptr)};
  for (int64_t k = 0; k < 4; ++k) {
    const auto operand = args.get<ffi::AnyBuffer>(first + k * num_features + f);
    if (operand.has_error()) return operand.error();
    operands[k] = operand.value();
  }
  if (operands[0].element_type() == ffi::DataType::S32) {
    t->ids = IdSpan(Data<int32_t>(operands[0]), Size(operands[0]));
  } else {
    t->ids = IdSpan(Data<int64_t>(operands[0]), Size(operands[0]));
  }
  t->row_info = {Data<int64_t>(operands[1]), Size(operands[1])};
  t->row_info_shape.clear();
  for (const int64_t d : operands[1].dimensions()) t->row_info_shape.push_back(d);
  t->dense_shape = {Data<int64_t>(operands[2]), Size(operands[2])};
  t->weights = {Data<float>(operands[3]), Size(operands[3])};
  return ffi::Error::Success();
}

// TfeFeaturesToCsr. Operands: ids, row_info, dense_shapes and weights, N of each; results:
// row_splits, then ids and gains sized for every input id, padded after the last row
// (CompiledCsrBatch) with id 0 and gain 0.
ffi::Error FeaturesToCsr(ffi::RemainingArgs args, ffi::Result<ffi::AnyBuffer> row_splits,
                         ffi::Result<ffi::AnyBuffer> ids, ffi::Result<ffi::AnyBuffer> gains,
                         ffi::Dictionary attributes) {
  TableSpec table;
  std::vector<FeatureSpec> specs;
  if (ffi::Error error = ReadConversionSpecs(attributes, "", &table, &specs); error.failure()) {
    return error;
  }
  const int64_t num_features = static_cast<int64_t>(specs.size());
  if (static_cast<int64_t>(args.size()) != 4 * num_features) {
    return ToFfiError(TableError(table.name, "the custom call has the wrong number of operands"));
  }
  std::vector<FeatureTensors> tensors(num_features);
  for (int64_t f = 0; f < num_features; ++f) {
    if (ffi::Error error = ReadFeatureOperands(args, 0, num_features, f, &tensors[f]);
        error.failure()) {
      return error;
    }
  }
  CsrBuilder builder(table);
  Status status = builder.AddFeatures(specs, tensors.data());
  const int64_t capacity = Size(*ids);
  if (status.ok() && (Size(*row_splits) != builder.num_rows() + 1 || Size(*gains) != capacity ||
                      builder.num_lookups() > capacity)) {
    status = TableError(table.name, "the conversion's outputs do not fit its ",
                        builder.num_rows(), " rows and ", builder.num_lookups(), " lookups");
  }
  if (!status.ok()) return ToFfiError(status);
  int64_t* out_ids = Data<int64_t>(*ids);
  float* out_gains = Data<float>(*gains);
  // A lone contiguous int64 feature's ids are the CSR ids, which Build then does not write.
  const bool copy_ids = builder.CsrIdsAreFeatureIds();
  builder.Build(Data<int64_t>(*row_splits), copy_ids ? nullptr : out_ids, out_gains);
  if (copy_ids) tensors[0].ids.CopyTo(out_ids);
  std::fill(out_ids + builder.num_lookups(), out_ids + capacity, 0);
  std::fill(out_gains + builder.num_lookups(), out_gains + capacity, 0.0f);
  return ffi::Error::Success();
}


// TfeFeaturesLookup. Operands: the M tables, then ids, row_info, dense_shapes and weights, N of
// each (every table's features, table by table); results: each table's activations. Attributes:
// num_tables, and each table's specs under TablePrefix(t).
ffi::Error FeaturesLookup(ffi::ThreadPool pool, ffi::RemainingArgs args, ffi::RemainingRets rets,
                          ffi::Dictionary attributes) {
  const auto num_tables = attributes.get<int64_t>("num_tables");
  if (num_tables.has_error()) return num_tables.error();
  const size_t m = static_cast<size_t>(num_tables.value());
  std::vector<TableSpec> specs(m);
  std::vector<std::vector<FeatureSpec>> features(m);
  int64_t num_features = 0;
  for (size_t t = 0; t < m; ++t) {
    if (ffi::Error error = ReadConversionSpecs(attributes, TablePrefix(t), &specs[t],
                                               &features[t]);
        error.failure()) {
      return error;
    }
    num_features += static_cast<int64_t>(features[t].size());
  }
  if (args.size() != m + 4 * num_features || rets.size() != m) {
    return ToFfiError(Status::Error("the features lookup's custom call has the wrong number of "
                                    "operands"));
  }
  std::vector<FeatureTensors> tensors(num_features);
  for (int64_t f = 0; f < num_features; ++f) {
    if (ffi::Error error = ReadFeatureOperands(args, m, num_features, f, &tensors[f]);
        error.failure()) {
      return error;
    }
  }
  std::vector<TableFeatures> tables(m);
  std::vector<std::vector<int64_t>> row_counts(m);  // known when compiling: not a result
  size_t first_feature = 0;
  for (size_t t = 0; t < m; ++t) {
    const auto table = args.get<ffi::AnyBuffer>(t);
    if (table.has_error()) return table.error();
    const auto dims = table.value().dimensions();
    if (dims.size() != 2) return ToFfiError(TableError(specs[t].name, "table must be a matrix"));
    const Status rows = CheckTableHoldsVocabulary(specs[t], dims[0]);
    if (!rows.ok()) return ToFfiError(rows);
    AdviseHugePages(table.value().untyped_data(), table.value().size_bytes());
    tables[t] = {&specs[t], &features[t], &tensors[first_feature], Data<float>(table.value()),
                 dims[1]};
    first_feature += features[t].size();
    row_counts[t].resize(features[t].size());
  }
  const LookupOutputs outputs = [&](size_t t, int64_t rows, float** activations,
                                    int64_t** counts) {
    auto result = rets.get<ffi::AnyBuffer>(t);
    if (result.has_error()) return Status::Error(std::string(result.error().message()));
    ffi::Result<ffi::AnyBuffer> buffer = result.value();
    TFE_RETURN_IF_ERROR(CheckMatrix(*buffer, "activations", rows, tables[t].dim)
                            .WithContext(TableContext(specs[t].name)));
    *activations = Data<float>(*buffer);
    *counts = row_counts[t].data();
    return Status();
  };
  return ToFfiError(LookUpTablesFeatures(tables, outputs, pool.num_threads(), PoolSharder(pool)));
}

XLA_FFI_DEFINE_HANDLER(kLookupHandler, Lookup,
                       ffi::Ffi::Bind()
                           .Ctx<ffi::ThreadPool>()
                           .Arg<ffi::AnyBuffer>()
                           .Arg<ffi::AnyBuffer>()
                           .Arg<ffi::AnyBuffer>()
                           .Arg<ffi::AnyBuffer>()
                           .Ret<ffi::AnyBuffer>()
                           .Attr<std::string_view>("table_name"));

XLA_FFI_DEFINE_HANDLER(kGradientHandler, Gradient,
                       ffi::Ffi::Bind()
                           .Ctx<ffi::ThreadPool>()
                           .RemainingArgs()
                           .Ret<ffi::AnyBuffer>()
                           .Ret<ffi::AnyBuffer>()
                           .Attr<std::string_view>("table_name")
                           .Attr<int64_t>("num_batches")
                           .Attr<int64_t>("vocabulary_size"));

XLA_FFI_DEFINE_HANDLER(kFeaturesLookupHandler, FeaturesLookup,
                       ffi::Ffi::Bind()
                           .Ctx<ffi::ThreadPool>()
                           .RemainingArgs()
                           .RemainingRets()
                           .Attrs<ffi::Dictionary>());

XLA_FFI_DEFINE_HANDLER(kFeaturesToCsrHandler, FeaturesToCsr,
                       ffi::Ffi::Bind()
                           .RemainingArgs()
                           .Ret<ffi::AnyBuffer>()
                           .Ret<ffi::AnyBuffer>()
                           .Ret<ffi::AnyBuffer>()
                           .Attrs<ffi::Dictionary>());

template <typename Rule, typename Gradients>
XLA_FFI_Error* SparseApplyHandler(XLA_FFI_CallFrame* call_frame) {
  static auto* handler = ffi::Ffi::Bind()
                             .Ctx<ffi::ThreadPool>()
                             .RemainingArgs()
                             .RemainingRets()
                             .Attrs<ffi::Dictionary>()
                             .To(SparseApply<Rule, Gradients>)
                             .release();
  return handler->Call(call_frame);
}

// XLA's CPU backend, as the FFI registry names it.
constexpr char kPlatform[] = "Host";

void Register(const std::string& name, XLA_FFI_Handler* handler) {
  // Registration fails only for a name taken twice, which the names rule out.
  ffi::Ffi::RegisterStaticHandler(ffi::GetXlaFfiApi(), name, kPlatform, handler);
}

[[maybe_unused]] const bool kRegistered = [] {
  Register(kLookupTarget, kLookupHandler);
  Register(kGradientTarget, kGradientHandler);
  Register(kFeaturesToCsrTarget, kFeaturesToCsrHandler);
  Register(kFeaturesLookupTarget, kFeaturesLookupHandler);
  AllRules::ForEach([](auto rule) {
    using Rule = decltype(rule);
    Register(SparseApplyTarget(SparseApplyOpName<Rule>()),
             SparseApplyHandler<Rule, CsrGradients>);
    Register(SparseApplyTarget(SparseApplyRowsOpName<Rule>()),
             SparseApplyHandler<Rule, RowGradients>);
  });
  return true;
}();

}  // namespace
}  // namespace tf_embedding
