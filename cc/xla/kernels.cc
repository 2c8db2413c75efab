// The XLA kernels of the lookup, gradient, sparse-apply, CSR conversion and feature-output
// ops, for XLA's CPU compilation device only (registration.h): they read and check their
// inputs' shapes and attrs, with the TF kernels' messages, then compile to the custom calls of
// custom_calls.h, which run the TF kernels' cc/core code (TfeFeatureOutputs to slices).
//
// One translation unit on purpose: tensorflow/compiler/tf2xla/xla_op_kernel.h alone costs a
// compiler about a minute and 1.7 GiB, so only this file includes it, and the builders, which
// need only xla_builder.h, compile in their own files.
#include <algorithm>
#include <numeric>
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
#include "cc/xla/custom_calls.h"
#include "cc/xla/registration.h"
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

// The gradient inputs of a gradient or sparse-apply op after their shape checks: the list
// inputs in op order (the custom calls' operands).
struct GradientInputs {
  std::vector<xla::XlaOp> operands;
  int64_t num_lists = 0;
  // The number of gradient terms: lookups or rows.
  int64_t size = 0;
};

// The N CSR batches of inputs row_splits, ids, gains and activation_gradients. `dim` is the
// table's; a negative value is replaced by that of activation_gradients[0].
absl::Status ReadCsrGradients(XlaOpKernelContext* ctx, const std::string& table_name, int64_t* dim,
                              GradientInputs* inputs) {
  std::vector<xla::XlaOp> row_splits, ids, gains, gradients;
  std::vector<TensorShape> row_splits_shapes, ids_shapes, gains_shapes, gradients_shapes;
  TF_RETURN_IF_ERROR(ctx->InputList("row_splits", &row_splits, &row_splits_shapes));
  TF_RETURN_IF_ERROR(ctx->InputList("ids", &ids, &ids_shapes));
  TF_RETURN_IF_ERROR(ctx->InputList("gains", &gains, &gains_shapes));
  TF_RETURN_IF_ERROR(ctx->InputList("activation_gradients", &gradients, &gradients_shapes));
  for (size_t b = 0; b < row_splits.size(); ++b) {
    const std::string context = BatchContext(b);
    TF_RETURN_IF_ERROR(CheckCsrShapes(table_name, context, row_splits_shapes[b], ids_shapes[b],
                                      gains_shapes[b]));
    const int64_t num_rows = row_splits_shapes[b].dim_size(0) - 1;
    TF_RETURN_IF_ERROR(CheckGradientShape(table_name, context, "activation_gradients",
                                          gradients_shapes[b], num_rows, "row_splits segment",
                                          dim));
    inputs->size += ids_shapes[b].dim_size(0);
  }
  inputs->num_lists = static_cast<int64_t>(row_splits.size());
  for (const auto* list : {&row_splits, &ids, &gains, &gradients}) {
    inputs->operands.insert(inputs->operands.end(), list->begin(), list->end());
  }
  return absl::OkStatus();
}

// The N lists of inputs unique_ids and rows (the custom call checks that ids ascend).
absl::Status ReadRowGradients(XlaOpKernelContext* ctx, const std::string& table_name, int64_t* dim,
                              GradientInputs* inputs) {
  std::vector<xla::XlaOp> unique_ids, rows;
  std::vector<TensorShape> unique_ids_shapes, rows_shapes;
  TF_RETURN_IF_ERROR(ctx->InputList("unique_ids", &unique_ids, &unique_ids_shapes));
  TF_RETURN_IF_ERROR(ctx->InputList("rows", &rows, &rows_shapes));
  for (size_t b = 0; b < unique_ids.size(); ++b) {
    const std::string context = BatchContext(b);
    TF_RETURN_IF_ERROR(CheckRank(table_name, context, "unique_ids", unique_ids_shapes[b], 1));
    const int64_t size = unique_ids_shapes[b].dim_size(0);
    TF_RETURN_IF_ERROR(CheckGradientShape(table_name, context, "rows", rows_shapes[b], size,
                                          "unique id", dim));
    inputs->size += size;
  }
  inputs->num_lists = static_cast<int64_t>(unique_ids.size());
  inputs->operands = unique_ids;
  inputs->operands.insert(inputs->operands.end(), rows.begin(), rows.end());
  return absl::OkStatus();
}

// TfeEmbeddingLookup (kVariable: the table is resource input 0) and TfeEmbeddingLookupDense.
template <bool kVariable>
class EmbeddingLookupOp : public XlaOpKernel {
 public:
  explicit EmbeddingLookupOp(OpKernelConstruction* ctx) : XlaOpKernel(ctx) {
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
    FfiAttributes attributes;
    attributes.Add("table_name", table_name_);
    ctx->SetOutput(0, FfiCall(ctx->builder(), kLookupTarget,
                              {table, ctx->Input(1), ctx->Input(2), ctx->Input(3)},
                              FloatShape({num_rows, table_shape.dim_size(1)}), attributes));
  }

