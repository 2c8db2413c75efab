// XLA kernel of TfeFeaturesToCsr, so that a Keras model or a TPUEmbeddingV0 step that converts
// its features inside a jit_compile function compiles whole.
//
// The TF kernel drops pruned lookups and sequence positions past max_sequence_length, which
// makes the batch's size depend on the ids. XLA needs sizes fixed by the input shapes, so this
// kernel keeps every input lookup in the batch and gives the dropped ones id -1, which the XLA
// lookup, gradient and apply kernels skip (cc/xla/batch_ops.h): the activations and updates are
// those of the TF kernel's batch. Data the TF kernel rejects (ids outside [0, vocabulary_size),
// sparse indices outside dense_shape, malformed ragged row_splits) cannot fail a compiled
// function; those lookups get id -1 too. Everything shape-related is checked when compiling,
// with the TF kernel's messages; a sparse feature's dense_shape must be known then (a
// compile-time constant input, as XLA needs for the row count it decides).
//
// Lookups are put in row order by an XLA sort only when they are not already (unsorted sparse
// indices, malformed input): canonical inputs, the usual case, skip the sort at run time.
#include <string>
#include <vector>

#include "cc/core/csr_conversion.h"
#include "cc/core/errors.h"
#include "cc/kernels/csr_conversion_attrs.h"
#include "cc/kernels/status.h"
#include "cc/xla/batch_ops.h"
#include "cc/xla/registration.h"
#include "tensorflow/compiler/tf2xla/xla_op_kernel.h"
#include "xla/hlo/builder/lib/arithmetic.h"
#include "xla/hlo/builder/lib/comparators.h"
#include "xla/hlo/builder/lib/constants.h"

namespace tf_embedding {
namespace {

using ::tensorflow::TensorShape;
using ::tensorflow::XlaOpKernelContext;

xla::XlaOp Int64(xla::XlaBuilder* builder, int64_t value) {
  return xla::ConstantR0<int64_t>(builder, value);
}

// One feature's lookups, one element per input id: the id, its output row as the key that
// orders the batch, whether the TF kernel keeps it, its weight, and whether its row pools.
struct Lookups {
  xla::XlaOp keys;     // int64; a lookup in no row of the feature gets the row after them
  xla::XlaOp ids;      // int64
  xla::XlaOp kept;     // pred
  xla::XlaOp weights;  // float
  xla::XlaOp pooled;   // pred
};

// The inputs of one feature.
struct FeatureInputs {
  xla::XlaOp ids;
  int64_t num_ids = 0;
  xla::XlaOp row_info;
  TensorShape row_info_shape;
  std::vector<int64_t> dense_shape;
  xla::XlaOp weights;  // flattened, when the feature has weights
  int64_t num_weights = 0;
};

class FeaturesToCsrXlaOp : public tensorflow::XlaOpKernel {
 public:
  explicit FeaturesToCsrXlaOp(tensorflow::OpKernelConstruction* ctx) : XlaOpKernel(ctx) {
    OP_REQUIRES_OK(ctx, ReadCsrConversionAttrs(ctx, &table_, &features_));
  }

