// The XLA kernels of the lookup, gradient, sparse-apply, CSR conversion and feature-output
// ops: they read and check their inputs' shapes and attrs, with the TF kernels' messages, then
// compile to the custom calls of custom_calls.h on the CPU compilation device, and to the XLA
// operations of batch_ops.h, sparse_apply.h and csr_conversion.h on the GPU one.
//
// One translation unit on purpose: tensorflow/compiler/tf2xla/xla_op_kernel.h alone costs a
// compiler about a minute and 1.7 GiB, so only this file includes it, and the builders, which
// need only xla_builder.h, compile in their own files.
#include <algorithm>
#include <limits>
#include <string>
#include <vector>

#include "cc/core/csr_batch.h"
#include "cc/core/csr_conversion.h"
#include "cc/core/errors.h"
#include "cc/core/feature_outputs.h"
#include "cc/core/features_lookup.h"
#include "cc/core/optimizers.h"
#include "cc/kernels/csr_conversion_attrs.h"
#include "cc/kernels/feature_outputs_attrs.h"
#include "cc/kernels/shape_checks.h"
#include "cc/kernels/sparse_apply_checks.h"
#include "cc/kernels/tf_status.h"
#include "cc/ops/sparse_apply_op_names.h"
#include "cc/xla/batch_ops.h"
#include "cc/xla/csr_conversion.h"
#include "cc/xla/custom_calls.h"
#include "cc/xla/registration.h"
#include "cc/xla/sparse_apply.h"
#include "tensorflow/compiler/tf2xla/shape_util.h"
#include "tensorflow/compiler/tf2xla/xla_op_kernel.h"
#include "tensorflow/compiler/tf2xla/xla_resource.h"
#include "xla/shape_util.h"

