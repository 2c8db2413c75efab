// Fuzz target: the fused lookup of a CSR batch (ValidateCsrBatch, then CombineRows), as
// TfeEmbeddingLookup runs it. Properties beyond memory safety: a batch that passes the
// validation is combined in any split of its rows by every vector ISA the machine has into the
// same bits, equal to a plain scalar sum in lookup order.
#include <cstdint>
#include <vector>

#include "cc/core/csr_batch.h"
#include "cc/core/lookup.h"
#include "cc/core/simd_dispatch.h"
#include "tools/fuzz_core/fuzz_input.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace tf_embedding;        // NOLINT(build/namespaces)
  using namespace tf_embedding::fuzz;  // NOLINT(build/namespaces)
  FuzzedDataProvider in(data, size);
  const int64_t vocabulary_size = in.ConsumeIntegralInRange<int64_t>(1, 16);
  // Odd and even widths, below and above every vector width (the loops' tails).
  const int64_t dim = in.ConsumeIntegralInRange<int64_t>(1, 40);
  const std::vector<int64_t> ids = Int64s(in, vocabulary_size);
  const std::vector<int64_t> row_splits = Splits(in, static_cast<int64_t>(ids.size()));
  const std::vector<float> gains =
      Floats(in, in.ConsumeBool() ? static_cast<int64_t>(ids.size())
                                  : in.ConsumeIntegralInRange<int64_t>(0, 9));
  const CsrBatch batch{row_splits.data(), static_cast<int64_t>(row_splits.size()), ids.data(),
                       static_cast<int64_t>(ids.size()), gains.data(),
                       static_cast<int64_t>(gains.size())};
  if (!ValidateCsrBatch(batch, vocabulary_size).ok()) return 0;

  std::vector<float> table(vocabulary_size * dim);
  for (float& value : table) value = in.ConsumeFloatingPointInRange<float>(-8.0f, 8.0f);
  const int64_t rows = batch.num_rows();
  std::vector<float> expected(rows * dim, 0.0f);
  for (int64_t r = 0; r < rows; ++r) {
    for (int64_t k = row_splits[r]; k < row_splits[r + 1]; ++k) {
      for (int64_t j = 0; j < dim; ++j) {
        expected[r * dim + j] += gains[k] * table[ids[k] * dim + j];
      }
    }
  }
  const int64_t split = rows == 0 ? 0 : in.ConsumeIntegralInRange<int64_t>(0, rows);
  for (int isa = 0; isa <= static_cast<int>(SupportedSimdIsa()); ++isa) {
    std::vector<float> activations(rows * dim, -1.0f);
    CombineRowsWithIsa(static_cast<SimdIsa>(isa), batch, table.data(), dim, 0, split,
                       activations.data());
    CombineRowsWithIsa(static_cast<SimdIsa>(isa), batch, table.data(), dim, split, rows,
                       activations.data());
    FUZZ_CHECK(SameFloats(activations.data(), expected.data(), rows * dim));
  }
  return 0;
}
