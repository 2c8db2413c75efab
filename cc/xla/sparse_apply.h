// The XLA form of the sparse-apply kernels' update (cc/kernels/sparse_apply_kernels.cc): the
// gradient terms grouped by id, then UpdateElement, the TF kernels' own definition of each
// rule (cc/core/optimizers.h), over the touched rows of the table and slots, or over every row
// for a rule that updates untouched rows.
//
// XLA cannot fail at run time, so where the TF kernel rejects data this gives it a defined
// meaning (docs/xla.md, "Limits"): ids outside [0, rows) are skipped, and a non-finite
// learning rate leaves every variable unchanged.
#ifndef TF_EMBEDDING_CC_XLA_SPARSE_APPLY_H_
#define TF_EMBEDDING_CC_XLA_SPARSE_APPLY_H_

#include <array>
#include <cstdint>
#include <vector>

#include "cc/core/optimizers.h"
#include "cc/xla/batch_ops.h"
#include "cc/xla/xla_math.h"
#include "xla/hlo/builder/lib/constants.h"
#include "xla/hlo/builder/xla_builder.h"

namespace tf_embedding {

// UpdateElement over whole arrays: `gradients` and `variables` (table, then slots) are
// [n, dim], `lr` a scalar. Returns the updated variables.
template <typename Rule>
std::vector<xla::XlaOp> UpdateArrays(const Rule& rule, const CommonUpdateParams& common,
                                     xla::XlaOp lr, xla::XlaOp gradients,
                                     const std::vector<xla::XlaOp>& variables) {
  const XlaValue rate(lr);
  XlaValue weights(variables[0]);
  std::array<XlaValue, Rule::kNumSlots> slots;
  for (int k = 0; k < Rule::kNumSlots; ++k) slots[k] = XlaValue(variables[1 + k]);
  const XlaValue decay = common.WeightDecay(rate);
  WithCommonKnobs(common, [&](auto apply_common) {
    UpdateElement<decltype(apply_common)::value>(rule, common, rate, decay, XlaValue(gradients),
                                                 weights, slots);
  });
  std::vector<xla::XlaOp> updated = {weights.op()};
  for (const XlaValue& slot : slots) updated.push_back(slot.op());
  return updated;
}

// The table and slots after one step of `rule` with the gradient `terms` and the float scalar
// `lr`. `variables` are the table, then the slots in Rule::kSlotNames order, all [rows, dim]
// with rows >= 1.
template <typename Rule>
std::vector<xla::XlaOp> SparseApply(const Rule& rule, const CommonUpdateParams& common,
                                    xla::XlaOp lr, const GradientTerms& terms, int64_t rows,
                                    int64_t dim, const std::vector<xla::XlaOp>& variables) {
  const bool all_rows = rule.UpdatesUntouchedRows();
  // Nothing to update.
  if (terms.size == 0 && !all_rows) return variables;
  xla::XlaBuilder* builder = lr.builder();
  const xla::XlaOp lr_is_finite = xla::IsFinite(lr);
  IdGroups groups;
  if (terms.size > 0) groups = GroupById(terms.ids, terms.rows, terms.size, dim, rows);
  if (all_rows) {
    // Untouched rows get a zero gradient; a non-finite learning rate keeps every old value.
    xla::XlaOp gradients = xla::Broadcast(xla::Zero(builder, xla::F32), {rows, dim});
    if (terms.size > 0) {
      gradients = ScatterRows(gradients, groups.ids, groups.sums, Combine::kReplace);
    }
    std::vector<xla::XlaOp> updated = UpdateArrays(rule, common, lr, gradients, variables);
    const xla::XlaOp keep_new = xla::Broadcast(lr_is_finite, {rows, dim});
    for (size_t i = 0; i < updated.size(); ++i) {
      updated[i] = xla::Select(keep_new, updated[i], variables[i]);
    }
    return updated;
  }
  // The first term of each id points at its row, the others (and all of them under a
  // non-finite learning rate) out of range, where the scatters skip them.
  const xla::XlaOp targets = xla::Select(
      xla::And(groups.is_first, xla::Broadcast(lr_is_finite, {terms.size})), groups.ids,
      xla::Broadcast(xla::ConstantR0<int64_t>(builder, rows), {terms.size}));
  std::vector<xla::XlaOp> touched;
  for (const xla::XlaOp& variable : variables) {
    touched.push_back(GatherRows(variable, targets, dim));
  }
  std::vector<xla::XlaOp> updated = UpdateArrays(rule, common, lr, groups.sums, touched);
  for (size_t i = 0; i < updated.size(); ++i) {
    updated[i] = ScatterRows(variables[i], targets, updated[i], Combine::kReplace);
  }
  return updated;
}

}  // namespace tf_embedding

#endif  // TF_EMBEDDING_CC_XLA_SPARSE_APPLY_H_