namespace tf_embedding {
namespace {

using ::tensorflow::OpKernelConstruction;
using ::tensorflow::TensorShape;
using ::tensorflow::XlaOpKernel;
using ::tensorflow::XlaOpKernelContext;

// Whether the kernel compiles for XLA's CPU backend, where the ops run as custom calls.
bool CompilesForCpu(OpKernelConstruction* ctx) {
  return ctx->device_type() == tensorflow::DeviceType(tensorflow::DEVICE_CPU_XLA_JIT);
}

xla::Shape FloatShape(absl::Span<const int64_t> dims) {
  return xla::ShapeUtil::MakeShape(xla::F32, dims);
}

// The shape of input `index` as XLA compiles it (XlaOpKernelContext::InputShape is deprecated).
absl::StatusOr<TensorShape> InputShapeOf(XlaOpKernelContext* ctx, int index) {
  TF_ASSIGN_OR_RETURN(const xla::Shape shape, ctx->InputXlaShape(index));
  TensorShape tensor_shape;
  TF_RETURN_IF_ERROR(tensorflow::XLAShapeToTensorShape(shape, &tensor_shape));
  return tensor_shape;
}

// Reads float32 resource input `index` (`what`: "Table 't': table", say), rejecting a variable of
// another dtype with the TF kernels' message rather than XLA's, which names no table.
absl::Status ReadFloatVariable(XlaOpKernelContext* ctx, int index, const std::string& what,
                               TensorShape* shape, xla::XlaOp* value) {
  tensorflow::DataType dtype;
  TensorShape declared_shape;
  TF_RETURN_IF_ERROR(ctx->GetVariableTypeAndShape(index, &dtype, &declared_shape));
  TF_RETURN_IF_ERROR(CheckFloatVariableType(what, dtype));
  return ctx->ReadVariableInput(index, tensorflow::DT_FLOAT, shape, value);
}

// Checks a CSR batch's shapes (`context`: "" or "batch <b>: ") as the TF kernels do.
absl::Status CheckCsrShapes(const std::string& table_name, const std::string& context,
                            const TensorShape& row_splits, const TensorShape& ids,
                            const TensorShape& gains) {
  TF_RETURN_IF_ERROR(CheckRank(table_name, context, "row_splits", row_splits, 1));
  TF_RETURN_IF_ERROR(CheckRank(table_name, context, "ids", ids, 1));
  TF_RETURN_IF_ERROR(CheckRank(table_name, context, "gains", gains, 1));
  return ToAbslStatus(
      ValidateCsrBatchSizes(row_splits.dim_size(0), ids.dim_size(0), gains.dim_size(0))
          .WithContext(TableContext(table_name) + context));
}

// GroupById numbers the terms with int32.
absl::Status CheckTermCount(const std::string& table_name, const GradientTerms& terms) {
  if (terms.size <= std::numeric_limits<int32_t>::max()) return absl::OkStatus();
  return ToAbslStatus(TableError(table_name, "XLA kernels take at most 2^31 - 1 gradient terms, "
                                 "got ", terms.size));
}

// The gradient inputs of a gradient or sparse-apply op after their shape checks: the list
// inputs in op order (the custom calls' operands) and their terms for the XLA operations.
struct GradientInputs {
  std::vector<xla::XlaOp> operands;
  int64_t num_lists = 0;
  // The number of terms: lookups or rows.
  int64_t size = 0;
  GradientTerms terms;
};

// The N CSR batches of inputs row_splits, ids, gains and activation_gradients. `dim` is the
// table's; a negative value is replaced by that of activation_gradients[0].
absl::Status ReadCsrGradients(XlaOpKernelContext* ctx, bool on_cpu,
                              const std::string& table_name, int64_t* dim,
                              GradientInputs* inputs) {
  std::vector<xla::XlaOp> row_splits, ids, gains, gradients;
  std::vector<TensorShape> row_splits_shapes, ids_shapes, gains_shapes, gradients_shapes;
  TF_RETURN_IF_ERROR(ctx->InputList("row_splits", &row_splits, &row_splits_shapes));
  TF_RETURN_IF_ERROR(ctx->InputList("ids", &ids, &ids_shapes));
  TF_RETURN_IF_ERROR(ctx->InputList("gains", &gains, &gains_shapes));
  TF_RETURN_IF_ERROR(ctx->InputList("activation_gradients", &gradients, &gradients_shapes));
  std::vector<CsrGradientBatch> batches;
  for (size_t b = 0; b < row_splits.size(); ++b) {
    const std::string context = BatchContext(b);
    TF_RETURN_IF_ERROR(CheckCsrShapes(table_name, context, row_splits_shapes[b], ids_shapes[b],
                                      gains_shapes[b]));
    const int64_t num_rows = row_splits_shapes[b].dim_size(0) - 1;
    TF_RETURN_IF_ERROR(CheckGradientShape(table_name, context, "activation_gradients",
                                          gradients_shapes[b], num_rows, "row_splits segment",
                                          dim));
    batches.push_back(CsrGradientBatch{row_splits[b], ids[b], gains[b], gradients[b], num_rows,
                                       ids_shapes[b].dim_size(0)});
    inputs->size += ids_shapes[b].dim_size(0);
  }
  inputs->num_lists = static_cast<int64_t>(row_splits.size());
  for (const auto* list : {&row_splits, &ids, &gains, &gradients}) {
    inputs->operands.insert(inputs->operands.end(), list->begin(), list->end());
  }
  if (on_cpu) return absl::OkStatus();
  inputs->terms = CsrGradientTerms(ctx->builder(), batches, *dim);
  return CheckTermCount(table_name, inputs->terms);
}

// The N lists of inputs unique_ids and rows. Unlike the TF kernels, which reject them, the
// XLA operations accept ids that do not ascend within a list: repeated ids are summed like the
// others. (The custom calls run the TF kernels' checks.)
absl::Status ReadRowGradients(XlaOpKernelContext* ctx, bool on_cpu,
                              const std::string& table_name, int64_t* dim,
                              GradientInputs* inputs) {
  std::vector<xla::XlaOp> unique_ids, rows;
  std::vector<TensorShape> unique_ids_shapes, rows_shapes;
  TF_RETURN_IF_ERROR(ctx->InputList("unique_ids", &unique_ids, &unique_ids_shapes));
  TF_RETURN_IF_ERROR(ctx->InputList("rows", &rows, &rows_shapes));
  std::vector<int64_t> sizes;
  for (size_t b = 0; b < unique_ids.size(); ++b) {
    const std::string context = BatchContext(b);
    TF_RETURN_IF_ERROR(CheckRank(table_name, context, "unique_ids", unique_ids_shapes[b], 1));
    sizes.push_back(unique_ids_shapes[b].dim_size(0));
    TF_RETURN_IF_ERROR(CheckGradientShape(table_name, context, "rows", rows_shapes[b],
                                          sizes.back(), "unique id", dim));
    inputs->size += sizes.back();
  }
  inputs->num_lists = static_cast<int64_t>(unique_ids.size());
  inputs->operands = unique_ids;
  inputs->operands.insert(inputs->operands.end(), rows.begin(), rows.end());
  if (on_cpu) return absl::OkStatus();
  inputs->terms = RowGradientTerms(ctx->builder(), unique_ids, rows, sizes, *dim);
  return CheckTermCount(table_name, inputs->terms);
}

// TfeEmbeddingLookup (kVariable: the table is resource input 0) and TfeEmbeddingLookupDense.
template <bool kVariable>
class EmbeddingLookupOp : public XlaOpKernel {
 public:
  explicit EmbeddingLookupOp(OpKernelConstruction* ctx)
      : XlaOpKernel(ctx), on_cpu_(CompilesForCpu(ctx)) {
    OP_REQUIRES_OK(ctx, ctx->GetAttr("table_name", &table_name_));
  }

