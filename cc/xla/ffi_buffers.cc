#include "cc/xla/ffi_buffers.h"

#include <algorithm>
#include <functional>
#include <utility>

#include "cc/core/claiming_sharder.h"
#include "cc/core/errors.h"

// The process's FFI registry, in libtensorflow_cc. Declared here rather than through
// xla/ffi/ffi_api.h, which needs MLIR headers that TensorFlow's wheel does not ship.
namespace xla::ffi {
const XLA_FFI_Api* GetXlaFfiApi();
}  // namespace xla::ffi

namespace tf_embedding {
namespace {

// XLA's CPU backend, as the FFI registry names it.
constexpr char kPlatform[] = "Host";

}  // namespace

ffi::Error ToFfiError(const Status& status) {
  if (status.ok()) return ffi::Error::Success();
  return ffi::Error::InvalidArgument(status.message());
}

Sharder PoolSharder(ffi::ThreadPool& pool) {
  return ClaimingSharder(pool.num_threads() - 1,
                         [&pool](std::function<void()> task) { pool.Schedule(std::move(task)); });
}

int64_t Size(const ffi::AnyBuffer& buffer) {
  return static_cast<int64_t>(buffer.element_count());
}

CsrBatch CompiledCsrBatch(const ffi::AnyBuffer& row_splits, const ffi::AnyBuffer& ids,
                          const ffi::AnyBuffer& gains) {
  CsrBatch batch{Data<int64_t>(row_splits), Size(row_splits), Data<int64_t>(ids), Size(ids),
                 Data<float>(gains),        Size(gains)};
  if (batch.num_row_splits >= 1 && batch.num_ids == batch.num_gains) {
    const int64_t end = batch.row_splits[batch.num_row_splits - 1];
    if (end >= 0 && end <= batch.num_ids) batch.num_ids = batch.num_gains = end;
  }
  return batch;
}

Status CheckMatrix(const ffi::AnyBuffer& buffer, const char* what, int64_t rows, int64_t dim) {
  const auto dims = buffer.dimensions();
  if (buffer.element_type() == ffi::DataType::F32 && dims.size() == 2 &&
      (rows < 0 || dims[0] == rows) && dims[1] == dim) {
    return Status();
  }
  return InvalidArgument(what, " of the custom call is not a float matrix of the expected shape");
}

Status ReadGradientBatches(const ffi::RemainingArgs& args, size_t first, int64_t num_batches,
                           int64_t dim, std::vector<GradientBatch>* batches) {
  batches->assign(num_batches, GradientBatch());
  for (int64_t b = 0; b < num_batches; ++b) {
    ffi::AnyBuffer operands[4] = {ffi::AnyBuffer(nullptr), ffi::AnyBuffer(nullptr),
                                  ffi::AnyBuffer(nullptr), ffi::AnyBuffer(nullptr)};
    for (int64_t k = 0; k < 4; ++k) {
      const auto operand = args.get<ffi::AnyBuffer>(first + k * num_batches + b);
      if (operand.has_error()) return Status::Error(operand.error().message());
      operands[k] = operand.value();
    }
    GradientBatch& batch = (*batches)[b];
    batch.csr = CompiledCsrBatch(operands[0], operands[1], operands[2]);
    TFE_RETURN_IF_ERROR(CheckMatrix(operands[3], "activation_gradients",
                                    std::max<int64_t>(batch.csr.num_rows(), 0), dim)
                            .WithContext(BatchContext(b)));
    batch.activation_gradients = Data<float>(operands[3]);
  }
  return Status();
}

void RegisterHostHandler(const std::string& name, XLA_FFI_Handler* handler) {
  // Registration fails only for a name taken twice, which the names rule out.
  ffi::Ffi::RegisterStaticHandler(ffi::GetXlaFfiApi(), name, kPlatform, handler);
}

}  // namespace tf_embedding
