// TfeRestoreRows: look the tensor up in the checkpoint's index, then read the requested rows of
// each stored tensor or row slice that holds them straight from its data file.
#include <algorithm>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/types/span.h"
#include "cc/core/errors.h"
#include "cc/kernels/shape_checks.h"
#include "tensorflow/core/framework/op_kernel.h"
#include "tensorflow/core/framework/tensor_shape.h"
#include "tensorflow/core/framework/tensor_slice.h"
#include "tensorflow/core/platform/env.h"
#include "tensorflow/core/protobuf/tensor_bundle.pb.h"
#include "tensorflow/core/util/saved_tensor_slice_util.h"
#include "tensorflow/core/util/tensor_bundle/naming.h"
#include "tensorflow/core/util/tensor_bundle/tensor_bundle.h"

namespace tf_embedding {
namespace {

using ::tensorflow::OpKernel;
using ::tensorflow::OpKernelConstruction;
using ::tensorflow::OpKernelContext;
using ::tensorflow::Tensor;

// The index entry (BundleEntryProto) stored under `key`.
absl::Status ReadEntry(tensorflow::BundleReader* reader, const std::string& key,
                       tensorflow::BundleEntryProto* entry) {
  reader->Seek(key);
  if (!reader->Valid() || reader->key() != key) {
    return absl::NotFoundError(absl::StrCat("no index entry ", key));
  }
  if (!entry->ParseFromArray(reader->value().data(), reader->value().size())) {
    return absl::DataLossError(absl::StrCat("unparsable index entry ", key));
  }
  return absl::OkStatus();
}

// The stored parts of a checkpointed matrix of `rows` rows: (index key, first row, rows) of the
// whole tensor, or of each of its row slices.
struct StoredPart {
  std::string key;
  int64_t first_row;
  int64_t num_rows;
};

std::vector<StoredPart> StoredParts(const std::string& name, int64_t rows,
                                    const std::vector<tensorflow::TensorSlice>& slices) {
  std::vector<StoredPart> parts;
  if (slices.empty()) parts.push_back({name, 0, rows});
  for (const tensorflow::TensorSlice& slice : slices) {
    parts.push_back({tensorflow::checkpoint::EncodeTensorNameSlice(name, slice), slice.start(0),
                     slice.IsFullAt(0) ? rows : slice.length(0)});
  }
  return parts;
}

// Reads rows [start, end) of `part` (within it) into `target` from the part's data file.
absl::Status ReadPartRows(tensorflow::Env* env, tensorflow::BundleReader* reader,
                          const std::string& prefix, int num_shards, const StoredPart& part,
                          int64_t row_bytes, int64_t start, int64_t end, char* target) {
  tensorflow::BundleEntryProto entry;
  TF_RETURN_IF_ERROR(ReadEntry(reader, part.key, &entry));
  if (entry.size() != part.num_rows * row_bytes) {
    return absl::DataLossError(absl::StrCat("checkpoint entry ", part.key, " holds ",
                                            entry.size(), " bytes, not its rows'"));
  }
  std::unique_ptr<tensorflow::RandomAccessFile> file;
  TF_RETURN_IF_ERROR(env->NewRandomAccessFile(
      tensorflow::DataFilename(prefix, entry.shard_id(), num_shards), &file));
  const int64_t length = (end - start) * row_bytes;
  absl::string_view result;
  TF_RETURN_IF_ERROR(file->Read(entry.offset() + (start - part.first_row) * row_bytes, result,
                                absl::MakeSpan(target, length)));
  if (static_cast<int64_t>(result.size()) != length) {
    return absl::DataLossError(absl::StrCat("short read of ", part.key));
  }
  if (result.data() != target) std::memcpy(target, result.data(), length);
  return absl::OkStatus();
}

// Whether the rows can be read straight from the data files: the file's byte order is this
// machine's, and every slice (if any) holds whole rows.
bool DirectlyReadable(const tensorflow::BundleHeaderProto& header,
                      const std::vector<tensorflow::TensorSlice>& slices) {
  return header.endianness() == tensorflow::BundleHeaderProto::LITTLE &&
         tensorflow::port::kLittleEndian &&
         std::all_of(slices.begin(), slices.end(),
                     [](const tensorflow::TensorSlice& slice) { return slice.IsFullAt(1); });
}

class RestoreRowsOp : public OpKernel {
 public:
  explicit RestoreRowsOp(OpKernelConstruction* ctx) : OpKernel(ctx) {
    OP_REQUIRES_OK(ctx, ctx->GetAttr("table_name", &table_name_));
  }

