// XLA kernel of TfeEmbeddingGradient: the lookups' gradient terms grouped by id (GroupById)
// and compacted. Unlike the TF kernel's output, the U unique ids come in order of first
// occurrence, not ascending, and are padded to one entry per lookup (docs/internals.md, "XLA").
#include <string>

#include "cc/core/errors.h"
#include "cc/kernels/status.h"
#include "cc/xla/batch_ops.h"
#include "cc/xla/gradient_terms.h"
#include "cc/xla/registration.h"
#include "tensorflow/compiler/tf2xla/xla_op_kernel.h"

namespace tf_embedding {
namespace {

class EmbeddingGradientXlaOp : public tensorflow::XlaOpKernel {
 public:
  explicit EmbeddingGradientXlaOp(tensorflow::OpKernelConstruction* ctx) : XlaOpKernel(ctx) {
    OP_REQUIRES_OK(ctx, ctx->GetAttr("vocabulary_size", &vocabulary_size_));
    OP_REQUIRES_OK(ctx, ctx->GetAttr("table_name", &table_name_));
  }

  void Compile(tensorflow::XlaOpKernelContext* ctx) override {
    // GroupById's scratch has one element per table row.
    OP_REQUIRES(ctx, vocabulary_size_ >= 1,
                ToAbslStatus(TableError(
                    table_name_, "inside XLA, TfeEmbeddingGradient needs vocabulary_size (the "
                    "table's row count), got ", vocabulary_size_)));
    int64_t dim = -1;
    GradientTerms terms;
    OP_REQUIRES_OK(ctx, ReadCsrGradientTerms(ctx, table_name_, &dim, &terms));
    if (terms.size == 0) {
      ctx->SetOutput(0, terms.ids);
      ctx->SetOutput(1, terms.rows);
      return;
    }
    const CompactGroups groups = Compact(
        GroupById(terms.ids, terms.rows, terms.size, dim, vocabulary_size_), terms.size, dim);
    ctx->SetOutput(0, groups.ids);
    ctx->SetOutput(1, groups.sums);
  }

 private:
  int64_t vocabulary_size_;
  std::string table_name_;
};

[[maybe_unused]] const bool kRegistered = [] {
  RegisterXlaKernel({"TfeEmbeddingGradient"}, CreateXlaKernel<EmbeddingGradientXlaOp>);
  return true;
}();

}  // namespace
}  // namespace tf_embedding
