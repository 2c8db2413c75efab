#include "cc/core/huge_pages.h"

#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <mutex>
#include <unordered_map>

#if defined(__linux__)
#include <sys/mman.h>
#endif

namespace tf_embedding {
namespace {

#if defined(__linux__)

// Not in older libc headers; the value is the kernel's ABI.
#ifndef MADV_COLLAPSE
#define MADV_COLLAPSE 25
#endif

constexpr uintptr_t kHugePageBytes = uintptr_t{2} << 20;
// How often an already converted address is converted again. A check of a range that is already
// huge costs ~10 us per 256 MiB, so this keeps it far below a step's time.
constexpr uint64_t kRecheckCalls = 256;
// Bounds the registry when many short-lived buffers pass through (e.g. many small models).
constexpr size_t kMaxTrackedBuffers = 4096;

bool Enabled() {
  static const bool enabled = [] {
    const char* value = std::getenv("TF_EMBEDDING_HUGE_PAGES");
    return value == nullptr || std::strcmp(value, "0") != 0;
  }();
  return enabled;
}

// Whether the buffer at `address` is due for conversion, counting this call.
bool DueForConversion(uintptr_t address) {
  static std::mutex mu;
  static auto* calls = new std::unordered_map<uintptr_t, uint64_t>();
  std::lock_guard<std::mutex> lock(mu);
  if (calls->size() >= kMaxTrackedBuffers) calls->clear();
  return (*calls)[address]++ % kRecheckCalls == 0;
}

#endif  // __linux__

}  // namespace

void AdviseHugePages(const void* data, size_t bytes) {
#if defined(__linux__)
  if (bytes < kHugePageMinBytes || !Enabled()) return;
  const uintptr_t start = reinterpret_cast<uintptr_t>(data);
  const uintptr_t first = (start + kHugePageBytes - 1) & ~(kHugePageBytes - 1);
  const uintptr_t last = (start + bytes) & ~(kHugePageBytes - 1);
  if (first >= last || !DueForConversion(start)) return;
  // The syscalls run outside the registry's lock so tables convert in parallel.
  void* range = reinterpret_cast<void*>(first);
  madvise(range, last - first, MADV_HUGEPAGE);
  madvise(range, last - first, MADV_COLLAPSE);
#else
  (void)data;
  (void)bytes;
#endif
}

}  // namespace tf_embedding