 private:
  std::string table_name_;
};

// TfeEmbeddingGradient, padded to one entry per lookup: the TF kernel's ascending ids, then
// padding (Gradient in ffi_handlers.cc).
class EmbeddingGradientOp : public XlaOpKernel {
 public:
  explicit EmbeddingGradientOp(OpKernelConstruction* ctx) : XlaOpKernel(ctx) {
    OP_REQUIRES_OK(ctx, ctx->GetAttr("vocabulary_size", &vocabulary_size_));
    OP_REQUIRES_OK(ctx, ctx->GetAttr("table_name", &table_name_));
  }

  void Compile(XlaOpKernelContext* ctx) override {
    int64_t dim = -1;
    GradientInputs inputs;
    OP_REQUIRES_OK(ctx, ReadCsrGradients(ctx, table_name_, &dim, &inputs));
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
  }

 private:
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

  explicit SparseApplyOp(OpKernelConstruction* ctx) : XlaOpKernel(ctx) {
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
    OP_REQUIRES_OK(ctx, Gradients::Read(ctx, table_name_, &dim, &inputs));
    std::vector<xla::XlaOp> variables(kNumVariables);
    std::vector<TensorShape> shapes(kNumVariables);
    OP_REQUIRES_OK(ctx, ReadDistinctVariables(ctx, &variables, &shapes));
    OP_REQUIRES_OK(ctx, CheckVariableShapes<Rule>(table_name_, Gradients::kGradients, shapes,
                                                  dim));
    const std::vector<xla::XlaOp> updated =
        UpdateInPlace(ctx, inputs, shapes[0].dim_size(0), dim, variables);
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

  std::string table_name_;
  CommonUpdateParams common_;
  Rule rule_;
};

// Checks the shapes of features [first, first + specs.size()) of the list inputs ids, row_info,
// dense_shapes and weights (the features of `table`) as the TF kernel does (FeatureLayoutOf,
// CheckStackedRows). Returns each feature's row count (the op's feature_row_counts, constants of
// the compiled program) and the features' input id count. Only a sparse feature's dense_shape
// is read, as a value known when compiling.
absl::Status ReadFeatureSizes(XlaOpKernelContext* ctx, const TableSpec& table,
                              const std::vector<FeatureSpec>& specs, int first,
                              std::vector<int64_t>* row_counts, int64_t* num_ids) {
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
    std::vector<int64_t> dense_shape;
    if (spec.kind == InputKind::kSparse) {
      TF_RETURN_IF_ERROR(ctx->ConstantInputReshapedToIntVector(start + f, &dense_shape));
    }
    // Only sizes, the shape of row_info and dense_shape's values are read.
    FeatureTensors tensors;
    tensors.ids = IdSpan(static_cast<const int64_t*>(nullptr), ids_shapes[f].num_elements());
    tensors.row_info = {nullptr, row_info_shapes[f].num_elements()};
    for (int64_t d : row_info_shapes[f].dim_sizes()) tensors.row_info_shape.push_back(d);
    tensors.dense_shape = {dense_shape.data(), static_cast<int64_t>(dense_shape.size())};
    tensors.weights = {nullptr, weights_shapes[f].num_elements()};
    FeatureLayout layout;
    TF_RETURN_IF_ERROR(ToAbslStatus(FeatureLayoutOf(table.name, spec, tensors, &layout)));
    TF_RETURN_IF_ERROR(
        ToAbslStatus(CheckStackedRows(table.name, spec, num_rows, layout.num_rows)));
    num_rows += layout.num_rows;
    row_counts->push_back(layout.num_rows);
    *num_ids += ids_shapes[f].num_elements();
  }
  return absl::OkStatus();
}

int64_t Sum(const std::vector<int64_t>& values) {
  return std::accumulate(values.begin(), values.end(), int64_t{0});
}

// TfeFeaturesToCsr: the conversion as a custom call of the TF kernel's code. Its ids and gains
// have one element per input id: the TF kernel's lookups, then padding (CompiledCsrBatch in
// ffi_buffers.h).
class FeaturesToCsrOp : public XlaOpKernel {
 public:
  explicit FeaturesToCsrOp(OpKernelConstruction* ctx) : XlaOpKernel(ctx) {
    OP_REQUIRES_OK(ctx, ReadCsrConversionAttrs(ctx, &table_, &specs_));
  }