  void Compile(XlaOpKernelContext* ctx) override {
    std::vector<FeatureInputs> inputs;
    OP_REQUIRES_OK(ctx, ReadInputs(ctx, &inputs));
    xla::XlaBuilder* builder = ctx->builder();
    std::vector<Lookups> features;
    std::vector<int64_t> row_counts;
    int64_t num_rows = 0, num_ids = 0;
    bool in_row_order = true;
    for (size_t f = 0; f < features_.size(); ++f) {
      const FeatureSpec& spec = features_[f];
      FeatureLayout layout;
      OP_REQUIRES_OK(ctx, CheckShapes(spec, inputs[f], num_rows, &layout));
      if (inputs[f].num_ids > 0) {
        features.push_back(FeatureLookups(builder, spec, inputs[f], layout, num_rows));
      }
      // Only dense features are in row order whatever their values.
      in_row_order = in_row_order && spec.kind == InputKind::kDense;
      row_counts.push_back(layout.num_rows);
      num_rows += layout.num_rows;
      num_ids += inputs[f].num_ids;
    }
    ctx->SetOutput(3, xla::ConstantR1<int64_t>(builder, row_counts));
    if (num_ids == 0) {
      ctx->SetOutput(0, xla::Broadcast(Int64(builder, 0), {num_rows + 1}));
      ctx->SetOutput(1, xla::Broadcast(Int64(builder, 0), {0}));
      ctx->SetOutput(2, xla::Broadcast(xla::Zero(builder, xla::F32), {0}));
      return;
    }
    Lookups lookups = Concatenate(builder, features);
    if (!in_row_order) lookups = InRowOrder(builder, lookups, num_ids);
    // Row r starts after the lookups of the rows before it; keys past the last row drop out.
    const xla::XlaOp counts =
        ScatterElements(xla::Broadcast(Int64(builder, 0), {num_rows}), lookups.keys,
                        xla::Broadcast(Int64(builder, 1), {num_ids}), Combine::kAdd);
    ctx->SetOutput(0, xla::ConcatInDim(builder, {xla::Broadcast(Int64(builder, 0), {1}),
                                                 PrefixSum(counts, num_rows)},
                                       0));
    ctx->SetOutput(1, xla::Select(lookups.kept, lookups.ids,
                                  xla::Broadcast(Int64(builder, -1), {num_ids})));
    ctx->SetOutput(2, xla::Select(lookups.kept, Gains(builder, lookups, num_rows, num_ids),
                                  xla::Broadcast(xla::Zero(builder, xla::F32), {num_ids})));
  }

 private:
  absl::Status ReadInputs(XlaOpKernelContext* ctx, std::vector<FeatureInputs>* inputs) const {
    std::vector<xla::XlaOp> ids, row_info, weights;
    std::vector<TensorShape> ids_shapes, row_info_shapes, weights_shapes;
    TF_RETURN_IF_ERROR(ctx->InputList("ids", &ids, &ids_shapes));
    TF_RETURN_IF_ERROR(ctx->InputList("row_info", &row_info, &row_info_shapes));
    TF_RETURN_IF_ERROR(ctx->InputList("weights", &weights, &weights_shapes));
    const int num_features = static_cast<int>(features_.size());
    inputs->resize(num_features);
    for (int f = 0; f < num_features; ++f) {
      FeatureInputs& input = (*inputs)[f];
      input.num_ids = ids_shapes[f].num_elements();
      input.ids = xla::ConvertElementType(xla::Reshape(ids[f], {input.num_ids}), xla::S64);
      input.row_info = row_info[f];
      input.row_info_shape = row_info_shapes[f];
      input.num_weights = weights_shapes[f].num_elements();
      input.weights = xla::Reshape(weights[f], {input.num_weights});
      if (features_[f].kind == InputKind::kSparse) {
        // Inputs are ids, row_info, dense_shapes, weights: N each.
        TF_RETURN_IF_ERROR(
            ctx->ConstantInputReshapedToIntVector(2 * num_features + f, &input.dense_shape));
      }
    }
    return absl::OkStatus();
  }

  // The checks of the TF kernel that need only shapes (FeatureLayoutOf, CheckStackedRows).
  absl::Status CheckShapes(const FeatureSpec& spec, const FeatureInputs& input,
                           int64_t rows_before, FeatureLayout* layout) const {
    FeatureTensors tensors;
    tensors.ids = IdSpan(static_cast<const int64_t*>(nullptr), input.num_ids);
    tensors.row_info = {nullptr, input.row_info_shape.num_elements()};
    for (int64_t d : input.row_info_shape.dim_sizes()) tensors.row_info_shape.push_back(d);
    tensors.dense_shape = {input.dense_shape.data(),
                           static_cast<int64_t>(input.dense_shape.size())};
    tensors.weights = {nullptr, input.num_weights};
    TF_RETURN_IF_ERROR(ToAbslStatus(FeatureLayoutOf(table_.name, spec, tensors, layout)));
    return ToAbslStatus(CheckStackedRows(table_.name, spec, rows_before, layout->num_rows));
  }

