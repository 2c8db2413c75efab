#include "cc/core/features_lookup.h"

#include <algorithm>
#include <atomic>
#include <memory>

#include "cc/core/claiming_sharder.h"
#include "cc/core/csr_batch.h"
#include "cc/core/errors.h"
#include "cc/core/lookup.h"
#include "cc/core/sparse_lookup.h"

namespace tf_embedding {
namespace {

// A table in the call: combined directly (`lookups` one per feature) or converted.
struct TableState {
  std::vector<SparseLookups> lookups;
  bool direct = false;
  float* activations = nullptr;
  std::atomic<bool> valid{true};  // whether every direct range found its lookups valid
};

// One range of output rows of one directly combined feature.
struct RowRange {
  const TableFeatures* table;
  TableState* state;
  const SparseLookups* feature;
  float* activations;    // the feature's
  int64_t index, count;  // range `index` of the feature's `count` ranges
};

// The table's features as SparseLookups if every one may be combined directly (AsSparseLookups)
// and their rows stack within the limit; else false, with none (the conversion then checks
// them).
bool DirectLookups(const TableFeatures& table, std::vector<SparseLookups>* lookups) {
  int64_t rows = 0;
  for (size_t f = 0; f < table.features->size(); ++f) {
    const FeatureSpec& spec = (*table.features)[f];
    FeatureLayout layout;
    SparseLookups feature;
    if (!AsSparseLookups(table.spec->name, spec, table.tensors[f], &layout, &feature) ||
        !CheckStackedRows(table.spec->name, spec, rows, layout.num_rows).ok()) {
      lookups->clear();
      return false;
    }
    rows += layout.num_rows;
    lookups->push_back(feature);
  }
  return true;
}

void CombineRange(const RowRange& range) {
  const SparseLookups& feature = *range.feature;
  const auto row_bound = [&](int64_t i) { return feature.rows * i / range.count; };
  // The first range's lookups from 0 and the last's to nnz whatever the order, so the lookup
  // ranges cover every lookup (CombineSparseRows).
  const auto lookup_bound = [&](int64_t i) {
    if (i == 0) return int64_t{0};
    return i == range.count ? feature.nnz : FirstLookupOfRow(feature, row_bound(i));
  };
  const TableSpec& spec = *range.table->spec;
  if (!CombineSparseRows(feature, spec.vocabulary_size, spec.combiner, range.table->table,
                         range.table->dim, row_bound(range.index), row_bound(range.index + 1),
                         lookup_bound(range.index), lookup_bound(range.index + 1),
                         range.activations)) {
    range.state->valid.store(false, std::memory_order_relaxed);
  }
}

// Combines the direct tables' rows in ranges that the threads claim one at a time; a table whose
// ranges are not all valid and in row order ends with `valid` false, its outputs partly written.
// Each feature has ranges in proportion to its lookups, at least one (which checks a feature
// without rows), at most one per row.
void LookUpDirectly(const std::vector<TableFeatures>& tables,
                    std::vector<std::unique_ptr<TableState>>& states, int64_t threads,
                    const Sharder& shard) {
  int64_t total_lookups = 0, total_cost = 0;
  for (size_t t = 0; t < tables.size(); ++t) {
    for (const SparseLookups& feature : states[t]->lookups) {
      total_lookups += feature.nnz;
      total_cost += (feature.nnz + feature.rows) * (tables[t].dim + kRowFetchCost);
    }
  }
  const int64_t target_ranges = kShardsPerThread * std::max<int64_t>(threads, 1);
  std::vector<RowRange> ranges;
  for (size_t t = 0; t < tables.size(); ++t) {
    float* activations = states[t]->activations;
    for (const SparseLookups& feature : states[t]->lookups) {
      const int64_t share =
          total_lookups == 0 ? 1
                             : (feature.nnz * target_ranges + total_lookups - 1) / total_lookups;
      const int64_t count = std::clamp<int64_t>(share, 1, std::max<int64_t>(feature.rows, 1));
      for (int64_t i = 0; i < count; ++i) {
        ranges.push_back({&tables[t], states[t].get(), &feature, activations, i, count});
      }
      activations += feature.rows * tables[t].dim;
    }
  }
  if (ranges.empty()) return;
  const int64_t units = static_cast<int64_t>(ranges.size());
  shard(units, total_cost / units + 1, [&](int64_t begin, int64_t end) {
    for (int64_t i = begin; i < end; ++i) CombineRange(ranges[i]);
  });
}

// The table's features converted and their batch looked up, into its activations if they are
// already given (for as many rows as the batch has), else into buffers `outputs` gives.
Status ConvertAndLookUp(const TableFeatures& table, size_t index, TableState* state,
                        const LookupOutputs& outputs, const Sharder& shard) {
  CsrBuilder builder(*table.spec);
  TFE_RETURN_IF_ERROR(builder.AddFeatures(*table.features, table.tensors));
  std::vector<int64_t> row_splits(builder.num_rows() + 1), ids(builder.num_lookups());
  std::vector<float> gains(builder.num_lookups());
  builder.Build(row_splits.data(), ids.data(), gains.data());
  const CsrBatch batch{row_splits.data(), static_cast<int64_t>(row_splits.size()),
                       ids.data(),        static_cast<int64_t>(ids.size()),
                       gains.data(),      static_cast<int64_t>(gains.size())};
  int64_t* row_counts = nullptr;
  // A direct table that failed its checks asks again, for the same rows (LookupOutputs).
  TFE_RETURN_IF_ERROR(outputs(index, batch.num_rows(), &state->activations, &row_counts));
  LookUpRows(batch, table.table, table.dim, state->activations, shard);
  const std::vector<int64_t>& counts = builder.feature_row_counts();
  std::copy(counts.begin(), counts.end(), row_counts);
  return Status();
}

}  // namespace

Status CheckTableHoldsVocabulary(const TableSpec& table, int64_t rows) {
  if (rows >= table.vocabulary_size) return Status();
  return TableError(table.name, "the table has ", rows, " rows but vocabulary_size is ",
                    table.vocabulary_size);
}

Status LookUpTablesFeatures(const std::vector<TableFeatures>& tables,
                            const LookupOutputs& outputs, int64_t threads, const Sharder& shard) {
  std::vector<std::unique_ptr<TableState>> states;
  for (size_t t = 0; t < tables.size(); ++t) {
    auto state = std::make_unique<TableState>();
    state->direct = DirectLookups(tables[t], &state->lookups);
    if (state->direct) {
      int64_t rows = 0, *row_counts = nullptr;
      for (const SparseLookups& feature : state->lookups) rows += feature.rows;
      TFE_RETURN_IF_ERROR(outputs(t, rows, &state->activations, &row_counts));
      for (const SparseLookups& feature : state->lookups) *row_counts++ = feature.rows;
    }
    states.push_back(std::move(state));
  }
  LookUpDirectly(tables, states, threads, shard);
  for (size_t t = 0; t < tables.size(); ++t) {
    if (states[t]->direct && states[t]->valid.load()) continue;
    // Converted, or invalid or out of order: the conversion reports the error (the first
    // table's, in table order) or orders the lookups, and gives the same rows, so its lookup
    // overwrites the same outputs.
    TFE_RETURN_IF_ERROR(ConvertAndLookUp(tables[t], t, states[t].get(), outputs, shard));
  }
  return Status();
}

}  // namespace tf_embedding
