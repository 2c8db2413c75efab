// Runtime choice of the widest vector ISA the CPU has, for the few loops that are bound by
// instruction throughput once their memory traffic is prefetched (the lookup's row combine,
// the sparse-apply row loops).
//
// The library is compiled for baseline x86-64 so one wheel runs everywhere; such loops are
// compiled once more per ISA with GCC's target attribute and picked at run time. Every variant
// does the same IEEE operations in the same order (the build disables FMA contraction), so the
// results are bit-identical whichever ISA runs.
#ifndef TF_EMBEDDING_CC_CORE_SIMD_DISPATCH_H_
#define TF_EMBEDDING_CC_CORE_SIMD_DISPATCH_H_

namespace tf_embedding {

// Ordered from narrowest to widest.
enum class SimdIsa { kBaseline, kAvx2, kAvx512 };

// The widest ISA both the CPU and the build support.
SimdIsa SupportedSimdIsa();

// SupportedSimdIsa() capped by TF_EMBEDDING_SIMD (baseline | avx2 | avx512), which tests use to
// run every variant on one machine: the ISA the kernels use.
SimdIsa SelectedSimdIsa();

}  // namespace tf_embedding

#if defined(__x86_64__) && defined(__GNUC__)
#define TF_EMBEDDING_X86_DISPATCH 1
#define TF_EMBEDDING_TARGET_AVX2 __attribute__((target("avx2")))
#define TF_EMBEDDING_TARGET_AVX512 __attribute__((target("avx512f")))
#endif

#endif  // TF_EMBEDDING_CC_CORE_SIMD_DISPATCH_H_
