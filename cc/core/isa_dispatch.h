// Runs a kernel compiled for the vector ISA chosen at run time (simd_dispatch.h) and, for the
// common row widths, with the width fixed at compile time: the row's sums then live in registers
// and its loops unroll and vectorise for that ISA.
//
// A kernel is a struct with `template <int64_t kDim> static R Run(Args...)`, marked
// always_inline, so that its body is compiled into each ISA's wrapper below; kDim is the row
// width, or 0 for any width (the kernel then reads it from its arguments).
#ifndef TF_EMBEDDING_CC_CORE_ISA_DISPATCH_H_
#define TF_EMBEDDING_CC_CORE_ISA_DISPATCH_H_

#include <cstdint>

#include "cc/core/simd_dispatch.h"

namespace tf_embedding {
namespace isa_dispatch_internal {

#if defined(TF_EMBEDDING_X86_DISPATCH)
template <typename Kernel, int64_t kDim, typename... Args>
TF_EMBEDDING_TARGET_AVX2 auto RunAvx2(Args... args) {
  return Kernel::template Run<kDim>(args...);
}

template <typename Kernel, int64_t kDim, typename... Args>
TF_EMBEDDING_TARGET_AVX512 auto RunAvx512(Args... args) {
  return Kernel::template Run<kDim>(args...);
}
#endif

template <typename Kernel, int64_t kDim, typename... Args>
auto RunForIsa(SimdIsa isa, Args... args) {
#if defined(TF_EMBEDDING_X86_DISPATCH)
  switch (isa) {
    case SimdIsa::kAvx512:
      return RunAvx512<Kernel, kDim>(args...);
    case SimdIsa::kAvx2:
      return RunAvx2<Kernel, kDim>(args...);
    case SimdIsa::kBaseline:
      break;
  }
#else
  (void)isa;
#endif
  // Baseline ISA: the body inlines here, compiled with the library's own flags.
  return Kernel::template Run<kDim>(args...);
}

}  // namespace isa_dispatch_internal

// Kernel::Run<kDim>(args...) compiled for `isa` (at most SupportedSimdIsa()), with kDim = `dim`
// for dims 8, 16, 32, 64 and 128, else 0.
template <typename Kernel, typename... Args>
auto RunForIsaAndDim(SimdIsa isa, int64_t dim, Args... args) {
  using isa_dispatch_internal::RunForIsa;
  switch (dim) {
    case 8: return RunForIsa<Kernel, 8>(isa, args...);
    case 16: return RunForIsa<Kernel, 16>(isa, args...);
    case 32: return RunForIsa<Kernel, 32>(isa, args...);
    case 64: return RunForIsa<Kernel, 64>(isa, args...);
    case 128: return RunForIsa<Kernel, 128>(isa, args...);
    default: return RunForIsa<Kernel, 0>(isa, args...);
  }
}

}  // namespace tf_embedding

#endif  // TF_EMBEDDING_CC_CORE_ISA_DISPATCH_H_
