#include "cc/xla/csr_conversion.h"

#include <memory>

#include "cc/xla/batch_ops.h"
#include "xla/hlo/builder/lib/arithmetic.h"
#include "xla/hlo/builder/lib/comparators.h"
#include "xla/hlo/builder/lib/constants.h"

namespace tf_embedding {
namespace {

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

// The lookups of one feature whose rows start at `first_row`, in the rows the TF kernel's
// VisitLookupRows gives them (cc/core/csr_conversion.cc).
Lookups FeatureLookups(xla::XlaBuilder* builder, const TableSpec& table, const FeatureSpec& spec,
                       const XlaFeatureInput& input, int64_t first_row) {
  const FeatureLayout& layout = input.layout;
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
      const int64_t batch = input.row_info_size - 1;
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
                                                                        table.vocabulary_size))));
  xla::XlaOp weights = xla::Broadcast(xla::One(builder, xla::F32), {n});
  if (spec.has_weights) {
    weights = input.weights;
    // Stock safe_embedding_lookup_sparse prunes non-positive weights (NaN too) only when they
    // would feed a mean or sqrtn denominator.
    if (spec.prune_invalid && table.combiner != Combiner::kSum) {
      kept = xla::And(kept, xla::Gt(weights, xla::Zero(builder, xla::F32)));
    }
  }
  return Lookups{local_rows + Int64(builder, first_row), input.ids, kept, weights,
                 xla::Broadcast(xla::ConstantR0<bool>(builder, !layout.sequence), {n})};
}

Lookups Concatenate(xla::XlaBuilder* builder, const std::vector<Lookups>& features) {
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
Lookups InRowOrder(xla::XlaBuilder* builder, const Lookups& lookups, int64_t num_ids) {
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

// cc/core/combiner_rule.h's arithmetic in XLA operations, elementwise on f64 arrays.
struct XlaMath {
  using Value = xla::XlaOp;
  static xla::XlaOp Sqrt(xla::XlaOp x) { return xla::Sqrt(x); }
  static xla::XlaOp DivideOrZero(xla::XlaOp weight, xla::XlaOp denominator) {
    return xla::Select(xla::Eq(denominator, xla::ZerosLike(denominator)),
                       xla::ZerosLike(weight), weight / denominator);
  }
};

// Each lookup's gain: the combiner's rule over the kept, pooled lookups of its row, summed in
// double in row order as the TF kernel's ApplyCombiner (lookups are in row order here); the
// weight itself under sum and for lookups that do not pool (sequence positions).
xla::XlaOp Gains(xla::XlaBuilder* builder, const TableSpec& table, const Lookups& lookups,
                 int64_t num_rows, int64_t num_ids) {
  if (table.combiner == Combiner::kSum || num_rows == 0) return lookups.weights;
  using Rule = CombinerRule<XlaMath>;
  const xla::XlaOp weights = xla::ConvertElementType(lookups.weights, xla::F64);
  const xla::XlaOp zeros = xla::Broadcast(xla::Zero(builder, xla::F64), {num_ids});
  const xla::XlaOp terms = xla::Select(xla::And(lookups.kept, lookups.pooled),
                                       Rule::Term(table.combiner, weights), zeros);
  const xla::XlaOp sums_of_terms = ScatterElements(
      xla::Broadcast(xla::Zero(builder, xla::F64), {num_rows}), lookups.keys, terms,
      Combine::kAdd);
  const xla::XlaOp denominators = Rule::Denominator(table.combiner, sums_of_terms);
  const xla::XlaOp denominator =
      GatherElements(denominators, xla::Min(lookups.keys, Int64(builder, num_rows - 1)));
  const xla::XlaOp combined =
      xla::ConvertElementType(Rule::Gain(weights, denominator), xla::F32);
  return xla::Select(lookups.pooled, combined, lookups.weights);
}

}  // namespace

XlaCsrBatch ConvertFeatures(xla::XlaBuilder* builder, const TableSpec& table,
                            const std::vector<FeatureSpec>& specs,
                            const std::vector<XlaFeatureInput>& features) {
  std::vector<Lookups> lookups_of;
  std::vector<int64_t> row_counts;
  int64_t num_rows = 0, num_ids = 0;
  // Only dense features are in row order whatever their values.
  bool in_row_order = true;
  for (size_t f = 0; f < specs.size(); ++f) {
    if (features[f].num_ids > 0) {
      lookups_of.push_back(FeatureLookups(builder, table, specs[f], features[f], num_rows));
    }
    in_row_order = in_row_order && specs[f].kind == InputKind::kDense;
    row_counts.push_back(features[f].layout.num_rows);
    num_rows += features[f].layout.num_rows;
    num_ids += features[f].num_ids;
  }
  XlaCsrBatch batch;
  batch.feature_row_counts = xla::ConstantR1<int64_t>(builder, row_counts);
  if (num_ids == 0) {
    batch.row_splits = xla::Broadcast(Int64(builder, 0), {num_rows + 1});
    batch.ids = xla::Broadcast(Int64(builder, 0), {0});
    batch.gains = xla::Broadcast(xla::Zero(builder, xla::F32), {0});
    return batch;
  }
  Lookups lookups = Concatenate(builder, lookups_of);
  if (!in_row_order) lookups = InRowOrder(builder, lookups, num_ids);
  // Row r starts after the lookups of the rows before it; keys past the last row drop out.
  const xla::XlaOp counts =
      ScatterElements(xla::Broadcast(Int64(builder, 0), {num_rows}), lookups.keys,
                      xla::Broadcast(Int64(builder, 1), {num_ids}), Combine::kAdd);
  batch.row_splits = xla::ConcatInDim(
      builder, {xla::Broadcast(Int64(builder, 0), {1}), PrefixSum(counts, num_rows)}, 0);
  batch.ids =
      xla::Select(lookups.kept, lookups.ids, xla::Broadcast(Int64(builder, -1), {num_ids}));
  batch.gains = xla::Select(lookups.kept, Gains(builder, table, lookups, num_rows, num_ids),
                            xla::Broadcast(xla::Zero(builder, xla::F32), {num_ids}));
  return batch;
}

}  // namespace tf_embedding
