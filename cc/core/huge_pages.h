// Transparent huge pages for large table and slot buffers.
//
// Lookups and sparse updates touch rows at random across buffers of hundreds of MiB. With 4 KiB
// pages nearly every row access misses the TLB and pays a page walk on top of its cache miss; on
// the benchmark machine that was 40% of a lookup's time (docs/archive/benchmark_runs.md,
// "Where the time goes"). Backing the buffer with 2 MiB pages removes the walks. TensorFlow
// allocates the buffers, so they are converted in place, the first time a kernel sees them.
#ifndef TF_EMBEDDING_CC_CORE_HUGE_PAGES_H_
#define TF_EMBEDDING_CC_CORE_HUGE_PAGES_H_

#include <cstddef>

namespace tf_embedding {

// Buffers below this size fit the TLB's reach well enough; converting them is not worth a call.
constexpr size_t kHugePageMinBytes = size_t{16} << 20;

// Asks the kernel to back the whole 2 MiB pages inside [data, data + bytes) with huge pages,
// collapsing the pages already there (MADV_COLLAPSE, Linux 6.1+; older kernels get the advice
// only and khugepaged converts them over time). A performance hint: contents never change and
// failures are ignored. Cheap after the first call for a buffer: each address is converted once
// and re-checked every kRecheckCalls calls, in case a new buffer reuses a freed one's address.
// A no-op below kHugePageMinBytes, off Linux, and when TF_EMBEDDING_HUGE_PAGES=0.
void AdviseHugePages(const void* data, size_t bytes);

}  // namespace tf_embedding

#endif  // TF_EMBEDDING_CC_CORE_HUGE_PAGES_H_