  void Compile(XlaOpKernelContext* ctx) override {
    TensorShape table_shape;
    xla::XlaOp table;
    if (kVariable) {
      const std::string what = TableContext(table_name_) + "table";
      OP_REQUIRES_OK(ctx, ReadFloatVariable(ctx, 0, what, &table_shape, &table));
      OP_REQUIRES_OK(ctx, CheckMatrixVariableShape(what, table_shape));
    } else {
      table = ctx->Input(0);
      OP_REQUIRES_VALUE(table_shape, ctx, InputShapeOf(ctx, 0));
      OP_REQUIRES(ctx, table_shape.dims() == 2,
                  ToAbslStatus(TableError(table_name_, "table must be a matrix, got shape ",
                                          table_shape.DebugString())));
    }
    OP_REQUIRES_VALUE(const TensorShape row_splits_shape, ctx, InputShapeOf(ctx, 1));
    OP_REQUIRES_VALUE(const TensorShape ids_shape, ctx, InputShapeOf(ctx, 2));
    OP_REQUIRES_VALUE(const TensorShape gains_shape, ctx, InputShapeOf(ctx, 3));
    OP_REQUIRES_OK(ctx, CheckCsrShapes(table_name_, "", row_splits_shape, ids_shape,
                                       gains_shape));
    const int64_t num_rows = row_splits_shape.dim_size(0) - 1;
    const int64_t num_ids = ids_shape.dim_size(0);
    if (on_cpu_) {
      FfiAttributes attributes;
      attributes.Add("table_name", table_name_);
      ctx->SetOutput(0, FfiCall(ctx->builder(), kLookupTarget,
                                {table, ctx->Input(1), ctx->Input(2), ctx->Input(3)},
                                FloatShape({num_rows, table_shape.dim_size(1)}), attributes));
      return;
    }
    ctx->SetOutput(0, CombineLookups(table, table_shape.dim_size(0), table_shape.dim_size(1),
                                     ctx->Input(2), ctx->Input(3), num_ids,
                                     RowOfLookups(ctx->Input(1), num_rows, num_ids), num_rows));
  }

 private:
  const bool on_cpu_;
  std::string table_name_;
};

// TfeEmbeddingGradient, padded to one entry per lookup: on CPUs the TF kernel's ascending ids
// (Gradient in ffi_handlers.cc), on GPUs ids in order of first occurrence (Compact).
class EmbeddingGradientOp : public XlaOpKernel {
 public:
  explicit EmbeddingGradientOp(OpKernelConstruction* ctx)
      : XlaOpKernel(ctx), on_cpu_(CompilesForCpu(ctx)) {
    OP_REQUIRES_OK(ctx, ctx->GetAttr("vocabulary_size", &vocabulary_size_));
    OP_REQUIRES_OK(ctx, ctx->GetAttr("table_name", &table_name_));
  }