  // The lookups of one feature whose rows start at `first_row`, as the TF kernel's
  // DenseRows, SparseRows and RaggedRows place them (cc/core/csr_conversion.cc).
  Lookups FeatureLookups(xla::XlaBuilder* builder, const FeatureSpec& spec,
                         const FeatureInputs& input, const FeatureLayout& layout,
                         int64_t first_row) const {
    const int64_t n = input.num_ids;
    const int64_t msl = spec.max_sequence_length;
    const xla::XlaOp no_row = xla::Broadcast(Int64(builder, layout.num_rows), {n});
    xla::XlaOp local_rows;
    xla::XlaOp in_rows = xla::Broadcast(xla::ConstantR0<bool>(builder, true), {n});
    // Sequence positions past max_sequence_length stay in their sample's last row, so that
    // the lookups keep their row order.
    auto sequence_row = [&](xla::XlaOp sample, xla::XlaOp position) {
      in_rows = xla::And(in_rows, xla::Lt(position, Int64(builder, msl)));
      return sample * Int64(builder, msl) + xla::Min(position, Int64(builder, msl - 1));
    };
    switch (spec.kind) {
      case InputKind::kDense:
        local_rows = xla::Iota(builder, xla::S64, n);
        break;
      case InputKind::kSparse: {
        const std::vector<int64_t>& dense_shape = input.dense_shape;
        const int64_t rank = static_cast<int64_t>(dense_shape.size());
        std::vector<xla::XlaOp> index(rank);
        xla::XlaOp in_bounds = in_rows;
        for (int64_t d = 0; d < rank; ++d) {
          index[d] = xla::Reshape(xla::SliceInDim(input.row_info, d, d + 1, 1, 1), {n});
          in_bounds = xla::And(in_bounds, xla::And(xla::Ge(index[d], Int64(builder, 0)),
                                                   xla::Lt(index[d], Int64(builder,
                                                                           dense_shape[d]))));
        }
        if (layout.sequence) {
          local_rows = sequence_row(index[0], index[1]);
        } else {
          // The row-major index of indices[:, :-1].
          local_rows = index[0];
          for (int64_t d = 1; d + 1 < rank; ++d) {
            local_rows = local_rows * Int64(builder, dense_shape[d]) + index[d];
          }
        }
        in_rows = xla::And(in_rows, in_bounds);
        local_rows = xla::Select(in_bounds, local_rows, no_row);
        break;
      }
      case InputKind::kRagged: {
        const int64_t batch = input.row_info_shape.num_elements() - 1;
        const xla::XlaOp sample = RowOfLookups(input.row_info, batch, n);
        const xla::XlaOp in_batch = xla::Lt(sample, Int64(builder, batch));
        if (batch == 0) {
          local_rows = no_row;
          in_rows = in_batch;
          break;
        }
        const xla::XlaOp position =
            xla::Iota(builder, xla::S64, n) -
            GatherElements(input.row_info, xla::Min(sample, Int64(builder, batch - 1)));
        local_rows = layout.sequence ? sequence_row(sample, position) : sample;
        in_rows = xla::And(in_rows, in_batch);
        local_rows = xla::Select(in_batch, local_rows, no_row);
        break;
      }
    }
    // Ids outside the table are errors of the TF kernel, except negative ones when pruning.
    xla::XlaOp kept = xla::And(in_rows, xla::And(xla::Ge(input.ids, Int64(builder, 0)),
                                                 xla::Lt(input.ids, Int64(builder,
                                                                          table_.vocabulary_size))));
    xla::XlaOp weights = xla::Broadcast(xla::One(builder, xla::F32), {n});
    if (spec.has_weights) {
      weights = input.weights;
      // Stock safe_embedding_lookup_sparse prunes non-positive weights (NaN too) only when they
      // would feed a mean or sqrtn denominator.
      if (spec.prune_invalid && table_.combiner != Combiner::kSum) {
        kept = xla::And(kept, xla::Gt(weights, xla::Zero(builder, xla::F32)));
      }
    }
    return Lookups{local_rows + Int64(builder, first_row), input.ids, kept, weights,
                   xla::Broadcast(xla::ConstantR0<bool>(builder, !layout.sequence), {n})};
  }

  static Lookups Concatenate(xla::XlaBuilder* builder, const std::vector<Lookups>& features) {
    auto all = [&](xla::XlaOp Lookups::*member) {
      std::vector<xla::XlaOp> parts;
      for (const Lookups& feature : features) parts.push_back(feature.*member);
      return xla::ConcatInDim(builder, parts, 0);
    };
    return Lookups{all(&Lookups::keys), all(&Lookups::ids), all(&Lookups::kept),
                   all(&Lookups::weights), all(&Lookups::pooled)};
  }

