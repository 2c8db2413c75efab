// The handlers of the XLA CPU custom calls (custom_calls.h) of the lookup, gradient and
// sparse-apply ops (the CSR conversion's and the features lookup's are in
// ffi_conversion_handlers.cc, what both share in ffi_buffers.h): each runs its TF kernel's
// cc/core code on XLA's buffers, with the TF kernel's checks and messages, and returns an
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
#include <functional>
#include <memory>
#include <string>
#include <string_view>
#include <variant>
#include <vector>

#include "cc/core/csr_batch.h"
#include "cc/core/errors.h"
#include "cc/core/gradient_aggregation.h"
#include "cc/core/huge_pages.h"
#include "cc/core/optimizers.h"
#include "cc/core/parallel_steps.h"
#include "cc/core/pool_job.h"
#include "cc/kernels/gradient_groups_pool.h"
#include "cc/ops/sparse_apply_op_names.h"
#include "cc/xla/custom_calls.h"
#include "cc/xla/ffi_buffers.h"
#include "xla/ffi/api/ffi.h"

namespace tf_embedding {
namespace {

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

[[maybe_unused]] const bool kRegistered = [] {
  RegisterFfiHandler(kLookupTarget, kLookupHandler);
  RegisterFfiHandler(kGradientTarget, kGradientHandler);
  AllRules::ForEach([](auto rule) {
    using Rule = decltype(rule);
    RegisterFfiHandler(SparseApplyTarget(SparseApplyOpName<Rule>()),
                       SparseApplyHandler<Rule, CsrGradients>);
    RegisterFfiHandler(SparseApplyTarget(SparseApplyRowsOpName<Rule>()),
                       SparseApplyHandler<Rule, RowGradients>);
  });
  return true;
}();

}  // namespace
}  // namespace tf_embedding