  void Compile(XlaOpKernelContext* ctx) override {
    int64_t dim = -1;
    GradientInputs inputs;
    OP_REQUIRES_OK(ctx, ReadCsrGradients(ctx, on_cpu_, table_name_, &dim, &inputs));
    if (on_cpu_) {
      FfiAttributes attributes;
      attributes.Add("table_name", table_name_);
      attributes.Add("num_batches", inputs.num_lists);
      attributes.Add("vocabulary_size", vocabulary_size_);
      const xla::XlaOp call = FfiCall(
          ctx->builder(), kGradientTarget, inputs.operands,
          xla::ShapeUtil::MakeTupleShape({xla::ShapeUtil::MakeShape(xla::S64, {inputs.size}),
                                          FloatShape({inputs.size, dim})}),
          attributes);
      ctx->SetOutput(0, xla::GetTupleElement(call, 0));
      ctx->SetOutput(1, xla::GetTupleElement(call, 1));
      return;
    }
    // GroupById's scratch has one element per table row.
    OP_REQUIRES(ctx, vocabulary_size_ >= 1,
                ToAbslStatus(TableError(
                    table_name_, "inside XLA, TfeEmbeddingGradient needs vocabulary_size (the "
                    "table's row count), got ", vocabulary_size_)));
    const GradientTerms& terms = inputs.terms;
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
  const bool on_cpu_;
  int64_t vocabulary_size_;
  std::string table_name_;
};

// The gradient forms of the sparse-apply ops, as in the TF kernels: how the gradient inputs
// are read, and the name of the input that holds the gradient rows.
template <auto kRead, const char* kGradientsInput>
struct GradientForm {
  static constexpr auto Read = kRead;
  static constexpr const char* kGradients = kGradientsInput;
};
constexpr char kActivationGradients[] = "activation_gradients";
constexpr char kRows[] = "rows";
using CsrGradients = GradientForm<ReadCsrGradients, kActivationGradients>;
using RowGradients = GradientForm<ReadRowGradients, kRows>;

// TfeSparseApply<Rule> and TfeSparseApply<Rule>Rows.
template <typename Rule, typename Gradients>
class SparseApplyOp : public XlaOpKernel {
 public:
  static constexpr int kNumVariables = 1 + Rule::kNumSlots;

  explicit SparseApplyOp(OpKernelConstruction* ctx)
      : XlaOpKernel(ctx), on_cpu_(CompilesForCpu(ctx)) {
    OP_REQUIRES_OK(ctx, ctx->GetAttr("table_name", &table_name_));
    OP_REQUIRES_OK(ctx, ReadHyperparameters(ctx, &common_));
    OP_REQUIRES_OK(ctx, ReadHyperparameters(ctx, &rule_));
  }

  void Compile(XlaOpKernelContext* ctx) override {
    const int lr_index = ctx->num_inputs() - 1;
    OP_REQUIRES_VALUE(const TensorShape lr_shape, ctx, InputShapeOf(ctx, lr_index));
    OP_REQUIRES_OK(ctx, CheckLearningRateShape(table_name_, lr_shape));
    int64_t dim = -1;
    GradientInputs inputs;
    OP_REQUIRES_OK(ctx, Gradients::Read(ctx, on_cpu_, table_name_, &dim, &inputs));
    std::vector<xla::XlaOp> variables(kNumVariables);
    std::vector<TensorShape> shapes(kNumVariables);
    OP_REQUIRES_OK(ctx, ReadDistinctVariables(ctx, &variables, &shapes));
    OP_REQUIRES_OK(ctx, CheckVariableShapes<Rule>(table_name_, Gradients::kGradients, shapes,
                                                  dim));
    const int64_t rows = shapes[0].dim_size(0);
    std::vector<xla::XlaOp> updated;
    if (on_cpu_) {
      updated = UpdateInPlace(ctx, inputs, rows, dim, variables);
    } else {
      // A table without rows has nothing to update.
      if (rows == 0) return;
      updated = SparseApply(rule_, common_, ctx->Input(lr_index), inputs.terms, rows, dim,
                            variables);
    }
    for (int i = 0; i < kNumVariables; ++i) {
      OP_REQUIRES_OK(ctx, ctx->AssignVariable(i, tensorflow::DT_FLOAT, updated[i]));
    }
  }

