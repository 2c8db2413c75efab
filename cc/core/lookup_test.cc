// CombineRows against a plain loop, for the dimensions with specialised loops and others, and
// the same bits from every SIMD variant this CPU can run.
#include "cc/core/lookup.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <random>
#include <vector>

#include "cc/core/testing.h"

namespace tf_embedding {
namespace {

struct Lookup {
  testing::CsrArrays csr;
  std::vector<float> table;  // [vocabulary, dim]
};

// Rows of 0 to 40 lookups (so prefetching runs past the end of the batch), random ids and gains.
Lookup RandomLookup(int64_t rows, int64_t vocabulary, int64_t dim, uint32_t seed) {
  std::mt19937 random(seed);
  std::normal_distribution<float> normal;
  Lookup lookup;
  lookup.csr.row_splits.push_back(0);
  for (int64_t r = 0; r < rows; ++r) {
    const int64_t count = random() % 41;
    for (int64_t k = 0; k < count; ++k) {
      lookup.csr.ids.push_back(random() % vocabulary);
      lookup.csr.gains.push_back(normal(random));
    }
    lookup.csr.row_splits.push_back(static_cast<int64_t>(lookup.csr.ids.size()));
  }
  for (int64_t i = 0; i < vocabulary * dim; ++i) lookup.table.push_back(normal(random));
  return lookup;
}

// activations[r] = sum of gain * table row, in lookup order, in float.
std::vector<float> Reference(const Lookup& lookup, int64_t dim) {
  const int64_t rows = static_cast<int64_t>(lookup.csr.row_splits.size()) - 1;
  std::vector<float> out(rows * dim, 0.0f);
  for (int64_t r = 0; r < rows; ++r) {
    for (int64_t k = lookup.csr.row_splits[r]; k < lookup.csr.row_splits[r + 1]; ++k) {
      for (int64_t j = 0; j < dim; ++j) {
        out[r * dim + j] += lookup.csr.gains[k] * lookup.table[lookup.csr.ids[k] * dim + j];
      }
    }
  }
  return out;
}

std::vector<float> Combine(SimdIsa isa, const Lookup& lookup, int64_t dim, int64_t row_begin,
                           int64_t row_end) {
  const int64_t rows = static_cast<int64_t>(lookup.csr.row_splits.size()) - 1;
  // NaN marks the rows outside [row_begin, row_end), which must stay untouched.
  std::vector<float> out(rows * dim, std::nanf(""));
  CombineRowsWithIsa(isa, lookup.csr.View(), lookup.table.data(), dim, row_begin, row_end,
                     out.data());
  return out;
}

bool SameBits(const std::vector<float>& a, const std::vector<float>& b) {
  return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0;
}

TFE_TEST(EveryIsaMatchesThePlainLoopBitForBit) {
  std::printf("ISAs compared:");
  for (SimdIsa isa : testing::RunnableIsas()) std::printf(" %s", testing::IsaName(isa));
  std::printf("\n");
  // The kernel's specialised dimensions, and others on the generic loop.
  for (int64_t dim : {1, 5, 8, 16, 24, 32, 64, 100, 128}) {
    const Lookup lookup = RandomLookup(50, 300, dim, static_cast<uint32_t>(dim));
    const std::vector<float> expected = Reference(lookup, dim);
    for (SimdIsa isa : testing::RunnableIsas()) {
      if (!TFE_EXPECT(SameBits(Combine(isa, lookup, dim, 0, 50), expected))) {
        std::printf("  dim %ld, ISA %s\n", static_cast<long>(dim), testing::IsaName(isa));
      }
    }
  }
}

// Null gains (the sum combiner's, all 1) give the bits of explicit gains of 1, on every ISA,
// including rows whose sum is -0 (0 + x, never x alone).
TFE_TEST(NullGainsAreGainsOfOne) {
  for (int64_t dim : {1, 5, 8, 16, 24, 32, 64, 100, 128}) {
    Lookup lookup = RandomLookup(50, 300, dim, static_cast<uint32_t>(dim) + 7);
    std::fill(lookup.table.begin(), lookup.table.begin() + dim, -0.0f);
    lookup.csr.ids[0] = 0;
    std::fill(lookup.csr.gains.begin(), lookup.csr.gains.end(), 1.0f);
    const std::vector<float> expected = Reference(lookup, dim);
    CsrBatch unit = lookup.csr.View();
    unit.gains = nullptr;
    unit.num_gains = 0;
    for (SimdIsa isa : testing::RunnableIsas()) {
      std::vector<float> out(50 * dim, std::nanf(""));
      CombineRowsWithIsa(isa, unit, lookup.table.data(), dim, 0, 50, out.data());
      if (!TFE_EXPECT(SameBits(out, expected))) {
        std::printf("  dim %ld, ISA %s\n", static_cast<long>(dim), testing::IsaName(isa));
      }
    }
  }
}

TFE_TEST(WritesOnlyTheRowsOfItsRange) {
  const int64_t dim = 16;
  const Lookup lookup = RandomLookup(10, 50, dim, 1);
  const std::vector<float> all = Reference(lookup, dim);
  const std::vector<float> part = Combine(SupportedSimdIsa(), lookup, dim, 3, 7);
  for (int64_t r = 0; r < 10; ++r) {
    const std::vector<float> got(part.begin() + r * dim, part.begin() + (r + 1) * dim);
    const std::vector<float> want(all.begin() + r * dim, all.begin() + (r + 1) * dim);
    if (r >= 3 && r < 7) {
      TFE_EXPECT(SameBits(got, want));
    } else {
      TFE_EXPECT(std::isnan(got[0]) && std::isnan(got[dim - 1]));
    }
  }
}

TFE_TEST(EmptyRowsAreZeros) {
  for (int64_t dim : {4, 64}) {
    const Lookup lookup{{{0, 0, 1, 1}, {2}, {3.0f}}, std::vector<float>(3 * dim, 1.0f)};
    std::vector<float> expected(3 * dim, 0.0f);
    std::fill(expected.begin() + dim, expected.begin() + 2 * dim, 3.0f);
    TFE_EXPECT_EQ(Combine(SimdIsa::kBaseline, lookup, dim, 0, 3), expected);
    TFE_EXPECT_EQ(Combine(SupportedSimdIsa(), lookup, dim, 0, 3), expected);
  }
}

}  // namespace
}  // namespace tf_embedding

int main() { return tf_embedding::testing::RunAllTests(); }
