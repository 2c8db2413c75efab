// What the XLA CPU custom calls' handlers share (ffi_handlers.cc: lookup, gradient and
// sparse apply; ffi_conversion_handlers.cc: the CSR conversion and the features lookup): XLA's
// FFI registry, buffers read as the core's views, errors as FFI errors, and a Sharder on XLA's
// intra-op pool.
#ifndef TF_EMBEDDING_CC_XLA_FFI_BUFFERS_H_
#define TF_EMBEDDING_CC_XLA_FFI_BUFFERS_H_

#include <cstdint>
#include <functional>
#include <string>
#include <utility>

#include "cc/core/claiming_sharder.h"
#include "cc/core/csr_batch.h"
#include "cc/core/errors.h"
#include "xla/ffi/api/ffi.h"

// The process's FFI registry, in libtensorflow_cc. Declared here rather than through
// xla/ffi/ffi_api.h, which needs MLIR headers that TensorFlow's wheel does not ship.
namespace xla::ffi {
const XLA_FFI_Api* GetXlaFfiApi();
}  // namespace xla::ffi

namespace tf_embedding {

namespace ffi = ::xla::ffi;

inline ffi::Error ToFfiError(const Status& status) {
  if (status.ok()) return ffi::Error::Success();
  return ffi::Error::InvalidArgument(status.message());
}

// A Sharder on XLA's intra-op pool (ClaimingSharder): the caller, the thread running the
// program, and a task per pool thread but one, so that a call's work runs on as many threads as
// the pool has, as the TF kernels' does. A task more left 3 threads on 2 cores at 2 threads and
// took a 2-thread compiled training step from 25-36 ms to 36-39 ms (Zipf ids, alternating op
// libraries). XLA runs independent custom calls (one per table) on the same pool, and a caller
// that blocked until its queued tasks ran could wait for pool threads that are all blocked the
// same way: claimed shards never wait for a task that has not started.
inline Sharder PoolSharder(ffi::ThreadPool& pool) {
  return ClaimingSharder(pool.num_threads() - 1,
                         [&pool](std::function<void()> task) { pool.Schedule(std::move(task)); });
}

template <typename T>
T* Data(const ffi::AnyBuffer& buffer) {
  return static_cast<T*>(buffer.untyped_data());
}

// The element count of a buffer, as the core views count.
inline int64_t Size(const ffi::AnyBuffer& buffer) {
  return static_cast<int64_t>(buffer.element_count());
}

// A CSR batch of a compiled step. Its ids and gains may be longer than its row_splits say: the
// conversion's custom call sizes them for every input id, and the lookups it drops (pruned ids
// and weights, positions past max_sequence_length) leave padding after the last row, which the
// view leaves out. Anything else is left for ValidateCsrBatch to reject.
inline CsrBatch CompiledCsrBatch(const ffi::AnyBuffer& row_splits, const ffi::AnyBuffer& ids,
                          const ffi::AnyBuffer& gains) {
  CsrBatch batch{Data<int64_t>(row_splits), Size(row_splits), Data<int64_t>(ids), Size(ids),
                 Data<float>(gains),        Size(gains)};
  if (batch.num_row_splits >= 1 && batch.num_ids == batch.num_gains) {
    const int64_t end = batch.row_splits[batch.num_row_splits - 1];
    if (end >= 0 && end <= batch.num_ids) batch.num_ids = batch.num_gains = end;
  }
  return batch;
}

// Checks that `buffer` is a float matrix of `rows` x `dim` (`rows` < 0: any). XLA compiled the
// call for the shapes the tf2xla kernel checked; this guards the handler against a call built
// otherwise.
inline Status CheckMatrix(const ffi::AnyBuffer& buffer, const char* what, int64_t rows, int64_t dim) {
  const auto dims = buffer.dimensions();
  if (buffer.element_type() == ffi::DataType::F32 && dims.size() == 2 &&
      (rows < 0 || dims[0] == rows) && dims[1] == dim) {
    return Status();
  }
  return InvalidArgument(what, " of the custom call is not a float matrix of the expected shape");
}

// Registers `handler` as the custom call target `name` of XLA's CPU backend ("Host", as the FFI
// registry names it). Registration fails only for a name taken twice, which the names rule out.
inline void RegisterFfiHandler(const std::string& name, XLA_FFI_Handler* handler) {
  ffi::Ffi::RegisterStaticHandler(ffi::GetXlaFfiApi(), name, "Host", handler);
}

}  // namespace tf_embedding

#endif  // TF_EMBEDDING_CC_XLA_FFI_BUFFERS_H_