 private:
  // The custom call of the op's handler, whose results (the table and slots) alias the
  // variables' buffers: XLA updates them in place.
  std::vector<xla::XlaOp> UpdateInPlace(XlaOpKernelContext* ctx, const GradientInputs& inputs,
                                        int64_t rows, int64_t dim,
                                        const std::vector<xla::XlaOp>& variables) const {
    FfiAttributes attributes;
    attributes.Add("table_name", table_name_);
    attributes.Add("num_batches", inputs.num_lists);
    AddHyperparameters(common_, &attributes);
    AddHyperparameters(rule_, &attributes);
    std::vector<xla::XlaOp> operands = variables;
    operands.insert(operands.end(), inputs.operands.begin(), inputs.operands.end());
    operands.push_back(ctx->Input(ctx->num_inputs() - 1));
    std::vector<int64_t> aliasing(kNumVariables);
    for (int i = 0; i < kNumVariables; ++i) aliasing[i] = i;
    const xla::XlaOp call = FfiCall(
        ctx->builder(), SparseApplyTarget(type_string()).c_str(), operands,
        xla::ShapeUtil::MakeTupleShape(
            std::vector<xla::Shape>(kNumVariables, FloatShape({rows, dim}))),
        attributes, aliasing);
    std::vector<xla::XlaOp> updated;
    for (int i = 0; i < kNumVariables; ++i) updated.push_back(xla::GetTupleElement(call, i));
    return updated;
  }

  // Reads the table and slot variables (inputs 0 .. kNumSlots). Rejects a variable passed
  // twice, as the TF kernel does: its updates would overwrite each other.
  absl::Status ReadDistinctVariables(XlaOpKernelContext* ctx, std::vector<xla::XlaOp>* values,
                                     std::vector<TensorShape>* shapes) const {
    std::vector<tensorflow::XlaResource*> resources;
    for (int i = 0; i < kNumVariables; ++i) {
      tensorflow::XlaResource* resource = nullptr;
      TF_RETURN_IF_ERROR(ctx->GetResourceInput(i, &resource));
      if (std::find(resources.begin(), resources.end(), resource) != resources.end()) {
        return ToAbslStatus(TableError(table_name_, VariableName<Rule>(i),
                                       " is the same variable as another input; each must be "
                                       "distinct"));
      }
      resources.push_back(resource);
      const std::string what = TableContext(table_name_) + VariableName<Rule>(i);
      TF_RETURN_IF_ERROR(ReadFloatVariable(ctx, i, what, &(*shapes)[i], &(*values)[i]));
    }
    return absl::OkStatus();
  }

