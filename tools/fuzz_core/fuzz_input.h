// What the fuzz targets of cc/core read from libFuzzer's bytes: arrays of ids, splits, gains and
// floats of bounded length, values drawn over their whole range (negative, huge, NaN) so that
// every check of the code under test is reached. Targets shape the arrays as TensorFlow shapes
// its tensors (a flat buffer of the product of its dims), since that is what the kernels pass.
#ifndef TF_EMBEDDING_TOOLS_FUZZ_CORE_FUZZ_INPUT_H_
#define TF_EMBEDDING_TOOLS_FUZZ_CORE_FUZZ_INPUT_H_

#include <fuzzer/FuzzedDataProvider.h>

#include <algorithm>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <vector>

namespace tf_embedding::fuzz {

// Arrays hold at most this many elements: enough for every branch, small enough for millions
// of executions.
constexpr int64_t kMaxElements = 64;

// Mostly small values (valid ids, rows, splits), sometimes anything.
inline int64_t SmallOrAny(FuzzedDataProvider& in, int64_t small_max) {
  if (in.ConsumeIntegralInRange<int>(0, 7) == 0) return in.ConsumeIntegral<int64_t>();
  return in.ConsumeIntegralInRange<int64_t>(-1, small_max);
}

inline std::vector<int64_t> Int64s(FuzzedDataProvider& in, int64_t small_max,
                                   int64_t max_size = kMaxElements) {
  std::vector<int64_t> values(in.ConsumeIntegralInRange<int64_t>(0, max_size));
  for (int64_t& value : values) value = SmallOrAny(in, small_max);
  return values;
}

// Non-decreasing from 0 most of the time, so that valid row_splits are common.
inline std::vector<int64_t> Splits(FuzzedDataProvider& in, int64_t num_values) {
  std::vector<int64_t> splits(in.ConsumeIntegralInRange<int64_t>(0, 9));
  int64_t at = 0;
  for (int64_t& split : splits) {
    if (in.ConsumeIntegralInRange<int>(0, 15) == 0) {
      split = in.ConsumeIntegral<int64_t>();
    } else {
      split = at;
      at = std::min<int64_t>(num_values, at + in.ConsumeIntegralInRange<int64_t>(0, 4));
    }
  }
  if (!splits.empty() && in.ConsumeBool()) splits.back() = num_values;
  return splits;
}

inline float AnyFloat(FuzzedDataProvider& in) {
  switch (in.ConsumeIntegralInRange<int>(0, 7)) {
    case 0: {
      uint32_t bits = in.ConsumeIntegral<uint32_t>();
      float value;
      std::memcpy(&value, &bits, sizeof(value));
      return value;  // any float: NaN, infinities, subnormals
    }
    case 1:
      return 0.0f;
    default:
      return in.ConsumeFloatingPointInRange<float>(-4.0f, 4.0f);
  }
}

inline std::vector<float> Floats(FuzzedDataProvider& in, int64_t size) {
  std::vector<float> values(size);
  for (float& value : values) value = AnyFloat(in);
  return values;
}

// Whether two float arrays hold the same values bit for bit, any NaN matching any NaN (vector
// and scalar code may carry different NaN payloads).
inline bool SameFloats(const float* a, const float* b, int64_t size) {
  for (int64_t i = 0; i < size; ++i) {
    if (a[i] != a[i] && b[i] != b[i]) continue;
    if (std::memcmp(a + i, b + i, sizeof(float)) != 0) return false;
  }
  return true;
}

// A failed property: libFuzzer reports the input that reached it.
#define FUZZ_CHECK(condition)                                                                \
  do {                                                                                       \
    if (!(condition)) {                                                                      \
      __builtin_printf("%s:%d: check failed: %s\n", __FILE__, __LINE__, #condition);         \
      std::abort();                                                                          \
    }                                                                                        \
  } while (0)

}  // namespace tf_embedding::fuzz

#endif  // TF_EMBEDDING_TOOLS_FUZZ_CORE_FUZZ_INPUT_H_
