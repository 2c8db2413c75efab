// What the handlers of the XLA CPU custom calls (custom_calls.h) share: their errors, XLA's
// buffers read as cc/core's views, XLA's intra-op pool as a Sharder, and their registration.
// The handlers: ffi_handlers.cc (lookups, gradient, conversion) and ffi_sparse_apply.cc.
#ifndef TF_EMBEDDING_CC_XLA_FFI_BUFFERS_H_
#define TF_EMBEDDING_CC_XLA_FFI_BUFFERS_H_

#include <cstdint>
#include <string>
#include <vector>

#include "cc/core/csr_batch.h"
#include "cc/core/gradient_aggregation.h"
#include "cc/core/parallel_steps.h"
#include "cc/core/status.h"
#include "cc/kernels/gradient_groups_pool.h"
#include "xla/ffi/api/ffi.h"

namespace tf_embedding {

namespace ffi = ::xla::ffi;

// A failed `status` as an InvalidArgument error, which the compiled step raises as
// InvalidArgumentError with the status's message.
ffi::Error ToFfiError(const Status& status);

// A Sharder on XLA's intra-op pool (ClaimingSharder): the caller, the thread running the
// program, and a task per pool thread but one, so that a call's work runs on as many threads as
// the pool has, as the TF kernels' does. A task more left 3 threads on 2 cores at 2 threads and
// took a 2-thread compiled training step from 25-36 ms to 36-39 ms (Zipf ids, alternating op
// libraries). XLA runs independent custom calls (one per table) on the same pool, and a caller
// that blocked until its queued tasks ran could wait for pool threads that are all blocked the
// same way: claimed shards never wait for a task that has not started.
Sharder PoolSharder(ffi::ThreadPool& pool);

template <typename T>
T* Data(const ffi::AnyBuffer& buffer) {
  return static_cast<T*>(buffer.untyped_data());
}

// The element count of a buffer, as the core views count.
int64_t Size(const ffi::AnyBuffer& buffer);

// A CSR batch of a compiled step. Its ids and gains may be longer than its row_splits say: the
// conversion's custom call sizes them for every input id, and the lookups it drops (pruned ids
// and weights, positions past max_sequence_length) leave padding after the last row, which the
// view leaves out. Anything else is left for ValidateCsrBatch to reject.
CsrBatch CompiledCsrBatch(const ffi::AnyBuffer& row_splits, const ffi::AnyBuffer& ids,
                          const ffi::AnyBuffer& gains);

// Checks that `buffer` is a float matrix of `rows` x `dim` (`rows` < 0: any). XLA compiled the
// call for the shapes the tf2xla kernel checked; this guards the handler against a call built
// otherwise.
Status CheckMatrix(const ffi::AnyBuffer& buffer, const char* what, int64_t rows, int64_t dim);

// The N CSR batches of operands [first, first + 4N): row_splits, ids, gains and
// activation_gradients, N of each.
Status ReadGradientBatches(const ffi::RemainingArgs& args, size_t first, int64_t num_batches,
                           int64_t dim, std::vector<GradientBatch>* batches);

// The one GradientGroups pool of each handler: XLA may run a handler concurrently.
template <typename Tag>
GradientGroupsPool& GroupsPool() {
  static GradientGroupsPool* pool = new GradientGroupsPool();
  return *pool;
}

// Registers `handler` as the custom call `name` of XLA's CPU backend.
void RegisterHostHandler(const std::string& name, XLA_FFI_Handler* handler);

}  // namespace tf_embedding

#endif  // TF_EMBEDDING_CC_XLA_FFI_BUFFERS_H_