  const bool on_cpu_;
  std::string table_name_;
  CommonUpdateParams common_;
  Rule rule_;
};

// Reads the inputs of features [first, first + specs.size()) of the list inputs ids, row_info,
// dense_shapes and weights (the features of `table`), and checks their shapes as the TF kernel
// does (FeatureLayoutOf, CheckStackedRows); only a sparse feature's dense_shape is read, as a
// value known when compiling.
absl::Status ReadFeatures(XlaOpKernelContext* ctx, const TableSpec& table,
                          const std::vector<FeatureSpec>& specs, int first,
                          std::vector<XlaFeatureInput>* features) {
  std::vector<xla::XlaOp> ids, row_info, weights;
  std::vector<TensorShape> ids_shapes, row_info_shapes, weights_shapes;
  TF_RETURN_IF_ERROR(ctx->InputList("ids", &ids, &ids_shapes));
  TF_RETURN_IF_ERROR(ctx->InputList("row_info", &row_info, &row_info_shapes));
  TF_RETURN_IF_ERROR(ctx->InputList("weights", &weights, &weights_shapes));
  int start = 0, stop = 0;
  TF_RETURN_IF_ERROR(ctx->op_kernel().InputRange("dense_shapes", &start, &stop));
  int64_t num_rows = 0;
  for (size_t i = 0; i < specs.size(); ++i) {
    const FeatureSpec& spec = specs[i];
    const int f = first + static_cast<int>(i);
    XlaFeatureInput input;
    input.num_ids = ids_shapes[f].num_elements();
    input.ids = xla::ConvertElementType(xla::Reshape(ids[f], {input.num_ids}), xla::S64);
    input.row_info = row_info[f];
    input.row_info_size = row_info_shapes[f].num_elements();
    const int64_t num_weights = weights_shapes[f].num_elements();
    input.weights = xla::Reshape(weights[f], {num_weights});
    if (spec.kind == InputKind::kSparse) {
      TF_RETURN_IF_ERROR(ctx->ConstantInputReshapedToIntVector(start + f, &input.dense_shape));
    }
    // Only sizes, the shape of row_info and dense_shape's values are read.
    FeatureTensors tensors;
    tensors.ids = IdSpan(static_cast<const int64_t*>(nullptr), input.num_ids);
    tensors.row_info = {nullptr, input.row_info_size};
    for (int64_t d : row_info_shapes[f].dim_sizes()) tensors.row_info_shape.push_back(d);
    tensors.dense_shape = {input.dense_shape.data(),
                           static_cast<int64_t>(input.dense_shape.size())};
    tensors.weights = {nullptr, num_weights};
    TF_RETURN_IF_ERROR(ToAbslStatus(FeatureLayoutOf(table.name, spec, tensors, &input.layout)));
    TF_RETURN_IF_ERROR(
        ToAbslStatus(CheckStackedRows(table.name, spec, num_rows, input.layout.num_rows)));
    num_rows += input.layout.num_rows;
    features->push_back(std::move(input));
  }
  return absl::OkStatus();
}

// TfeFeaturesToCsr.
class FeaturesToCsrOp : public XlaOpKernel {
 public:
  explicit FeaturesToCsrOp(OpKernelConstruction* ctx)
      : XlaOpKernel(ctx), on_cpu_(CompilesForCpu(ctx)) {
    OP_REQUIRES_OK(ctx, ReadCsrConversionAttrs(ctx, &table_, &specs_));
  }

  void Compile(XlaOpKernelContext* ctx) override {
    std::vector<XlaFeatureInput> features;
    OP_REQUIRES_OK(ctx, ReadFeatures(ctx, table_, specs_, 0, &features));
    if (on_cpu_) {
      ConvertInHandler(ctx, features);
      return;
    }
    const XlaCsrBatch batch = ConvertFeatures(ctx->builder(), table_, specs_, features);
    ctx->SetOutput(0, batch.row_splits);
    ctx->SetOutput(1, batch.ids);
    ctx->SetOutput(2, batch.gains);
    ctx->SetOutput(3, batch.feature_row_counts);
  }

 private:
  // The conversion as a custom call of the TF kernel's code. Its ids and gains have one element
  // per input id: the TF kernel's lookups, then padding (CompiledCsrBatch in ffi_buffers.h).
  void ConvertInHandler(XlaOpKernelContext* ctx,
                        const std::vector<XlaFeatureInput>& features) const {
    std::vector<xla::XlaOp> operands;
    for (int list = 0; list < 4; ++list) {
      for (size_t f = 0; f < specs_.size(); ++f) {
        operands.push_back(ctx->Input(list * static_cast<int>(specs_.size()) + f));
      }
    }
    int64_t num_rows = 0, num_ids = 0;
    std::vector<int64_t> row_counts;
    for (const XlaFeatureInput& feature : features) {
      row_counts.push_back(feature.layout.num_rows);
      num_rows += feature.layout.num_rows;
      num_ids += feature.num_ids;
    }
    const xla::XlaOp call = FfiCall(
        ctx->builder(), kFeaturesToCsrTarget, operands,
        xla::ShapeUtil::MakeTupleShape({xla::ShapeUtil::MakeShape(xla::S64, {num_rows + 1}),
                                        xla::ShapeUtil::MakeShape(xla::S64, {num_ids}),
                                        FloatShape({num_ids})}),
        CsrConversionAttributes(table_, specs_));
    for (int i = 0; i < 3; ++i) ctx->SetOutput(i, xla::GetTupleElement(call, i));
    ctx->SetOutput(3, xla::ConstantR1<int64_t>(ctx->builder(), row_counts));
  }