  // The lookups stably sorted by key (row), when they are not in row order already: the TF
  // kernel's counting sort, which keeps input order within a row.
  static Lookups InRowOrder(xla::XlaBuilder* builder, const Lookups& lookups, int64_t num_ids) {
    if (num_ids < 2) return lookups;
    const xla::XlaOp keys = lookups.keys;
    const xla::XlaOp ordered = xla::ReduceAll(
        xla::Ge(xla::SliceInDim(keys, 1, num_ids, 1, 0), xla::SliceInDim(keys, 0, num_ids - 1, 1, 0)),
        xla::ConstantR0<bool>(builder, true),
        xla::CreateScalarAndComputation(xla::PRED, builder));
    const xla::XlaOp all = xla::Tuple(builder, {keys, lookups.ids, lookups.kept, lookups.weights,
                                                lookups.pooled});
    const xla::Shape shape = builder->GetShape(all).value_or(xla::Shape());

    std::unique_ptr<xla::XlaBuilder> keep = builder->CreateSubBuilder("in_row_order");
    xla::Parameter(keep.get(), 0, shape, "lookups");
    std::unique_ptr<xla::XlaBuilder> sort = builder->CreateSubBuilder("sort_by_row");
    {
      const xla::XlaOp parameter = xla::Parameter(sort.get(), 0, shape, "lookups");
      std::vector<xla::XlaOp> operands;
      std::vector<xla::PrimitiveType> types;
      for (int i = 0; i < 5; ++i) {
        operands.push_back(xla::GetTupleElement(parameter, i));
        types.push_back(shape.tuple_shapes(i).element_type());
      }
      xla::Sort(operands, xla::CreateScalarLtComputation(types, sort.get()), 0,
                /*is_stable=*/true);
    }
    const xla::XlaOp sorted = xla::Conditional(ordered, all, keep->BuildAndNoteError(), all,
                                               sort->BuildAndNoteError());
    return Lookups{xla::GetTupleElement(sorted, 0), xla::GetTupleElement(sorted, 1),
                   xla::GetTupleElement(sorted, 2), xla::GetTupleElement(sorted, 3),
                   xla::GetTupleElement(sorted, 4)};
  }

  // The gains: the weights of sequence rows and under the sum combiner; else each weight over
  // its row's sum of weights (mean) or the square root of its sum of squares (sqrtn), 0 over 0,
  // in double in row order as the TF kernel's ApplyCombiner (lookups in row order here).
  xla::XlaOp Gains(xla::XlaBuilder* builder, const Lookups& lookups, int64_t num_rows,
                   int64_t num_ids) const {
    if (table_.combiner == Combiner::kSum || num_rows == 0) return lookups.weights;
    const xla::XlaOp weights = xla::ConvertElementType(lookups.weights, xla::F64);
    const xla::XlaOp zeros = xla::Broadcast(xla::Zero(builder, xla::F64), {num_ids});
    const xla::XlaOp terms = table_.combiner == Combiner::kMean ? weights : weights * weights;
    xla::XlaOp denominators = ScatterElements(
        xla::Broadcast(xla::Zero(builder, xla::F64), {num_rows}), lookups.keys,
        xla::Select(xla::And(lookups.kept, lookups.pooled), terms, zeros), Combine::kAdd);
    if (table_.combiner == Combiner::kSqrtn) denominators = xla::Sqrt(denominators);
    const xla::XlaOp denominator =
        GatherElements(denominators, xla::Min(lookups.keys, Int64(builder, num_rows - 1)));
    const xla::XlaOp combined = xla::Select(
        xla::Eq(denominator, xla::Zero(builder, xla::F64)),
        xla::Broadcast(xla::Zero(builder, xla::F32), {num_ids}),
        xla::ConvertElementType(weights / denominator, xla::F32));
    return xla::Select(lookups.pooled, combined, lookups.weights);
  }

  TableSpec table_;
  std::vector<FeatureSpec> features_;
};

[[maybe_unused]] const bool kRegistered = [] {
  RegisterXlaKernel({"TfeFeaturesToCsr",
                     /*compile_time_constant_inputs=*/{"dense_shapes"},
                     /*type_constraints=*/{{"Tids", {tensorflow::DT_INT32, tensorflow::DT_INT64}}}},
                    CreateXlaKernel<FeaturesToCsrXlaOp>);
  return true;
}();

}  // namespace
}  // namespace tf_embedding
