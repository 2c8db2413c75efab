// The handlers of the sparse-apply custom calls (TfeSparseApply<Rule>[Rows], custom_calls.h):
// each runs the TF kernel's cc/core code (gradient grouping, then the optimizer's row updates)
// on XLA's buffers, with the TF kernel's checks and messages, and updates the table and slots in
// place: the calls alias their results to the variables' buffers.
//
// The handlers are asynchronous: a call checks its operands and returns a Future, and its work
// runs as tasks on XLA's intra-op pool (RunOnPool), so that XLA runs the tables' calls side by
// side.
#include <array>
#include <cstdint>
#include <functional>
#include <string>
#include <string_view>
#include <type_traits>
#include <utility>
#include <variant>
#include <vector>

#include "cc/core/errors.h"
#include "cc/core/gradient_aggregation.h"
#include "cc/core/huge_pages.h"
#include "cc/core/optimizers.h"
#include "cc/core/parallel_steps.h"
#include "cc/core/pool_job.h"
#include "cc/ops/sparse_apply_op_names.h"
#include "cc/xla/custom_calls.h"
#include "cc/xla/ffi_buffers.h"

namespace tf_embedding {
namespace {

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

// The work of a TfeSparseApply<Rule>[Rows] call whose operands are read and checked: groups the
// gradient `views` by id, checks the ids against the table's `rows`, then applies Rule to each
// touched row of the `variables` (the table, then Rule's slots), on XLA's pool (RunOnPool).
template <typename Rule, typename Gradients, size_t kNumVariables>
ffi::Future ApplyOnPool(ffi::ThreadPool& pool, typename Gradients::Views views,
                        const std::array<float*, kNumVariables>& variables, int64_t rows,
                        int64_t dim, const Rule& rule, const CommonUpdateParams& common,
                        float learning_rate, const std::string& name) {
  auto body = [views = std::move(views), variables, rows, dim, rule, common,
               learning_rate](const Sharder& shard) {
    const GradientGroupsPool::Lease lease = GroupsPool<Rule>().Take();
    GradientGroups& groups = *lease.get();
    TFE_RETURN_IF_ERROR(Gradients::Group(views, dim, &groups));
    TFE_RETURN_IF_ERROR(CheckIdsBelow(groups, rows));
    std::array<float*, Rule::kNumSlots> slots;
    for (int k = 0; k < Rule::kNumSlots; ++k) slots[k] = variables[1 + k];
    for (size_t i = 0; i < kNumVariables; ++i) {
      AdviseHugePages(variables[i], static_cast<size_t>(rows * dim) * sizeof(float));
    }
    ApplyGroups(rule, common, learning_rate, groups, dim, rows, variables[0], slots, shard);
    return Status();
  };
  return RunOnPool(pool, std::move(body), name);
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
  return ApplyOnPool<Rule, Gradients>(pool, std::move(views), variables, rows, dim, rule, common,
                                      learning_rate, name);
}

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
  AllRules::ForEach([](auto rule) {
    using Rule = decltype(rule);
    RegisterHostHandler(SparseApplyTarget(SparseApplyOpName<Rule>()),
                        SparseApplyHandler<Rule, CsrGradients>);
    RegisterHostHandler(SparseApplyTarget(SparseApplyRowsOpName<Rule>()),
                        SparseApplyHandler<Rule, RowGradients>);
  });
  return true;
}();

}  // namespace
}  // namespace tf_embedding