  const bool on_cpu_;
  TableSpec table_;
  std::vector<FeatureSpec> specs_;
};

// TfeFeaturesLookup: on CPUs one custom call for every table, which runs the TF kernel's code
// (LookUpTablesFeatures); on GPUs each table's conversion and lookup as XLA operations. The row
// counts are known when compiling.
class FeaturesLookupOp : public XlaOpKernel {
 public:
  explicit FeaturesLookupOp(OpKernelConstruction* ctx)
      : XlaOpKernel(ctx), on_cpu_(CompilesForCpu(ctx)) {
    OP_REQUIRES_OK(ctx, ReadTablesLookupAttrs(ctx, &tables_, &features_));
  }

  void Compile(XlaOpKernelContext* ctx) override {
    const int num_tables = static_cast<int>(tables_.size());
    std::vector<xla::XlaOp> tables(num_tables);
    std::vector<TensorShape> table_shapes(num_tables);
    std::vector<std::vector<XlaFeatureInput>> features(num_tables);
    int first = 0;
    for (int t = 0; t < num_tables; ++t) {
      const std::string what = TableContext(tables_[t].name) + "table";
      OP_REQUIRES_OK(ctx, ReadFloatVariable(ctx, t, what, &table_shapes[t], &tables[t]));
      OP_REQUIRES_OK(ctx, CheckMatrixVariableShape(what, table_shapes[t]));
      OP_REQUIRES_OK(ctx, ToAbslStatus(CheckTableHoldsVocabulary(tables_[t],
                                                                 table_shapes[t].dim_size(0))));
      OP_REQUIRES_OK(ctx, ReadFeatures(ctx, tables_[t], features_[t], first, &features[t]));
      first += static_cast<int>(features_[t].size());
    }
    std::vector<int64_t> num_rows(num_tables, 0);
    for (int t = 0; t < num_tables; ++t) {
      std::vector<int64_t> row_counts;
      for (const XlaFeatureInput& feature : features[t]) {
        row_counts.push_back(feature.layout.num_rows);
        num_rows[t] += feature.layout.num_rows;
      }
      ctx->SetOutput(num_tables + t, xla::ConstantR1<int64_t>(ctx->builder(), row_counts));
    }
    if (on_cpu_) {
      LookUpInHandler(ctx, tables, table_shapes, num_rows);
      return;
    }
    for (int t = 0; t < num_tables; ++t) {
      const XlaCsrBatch batch = ConvertFeatures(ctx->builder(), tables_[t], features_[t],
                                                features[t]);
      int64_t num_ids = 0;
      for (const XlaFeatureInput& feature : features[t]) num_ids += feature.num_ids;
      ctx->SetOutput(t, CombineLookups(tables[t], table_shapes[t].dim_size(0),
                                       table_shapes[t].dim_size(1), batch.ids, batch.gains,
                                       num_ids, RowOfLookups(batch.row_splits, num_rows[t],
                                                             num_ids),
                                       num_rows[t]));
    }
  }

 private:
  // One custom call: operands the tables, then the list inputs ids, row_info, dense_shapes and
  // weights in op order; results each table's activations.
  void LookUpInHandler(XlaOpKernelContext* ctx, const std::vector<xla::XlaOp>& tables,
                       const std::vector<TensorShape>& table_shapes,
                       const std::vector<int64_t>& num_rows) const {
    std::vector<xla::XlaOp> operands = tables;
    for (int input = static_cast<int>(tables.size()); input < ctx->num_inputs(); ++input) {
      operands.push_back(ctx->Input(input));
    }
    std::vector<xla::Shape> shapes;
    FfiAttributes attributes;
    attributes.Add("num_tables", static_cast<int64_t>(tables.size()));
    for (size_t t = 0; t < tables.size(); ++t) {
      shapes.push_back(FloatShape({num_rows[t], table_shapes[t].dim_size(1)}));
      AddCsrConversionAttributes(tables_[t], features_[t], TablePrefix(t), &attributes);
    }
    const xla::XlaOp call = FfiCall(ctx->builder(), kFeaturesLookupTarget, operands,
                                    xla::ShapeUtil::MakeTupleShape(shapes), attributes);
    for (size_t t = 0; t < tables.size(); ++t) {
      ctx->SetOutput(t, xla::GetTupleElement(call, t));
    }
  }

