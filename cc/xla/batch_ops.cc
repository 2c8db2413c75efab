#include "cc/xla/batch_ops.h"

#include "xla/hlo/builder/lib/arithmetic.h"
#include "xla/hlo/builder/lib/constants.h"
#include "xla/xla_data.pb.h"

namespace tf_embedding {
namespace {

// The element type of `op` (F32 if its shape is in error, which the builder reports anyway).
xla::PrimitiveType ElementType(xla::XlaOp op) {
  const absl::StatusOr<xla::Shape> shape = op.builder()->GetShape(op);
  return shape.ok() ? shape->element_type() : xla::F32;
}

// The scatter combiner of `combine` for elements of `type`.
xla::XlaComputation Combiner(xla::XlaBuilder* builder, xla::PrimitiveType type,
                             Combine combine) {
  switch (combine) {
    case Combine::kAdd:
      return xla::CreateScalarAddComputation(type, builder);
    case Combine::kMin:
      return xla::CreateScalarMinComputation(type, builder);
    case Combine::kReplace:
      break;
  }
  std::unique_ptr<xla::XlaBuilder> sub = builder->CreateSubBuilder("replace");
  const xla::Shape scalar = xla::ShapeUtil::MakeShape(type, {});
  xla::Parameter(sub.get(), 0, scalar, "old");
  xla::Parameter(sub.get(), 1, scalar, "update");
  return sub->BuildAndNoteError();
}

// Scatters elements (rows = false) or rows of a matrix at scalar indices.
xla::XlaOp Scatter(xla::XlaOp buffer, xla::XlaOp indices, xla::XlaOp updates,
                   Combine combine, bool rows) {
  xla::ScatterDimensionNumbers dimensions;
  if (rows) dimensions.add_update_window_dims(1);
  dimensions.add_inserted_window_dims(0);
  dimensions.add_scatter_dims_to_operand_dims(0);
  dimensions.set_index_vector_dim(1);
  return xla::Scatter(buffer, indices, updates,
                      Combiner(buffer.builder(), ElementType(buffer), combine), dimensions);
}

// Gathers elements (rows = false) or rows of `dim` elements at scalar indices.
xla::XlaOp Gather(xla::XlaOp operand, xla::XlaOp indices, int64_t dim, bool rows) {
  xla::GatherDimensionNumbers dimensions;
  if (rows) dimensions.add_offset_dims(1);
  dimensions.add_collapsed_slice_dims(0);
  dimensions.add_start_index_map(0);
  dimensions.set_index_vector_dim(1);
  if (rows) return xla::Gather(operand, indices, dimensions, {1, dim});
  return xla::Gather(operand, indices, dimensions, {1});
}

xla::XlaOp Int64(xla::XlaBuilder* builder, int64_t value) {
  return xla::ConstantR0<int64_t>(builder, value);
}

xla::XlaOp Filled(xla::XlaOp value, int64_t size) { return xla::Broadcast(value, {size}); }

}  // namespace

xla::XlaOp PrefixSum(xla::XlaOp values, int64_t size) {
  if (size == 0) return values;
  xla::XlaBuilder* builder = values.builder();
  const xla::PrimitiveType type = ElementType(values);
  // A window over everything before each element; XLA turns it into a log-depth scan.
  return xla::ReduceWindowWithGeneralPadding(
      values, xla::Zero(builder, type), xla::CreateScalarAddComputation(type, builder), {size},
      {1}, {}, {}, {{size - 1, 0}});
}

xla::XlaOp GatherRows(xla::XlaOp matrix, xla::XlaOp indices, int64_t dim) {
  return Gather(matrix, indices, dim, /*rows=*/true);
}

xla::XlaOp GatherElements(xla::XlaOp values, xla::XlaOp indices) {
  return Gather(values, indices, 0, /*rows=*/false);
}

xla::XlaOp ScatterRows(xla::XlaOp buffer, xla::XlaOp indices, xla::XlaOp updates,
                       Combine combine) {
  return Scatter(buffer, indices, updates, combine, /*rows=*/true);
}

xla::XlaOp ScatterElements(xla::XlaOp buffer, xla::XlaOp indices, xla::XlaOp updates,
                           Combine combine) {
  return Scatter(buffer, indices, updates, combine, /*rows=*/false);
}

xla::XlaOp RowOfLookups(xla::XlaOp row_splits, int64_t num_rows, int64_t num_ids) {
  xla::XlaBuilder* builder = row_splits.builder();
  if (num_ids == 0) return Filled(Int64(builder, 0), 0);
  // Row r > 0 starts at row_splits[r]: count the starts at each position, then a lookup's row
  // is the number of starts at or before it. Starts at num_ids (empty trailing rows) drop out.
  const xla::XlaOp starts = xla::SliceInDim(row_splits, 1, num_rows + 1, 1, 0);
  const xla::XlaOp marks = ScatterElements(Filled(Int64(builder, 0), num_ids), starts,
                                           Filled(Int64(builder, 1), num_rows), Combine::kAdd);
  return PrefixSum(marks, num_ids);
}

xla::XlaOp CombineLookups(xla::XlaOp table, int64_t table_rows, int64_t dim, xla::XlaOp ids,
                          xla::XlaOp gains, int64_t num_ids, xla::XlaOp rows,
                          int64_t num_rows) {
  xla::XlaBuilder* builder = table.builder();
  const xla::XlaOp zeros = xla::Broadcast(xla::Zero(builder, xla::F32), {num_rows, dim});
  if (num_rows == 0 || num_ids == 0 || table_rows == 0) return zeros;
  const xla::XlaOp kept = xla::And(xla::And(xla::Ge(ids, Int64(builder, 0)),
                                            xla::Lt(ids, Int64(builder, table_rows))),
                                   xla::Lt(rows, Int64(builder, num_rows)));
  const xla::XlaOp target = xla::Select(kept, rows, Filled(Int64(builder, num_rows), num_ids));
  const xla::XlaOp terms = xla::Mul(GatherRows(table, ids, dim), gains, {0});
  return ScatterRows(zeros, target, terms, Combine::kAdd);
}

IdGroups GroupById(xla::XlaOp ids, xla::XlaOp terms, int64_t num_terms, int64_t dim,
                   int64_t vocabulary_size) {
  xla::XlaBuilder* builder = ids.builder();
  const xla::XlaOp positions = xla::Iota(builder, xla::S32, num_terms);
  const xla::XlaOp out_of_range = Filled(Int64(builder, vocabulary_size), num_terms);
  const xla::XlaOp none = Filled(xla::ConstantR0<int32_t>(builder, num_terms), num_terms);
  const xla::XlaOp valid =
      xla::And(xla::Ge(ids, Int64(builder, 0)), xla::Lt(ids, Int64(builder, vocabulary_size)));
  // first[id] = the position of the id's first term.
  const xla::XlaOp first = ScatterElements(
      Filled(xla::ConstantR0<int32_t>(builder, num_terms), vocabulary_size),
      xla::Select(valid, ids, out_of_range), positions, Combine::kMin);
  const xla::XlaOp group = xla::Select(valid, GatherElements(first, ids), none);
  const xla::XlaOp is_first = xla::Eq(group, positions);
  const xla::XlaOp zeros = xla::Broadcast(xla::Zero(builder, xla::F32), {num_terms, dim});
  return IdGroups{xla::Select(is_first, ids, out_of_range),
                  ScatterRows(zeros, group, terms, Combine::kAdd), is_first};
}

CompactGroups Compact(const IdGroups& groups, int64_t num_terms, int64_t dim) {
  xla::XlaBuilder* builder = groups.ids.builder();
  const xla::XlaOp starts = xla::ConvertElementType(groups.is_first, xla::S64);
  const xla::XlaOp slot = xla::Select(groups.is_first,
                                      PrefixSum(starts, num_terms) - Int64(builder, 1),
                                      Filled(Int64(builder, num_terms), num_terms));
  const xla::XlaOp padding = -xla::Iota(builder, xla::S64, num_terms) - Int64(builder, 1);
  const xla::XlaOp zeros = xla::Broadcast(xla::Zero(builder, xla::F32), {num_terms, dim});
  return CompactGroups{ScatterElements(padding, slot, groups.ids, Combine::kReplace),
                       ScatterRows(zeros, slot, groups.sums, Combine::kReplace)};
}

namespace {

// The non-empty parts concatenated (no parts: zero terms of `dim`).
GradientTerms Concatenate(xla::XlaBuilder* builder, const std::vector<xla::XlaOp>& ids,
                          const std::vector<xla::XlaOp>& rows, int64_t size, int64_t dim) {
  if (ids.empty()) {
    return GradientTerms{Filled(Int64(builder, 0), 0),
                         xla::Broadcast(xla::Zero(builder, xla::F32), {0, dim}), 0};
  }
  return GradientTerms{xla::ConcatInDim(builder, ids, 0), xla::ConcatInDim(builder, rows, 0),
                       size};
}

}  // namespace

GradientTerms CsrGradientTerms(xla::XlaBuilder* builder,
                               const std::vector<CsrGradientBatch>& batches, int64_t dim) {
  std::vector<xla::XlaOp> ids, rows;
  int64_t size = 0;
  for (const CsrGradientBatch& batch : batches) {
    // Without rows no lookup is in a row: the batch adds no terms.
    if (batch.num_rows == 0 || batch.num_ids == 0) continue;
    const xla::XlaOp lookup_rows = RowOfLookups(batch.row_splits, batch.num_rows, batch.num_ids);
    const xla::XlaOp in_row = xla::Lt(lookup_rows, Int64(builder, batch.num_rows));
    ids.push_back(xla::Select(in_row, batch.ids, Filled(Int64(builder, -1), batch.num_ids)));
    rows.push_back(
        xla::Mul(GatherRows(batch.activation_gradients, lookup_rows, dim), batch.gains, {0}));
    size += batch.num_ids;
  }
  return Concatenate(builder, ids, rows, size, dim);
}

GradientTerms RowGradientTerms(xla::XlaBuilder* builder, const std::vector<xla::XlaOp>& ids,
                               const std::vector<xla::XlaOp>& rows,
                               const std::vector<int64_t>& sizes, int64_t dim) {
  std::vector<xla::XlaOp> kept_ids, kept_rows;
  int64_t size = 0;
  for (size_t i = 0; i < ids.size(); ++i) {
    if (sizes[i] == 0) continue;
    kept_ids.push_back(ids[i]);
    kept_rows.push_back(rows[i]);
    size += sizes[i];
  }
  return Concatenate(builder, kept_ids, kept_rows, size, dim);
}

}  // namespace tf_embedding