  void Compute(OpKernelContext* ctx) override {
    const std::string context = TableContext(table_name_);
    const char* inputs[] = {"prefix", "tensor_name", "first_row", "num_rows"};
    for (int i = 0; i < 4; ++i) {
      OP_REQUIRES_OK(ctx, CheckRank(table_name_, "", inputs[i], ctx->input(i).shape(), 0));
    }
    const std::string prefix(ctx->input(0).scalar<tensorflow::tstring>()());
    const std::string name(ctx->input(1).scalar<tensorflow::tstring>()());
    const int64_t first_row = ctx->input(2).scalar<int64_t>()();
    const int64_t num_rows = ctx->input(3).scalar<int64_t>()();

    tensorflow::BundleReader reader(ctx->env(), prefix);
    OP_REQUIRES_OK(ctx, reader.status());
    tensorflow::DataType dtype;
    tensorflow::TensorShape shape;
    OP_REQUIRES_OK(ctx, reader.LookupDtypeAndShape(name, &dtype, &shape));
    OP_REQUIRES(ctx, dtype == tensorflow::DT_FLOAT && shape.dims() == 2,
                absl::InvalidArgumentError(absl::StrCat(
                    context, "checkpoint tensor ", name, " is ",
                    tensorflow::DataTypeString(dtype), " ", shape.DebugString(),
                    ", not a float32 matrix")));
    const int64_t rows = shape.dim_size(0);
    const int64_t dim = shape.dim_size(1);
    OP_REQUIRES(ctx, first_row >= 0 && num_rows >= 0 && first_row <= rows - num_rows,
                absl::InvalidArgumentError(absl::StrCat(
                    context, "rows [", first_row, ", ", first_row + num_rows,
                    ") are not all within the checkpoint's ", rows, " rows of ", name)));
    Tensor* out = nullptr;
    OP_REQUIRES_OK(ctx, ctx->allocate_output(0, tensorflow::TensorShape({num_rows, dim}), &out));
    if (num_rows == 0) return;
    OP_REQUIRES_OK(ctx, ReadRows(ctx->env(), &reader, prefix, name, rows, first_row, out));
  }

 private:
  // Fills `out` with rows [first_row, first_row + out rows) of the checkpoint's matrix `name`.
  static absl::Status ReadRows(tensorflow::Env* env, tensorflow::BundleReader* reader,
                               const std::string& prefix, const std::string& name,
                               int64_t rows, int64_t first_row, Tensor* out) {
    const int64_t num_rows = out->dim_size(0);
    const int64_t dim = out->dim_size(1);
    tensorflow::BundleHeaderProto header;
    reader->Seek(tensorflow::kHeaderEntryKey);
    if (!reader->Valid() ||
        !header.ParseFromArray(reader->value().data(), reader->value().size())) {
      return absl::DataLossError(absl::StrCat("unreadable header in ", prefix));
    }
    std::vector<tensorflow::TensorSlice> slices;
    TF_RETURN_IF_ERROR(reader->LookupTensorSlices(name, &slices));
    if (!DirectlyReadable(header, slices)) {
      // Column slices or another byte order: TF's own reader (which reads whole slices).
      return reader->LookupSlice(
          name, tensorflow::TensorSlice({{first_row, num_rows}, {0, dim}}), out);
    }
    const int64_t row_bytes = dim * static_cast<int64_t>(sizeof(float));
    char* out_bytes = reinterpret_cast<char*>(out->flat<float>().data());
    int64_t covered = 0;
    for (const StoredPart& part : StoredParts(name, rows, slices)) {
      const int64_t start = std::max(first_row, part.first_row);
      const int64_t end = std::min(first_row + num_rows, part.first_row + part.num_rows);
      if (start >= end) continue;
      TF_RETURN_IF_ERROR(ReadPartRows(env, reader, prefix, header.num_shards(), part, row_bytes,
                                      start, end,
                                      out_bytes + (start - first_row) * row_bytes));
      covered += end - start;
    }
    if (covered != num_rows) {
      return absl::DataLossError(absl::StrCat("the checkpoint's slices of ", name, " hold ",
                                              covered, " of rows [", first_row, ", ",
                                              first_row + num_rows, ")"));
    }
    return absl::OkStatus();
  }

  std::string table_name_;
};

REGISTER_KERNEL_BUILDER(Name("TfeRestoreRows").Device(tensorflow::DEVICE_CPU), RestoreRowsOp);

}  // namespace
}  // namespace tf_embedding
