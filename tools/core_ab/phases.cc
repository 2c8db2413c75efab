// One copy of cc/core's hot loops, timed: compiled once per copy that tools/core_ab/run.sh
// builds, with -DCOPY=<the copy's namespace> (its sources have `tf_embedding` renamed to it, so
// two copies link into one program without clashing).
#include <chrono>
#include <vector>

#include "cc/core/gradient_aggregation.h"
#include "cc/core/lookup.h"
#include "cc/core/row_updates.h"
#include "cc/core/simd_dispatch.h"
#include "cc/core/sparse_lookup.h"
#include "tools/core_ab/phases.h"

#define CORE_AB_CONCAT2(a, b) a##b
#define CORE_AB_CONCAT(a, b) CORE_AB_CONCAT2(a, b)

namespace {

double SecondsSince(std::chrono::steady_clock::time_point start) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
}

}  // namespace

extern "C" PhaseSeconds CORE_AB_CONCAT(RunPhases_, COPY)(const Step* step) {
  using namespace COPY;  // NOLINT(build/namespaces): this copy's cc/core
  // One grouping object per table, kept across calls as the kernels' pool keeps them.
  static std::vector<GradientGroups> groups(step->tables);
  std::vector<float> scratch(step->dim);
  // The ISA the op library would run (TF_EMBEDDING_SIMD caps it).
  const SimdIsa isa = SelectedSimdIsa();
  const int64_t lookups = step->rows * step->ids_per_row;
  PhaseSeconds seconds{};
  for (int64_t t = 0; t < step->tables; ++t) {
    const CsrBatch csr{step->row_splits, step->rows + 1, step->ids + t * lookups, lookups,
                       step->gains, lookups};
    float* activations = step->activations + t * step->rows * step->dim;

    auto start = std::chrono::steady_clock::now();
    CombineRowsWithIsa(isa, csr, step->tables_data[t], step->dim, 0, step->rows, activations);
    seconds.lookup += SecondsSince(start);

    // The benchmark's loss is 0.5 * sum(activations^2): the activations are their gradients.
    start = std::chrono::steady_clock::now();
    const Status status = GroupLookupsById({{csr, activations}}, step->dim, &groups[t]);
    seconds.group += SecondsSince(start);
    if (!status.ok()) return PhaseSeconds{-1, -1, -1};

    start = std::chrono::steady_clock::now();
    UpdateTouchedRowsWithIsa(isa, AdagradRule(), CommonUpdateParams(), step->learning_rate,
                             groups[t], step->dim, 0, groups[t].num_unique(),
                             step->tables_data[t], {step->accumulators[t]}, scratch.data());
    seconds.update += SecondsSince(start);
  }
  return seconds;
}

extern "C" double CORE_AB_CONCAT(RunForward_, COPY)(const Step* step, int ragged) {
  using namespace COPY;  // NOLINT(build/namespaces): this copy's cc/core
  const int64_t lookups = step->rows * step->ids_per_row;
  const auto start = std::chrono::steady_clock::now();
  for (int64_t t = 0; t < step->tables; ++t) {
    SparseLookups feature;
    feature.ids = step->ids + t * lookups;
    feature.nnz = lookups;
    feature.rows = step->rows;
    if (ragged != 0) {
      feature.row_splits = step->row_splits;
    } else {
      feature.indices = step->indices;
      feature.columns = step->ids_per_row;
    }
    if (!CombineSparseRows(feature, step->vocab, Combiner::kSum, step->tables_data[t],
                           step->dim, 0, step->rows, 0, lookups,
                           step->activations + t * step->rows * step->dim)) {
      return -1;
    }
  }
  return SecondsSince(start);
}
