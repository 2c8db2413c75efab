#include "cc/core/simd_dispatch.h"

#include <cstdio>
#include <cstdlib>
#include <cstring>

namespace tf_embedding {
namespace {

SimdIsa RequestedIsa() {
  const char* value = std::getenv("TF_EMBEDDING_SIMD");
  if (value == nullptr || std::strcmp(value, "avx512") == 0) return SimdIsa::kAvx512;
  if (std::strcmp(value, "baseline") == 0) return SimdIsa::kBaseline;
  if (std::strcmp(value, "avx2") == 0) return SimdIsa::kAvx2;
  // Read once, inside whichever kernel runs first, so there is no caller to return an error to;
  // a typo must still not pass unnoticed.
  std::fprintf(stderr,
               "tf_embedding: ignoring TF_EMBEDDING_SIMD=%s (expected baseline, avx2 or "
               "avx512); using the widest ISA the CPU supports\n",
               value);
  return SimdIsa::kAvx512;
}

}  // namespace

SimdIsa SupportedSimdIsa() {
#if defined(TF_EMBEDDING_X86_DISPATCH)
  __builtin_cpu_init();
  if (__builtin_cpu_supports("avx512f")) return SimdIsa::kAvx512;
  if (__builtin_cpu_supports("avx2")) return SimdIsa::kAvx2;
#endif
  return SimdIsa::kBaseline;
}

SimdIsa SelectedSimdIsa() {
  static const SimdIsa isa = [] {
    const SimdIsa supported = SupportedSimdIsa();
    const SimdIsa requested = RequestedIsa();
    return static_cast<int>(requested) < static_cast<int>(supported) ? requested : supported;
  }();
  return isa;
}

}  // namespace tf_embedding