  const bool on_cpu_;
  std::vector<TableSpec> tables_;
  std::vector<std::vector<FeatureSpec>> features_;
};

// TfeFeatureOutputs, for every XLA device: the rows per feature are known when compiling (a
// compile-time constant, as a split's sizes are), so a batch that does not fit the output shapes
// fails the compilation with the TF kernel's message, and each feature's output is a slice.
class FeatureOutputsOp : public XlaOpKernel {
 public:
  explicit FeatureOutputsOp(OpKernelConstruction* ctx) : XlaOpKernel(ctx) {
    OP_REQUIRES_OK(ctx, ReadFeatureOutputsAttrs(ctx, &spec_));
  }

  void Compile(XlaOpKernelContext* ctx) override {
    const absl::StatusOr<TensorShape> activations = InputShapeOf(ctx, 0);
    OP_REQUIRES_OK(ctx, activations.status());
    OP_REQUIRES_OK(ctx, CheckRank(spec_.table_name, "", "activations", *activations, 2));
    const absl::StatusOr<TensorShape> counts_shape = InputShapeOf(ctx, 1);
    OP_REQUIRES_OK(ctx, counts_shape.status());
    OP_REQUIRES_OK(ctx,
                   CheckRank(spec_.table_name, "", "feature_row_counts", *counts_shape, 1));
    std::vector<int64_t> counts;
    OP_REQUIRES_OK(ctx, ctx->ConstantInputAsIntVector(1, &counts));
    std::vector<int64_t> first_dims;
    OP_REQUIRES_OK(ctx, ToAbslStatus(FeatureOutputFirstDims(
                            spec_, counts.data(), static_cast<int64_t>(counts.size()),
                            activations->dim_size(0), activations->dim_size(1), &first_dims)));
    int64_t first_row = 0;
    for (size_t f = 0; f < counts.size(); ++f) {
      std::vector<int64_t> shape = spec_.output_shapes[f];
      shape[0] = first_dims[f];
      const xla::XlaOp rows =
          xla::SliceInDim(ctx->Input(0), first_row, first_row + counts[f], 1, 0);
      first_row += counts[f];
      ctx->SetOutput(static_cast<int>(f), xla::Reshape(rows, shape));
    }
  }

 private:
  FeatureOutputsSpec spec_;
};

[[maybe_unused]] const bool kRegistered = [] {
  RegisterXlaKernel({"TfeEmbeddingLookup"}, CreateXlaKernel<EmbeddingLookupOp<true>>);
  RegisterXlaKernel({"TfeEmbeddingLookupDense"}, CreateXlaKernel<EmbeddingLookupOp<false>>);
  RegisterXlaKernel({"TfeEmbeddingGradient"}, CreateXlaKernel<EmbeddingGradientOp>);
  AllRules::ForEach([](auto rule) {
    using Rule = decltype(rule);
    RegisterXlaKernel({SparseApplyOpName<Rule>()},
                      CreateXlaKernel<SparseApplyOp<Rule, CsrGradients>>);
    RegisterXlaKernel({SparseApplyRowsOpName<Rule>()},
                      CreateXlaKernel<SparseApplyOp<Rule, RowGradients>>);
  });
  RegisterXlaKernel({"TfeFeaturesToCsr",
                     /*compile_time_constant_inputs=*/{"dense_shapes"},
                     /*type_constraints=*/{{"Tids", {tensorflow::DT_INT32, tensorflow::DT_INT64}}}},
                    CreateXlaKernel<FeaturesToCsrOp>);
  RegisterXlaKernel({"TfeFeaturesLookup",
                     /*compile_time_constant_inputs=*/{"dense_shapes"},
                     /*type_constraints=*/{{"Tids", {tensorflow::DT_INT32, tensorflow::DT_INT64}}}},
                    CreateXlaKernel<FeaturesLookupOp>);
  RegisterXlaKernel({"TfeFeatureOutputs",
                     /*compile_time_constant_inputs=*/{"feature_row_counts"}},
                    CreateXlaKernel<FeatureOutputsOp>);
  return true;
}();

}  // namespace
}  // namespace tf_embedding