  void Compile(XlaOpKernelContext* ctx) override {
    std::vector<int64_t> row_counts;
    int64_t num_ids = 0;
    OP_REQUIRES_OK(ctx, ReadFeatureSizes(ctx, table_, specs_, 0, &row_counts, &num_ids));
    std::vector<xla::XlaOp> operands;
    for (int list = 0; list < 4; ++list) {
      for (size_t f = 0; f < specs_.size(); ++f) {
        operands.push_back(ctx->Input(list * static_cast<int>(specs_.size()) + f));
      }
    }
    const xla::XlaOp call = FfiCall(
        ctx->builder(), kFeaturesToCsrTarget, operands,
        xla::ShapeUtil::MakeTupleShape(
            {xla::ShapeUtil::MakeShape(xla::S64, {Sum(row_counts) + 1}),
             xla::ShapeUtil::MakeShape(xla::S64, {num_ids}), FloatShape({num_ids})}),
        CsrConversionAttributes(table_, specs_));
    for (int i = 0; i < 3; ++i) ctx->SetOutput(i, xla::GetTupleElement(call, i));
    ctx->SetOutput(3, xla::ConstantR1<int64_t>(ctx->builder(), row_counts));
  }

 private:
  TableSpec table_;
  std::vector<FeatureSpec> specs_;
};

// TfeFeaturesLookup: one custom call for every table, which runs the TF kernel's code
// (LookUpTablesFeatures). The row counts are known when compiling.
class FeaturesLookupOp : public XlaOpKernel {
 public:
  explicit FeaturesLookupOp(OpKernelConstruction* ctx) : XlaOpKernel(ctx) {
    OP_REQUIRES_OK(ctx, ReadTablesLookupAttrs(ctx, &tables_, &features_));
  }

  void Compile(XlaOpKernelContext* ctx) override {
    const int num_tables = static_cast<int>(tables_.size());
    std::vector<xla::XlaOp> tables(num_tables);
    std::vector<TensorShape> table_shapes(num_tables);
    std::vector<int64_t> num_rows(num_tables, 0);
    int first = 0;
    for (int t = 0; t < num_tables; ++t) {
      const std::string what = TableContext(tables_[t].name) + "table";
      OP_REQUIRES_OK(ctx, ReadFloatVariable(ctx, t, what, &table_shapes[t], &tables[t]));
      OP_REQUIRES_OK(ctx, CheckMatrixVariableShape(what, table_shapes[t]));
      OP_REQUIRES_OK(ctx, ToAbslStatus(CheckTableHoldsVocabulary(tables_[t],
                                                                 table_shapes[t].dim_size(0))));
      std::vector<int64_t> row_counts;
      int64_t num_ids = 0;
      OP_REQUIRES_OK(ctx, ReadFeatureSizes(ctx, tables_[t], features_[t], first, &row_counts,
                                           &num_ids));
      first += static_cast<int>(features_[t].size());
      num_rows[t] = Sum(row_counts);
      ctx->SetOutput(num_tables + t, xla::ConstantR1<int64_t>(ctx->builder(), row_counts));
    }
    LookUpInHandler(ctx, tables, table_shapes, num_rows);
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

  std::vector<TableSpec> tables_;
  std::vector<std::vector<FeatureSpec>> features_;
};

// TfeFeatureOutputs: the rows per feature are known when compiling (a
// compile-time constant, as a split's sizes are), so a batch that does not fit the output shapes
// fails the compilation with the TF kernel's message, and each feature's output is a slice.
class FeatureOutputsOp : public XlaOpKernel {
 public:
  explicit FeatureOutputsOp(OpKernelConstruction* ctx) : XlaOpKernel(ctx) {
    OP_REQUIRES_OK(ctx, ReadFeatureOutputsAttrs(ctx, &spec_));
  }

  void Compile(XlaOpKernelContext* ctx) override {
    OP_REQUIRES_VALUE(const TensorShape activations, ctx, InputShapeOf(ctx, 0));
    OP_REQUIRES_OK(ctx, CheckRank(spec_.table_name, "", "activations", activations, 2));
    OP_REQUIRES_VALUE(const TensorShape counts_shape, ctx, InputShapeOf(ctx, 1));
    OP_REQUIRES_OK(ctx,
                   CheckRank(spec_.table_name, "", "feature_row_counts", counts_shape, 1));
    std::vector<int64_t> counts;
    OP_REQUIRES_OK(ctx, ctx->ConstantInputAsIntVector(1, &counts));
    std::vector<int64_t> first_dims;
    OP_REQUIRES_OK(ctx, ToAbslStatus(FeatureOutputFirstDims(
                            spec_, counts.data(), static_cast<int64_t>(counts.size()),
                            activations.dim_size(0), activations.dim_size(1), &first_dims)));
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
