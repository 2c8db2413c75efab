// Fuzz target: the backward pass and the optimizer updates, as the sparse-apply kernels run
// them: CSR batches with activation gradients grouped by id (GroupLookupsById), or per-list
// summed rows merged (GroupSortedRows), the ids checked against the table's rows
// (CheckIdsBelow), then every optimizer rule with fuzzed hyperparameters and shared knobs over
// the touched rows (or every row, non-lazy Adam), in two ranges of units. Properties beyond
// memory safety: the groups' ids ascend and lie below the table's rows; every vector ISA the
// machine has updates the table and its slots into the same bits.
#include <algorithm>
#include <array>
#include <cstdint>
#include <type_traits>
#include <utility>
#include <variant>
#include <vector>

#include "cc/core/csr_batch.h"
#include "cc/core/gradient_aggregation.h"
#include "cc/core/optimizers.h"
#include "cc/core/row_updates.h"
#include "cc/core/simd_dispatch.h"
#include "tools/fuzz_core/fuzz_input.h"

namespace tf_embedding::fuzz {
namespace {

// Gradient inputs as the kernels pass them, with the buffers they point into.
struct Gradients {
  std::vector<std::vector<int64_t>> ids, row_splits;
  std::vector<std::vector<float>> gains, rows;
};

Status GroupBatches(FuzzedDataProvider& in, int64_t vocabulary_size, int64_t dim,
                    Gradients& g, GradientGroups* groups) {
  std::vector<GradientBatch> batches(in.ConsumeIntegralInRange<int>(1, 3));
  for (GradientBatch& batch : batches) {
    g.ids.push_back(Int64s(in, vocabulary_size + 1));
    const int64_t num_ids = static_cast<int64_t>(g.ids.back().size());
    g.row_splits.push_back(Splits(in, num_ids));
    g.gains.push_back(Floats(in, in.ConsumeIntegralInRange<int>(0, 15) == 0
                                     ? in.ConsumeIntegralInRange<int64_t>(0, 9) : num_ids));
    // The kernels check the gradients' shape first: one row per output row.
    const int64_t rows = std::max<int64_t>(static_cast<int64_t>(g.row_splits.back().size()) - 1,
                                           0);
    g.rows.push_back(Floats(in, rows * dim));
    batch.csr = {g.row_splits.back().data(), static_cast<int64_t>(g.row_splits.back().size()),
                 g.ids.back().data(), num_ids, g.gains.back().data(),
                 static_cast<int64_t>(g.gains.back().size())};
    batch.activation_gradients = g.rows.back().data();
  }
  return GroupLookupsById(batches, dim, groups);
}

Status GroupLists(FuzzedDataProvider& in, int64_t vocabulary_size, int64_t dim, Gradients& g,
                  GradientGroups* groups) {
  std::vector<SortedRows> lists(in.ConsumeIntegralInRange<int>(1, 3));
  for (SortedRows& list : lists) {
    std::vector<int64_t> ids = Int64s(in, vocabulary_size + 1, 12);
    if (in.ConsumeIntegralInRange<int>(0, 7) != 0) std::sort(ids.begin(), ids.end());
    g.ids.push_back(ids);
    g.rows.push_back(Floats(in, static_cast<int64_t>(ids.size()) * dim));
    list = {g.ids.back().data(), static_cast<int64_t>(ids.size()), g.rows.back().data()};
  }
  return GroupSortedRows(lists, dim, groups);
}

template <typename Params>
void ConsumeHyperparameters(FuzzedDataProvider& in, Params* params) {
  for (const auto& hyperparameter : Params::Hyperparameters()) {
    if (std::holds_alternative<bool Params::*>(hyperparameter.member)) {
      params->*std::get<bool Params::*>(hyperparameter.member) = in.ConsumeBool();
    } else if (in.ConsumeBool()) {
      params->*std::get<float Params::*>(hyperparameter.member) = AnyFloat(in);
    }
  }
}

template <typename Rule>
void CheckRule(FuzzedDataProvider& in, const GradientGroups& groups, int64_t vocabulary_size,
               int64_t dim) {
  Rule rule;
  ConsumeHyperparameters(in, &rule);
  CommonUpdateParams common;
  if (in.ConsumeBool()) ConsumeHyperparameters(in, &common);
  const float lr = AnyFloat(in);
  const int64_t elements = vocabulary_size * dim;
  const std::vector<float> initial = Floats(in, elements * (1 + Rule::kNumSlots));
  const int64_t units = rule.UpdatesUntouchedRows() ? vocabulary_size : groups.num_unique();
  const int64_t split = in.ConsumeIntegralInRange<int64_t>(0, units);
  std::vector<float> baseline;
  for (int isa = 0; isa <= static_cast<int>(SupportedSimdIsa()); ++isa) {
    std::vector<float> state = initial;  // the table, then each slot
    std::array<float*, Rule::kNumSlots> slots;
    for (int k = 0; k < Rule::kNumSlots; ++k) slots[k] = state.data() + (1 + k) * elements;
    std::vector<float> scratch(dim);
    for (const auto& [begin, end] : {std::pair<int64_t, int64_t>{0, split}, {split, units}}) {
      if (rule.UpdatesUntouchedRows()) {
        UpdateAllRowsWithIsa(static_cast<SimdIsa>(isa), rule, common, lr, groups, dim, begin,
                             end, state.data(), slots, scratch.data());
      } else {
        UpdateTouchedRowsWithIsa(static_cast<SimdIsa>(isa), rule, common, lr, groups, dim,
                                 begin, end, state.data(), slots, scratch.data());
      }
    }
    if (isa == 0) {
      baseline = state;
    } else {
      FUZZ_CHECK(SameFloats(state.data(), baseline.data(), static_cast<int64_t>(state.size())));
    }
  }
}

}  // namespace
}  // namespace tf_embedding::fuzz

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace tf_embedding;        // NOLINT(build/namespaces)
  using namespace tf_embedding::fuzz;  // NOLINT(build/namespaces)
  FuzzedDataProvider in(data, size);
  const int64_t vocabulary_size = in.ConsumeIntegralInRange<int64_t>(1, 12);
  const int64_t dim = in.ConsumeIntegralInRange<int64_t>(1, 20);
  Gradients gradients;
  GradientGroups groups;
  groups.Reset(in.ConsumeBool() ? "ids" : "unique_ids");
  const Status grouped = in.ConsumeBool()
                             ? GroupBatches(in, vocabulary_size, dim, gradients, &groups)
                             : GroupLists(in, vocabulary_size, dim, gradients, &groups);
  if (!grouped.ok() || !CheckIdsBelow(groups, vocabulary_size).ok()) return 0;
  for (int64_t u = 0; u < groups.num_unique(); ++u) {
    FUZZ_CHECK(groups.unique_ids[u] >= 0 && groups.unique_ids[u] < vocabulary_size);
    FUZZ_CHECK(u == 0 || groups.unique_ids[u - 1] < groups.unique_ids[u]);
  }
  switch (in.ConsumeIntegralInRange<int>(0, 8)) {
    case 0: CheckRule<SgdRule>(in, groups, vocabulary_size, dim); break;
    case 1: CheckRule<AdagradRule>(in, groups, vocabulary_size, dim); break;
    case 2: CheckRule<AdagradMomentumRule>(in, groups, vocabulary_size, dim); break;
    case 3: CheckRule<AdamRule>(in, groups, vocabulary_size, dim); break;
    case 4: CheckRule<FtrlRule>(in, groups, vocabulary_size, dim); break;
    case 5: CheckRule<ProximalAdagradRule>(in, groups, vocabulary_size, dim); break;
    case 6: CheckRule<MomentumRule>(in, groups, vocabulary_size, dim); break;
    case 7: CheckRule<RmsPropRule>(in, groups, vocabulary_size, dim); break;
    default: CheckRule<ProximalYogiRule>(in, groups, vocabulary_size, dim); break;
  }
  return 0;
}
