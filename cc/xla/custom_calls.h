// The XLA CPU custom calls of the kernels in cc/xla: on the XLA CPU compilation device each op
// compiles to one typed-FFI custom call whose handler (ffi_*handlers.cc) runs the TF kernel's
// cc/core code on XLA's buffers, on the intra-op pool, with the TF kernel's checks and errors.
// A compiled step then computes what the uncompiled step does, bit for bit, at its speed, and
// fails with the same InvalidArgumentError on bad data. The XLA-operations formulation
// (batch_ops.h, sparse_apply.h, csr_conversion.h) remains for the GPU compilation device.
//
// This file builds the calls (operands, result shapes, attributes, aliasing); the handlers read
// them back in the same order.
#ifndef TF_EMBEDDING_CC_XLA_CUSTOM_CALLS_H_
#define TF_EMBEDDING_CC_XLA_CUSTOM_CALLS_H_

#include <cstdint>
#include <string>
#include <variant>
#include <vector>

#include "cc/core/csr_conversion.h"
#include "xla/hlo/builder/xla_builder.h"

namespace tf_embedding {

// Handler names ("Host" platform: XLA's CPU backend).
inline constexpr char kLookupTarget[] = "tf_embedding_lookup";
inline constexpr char kGradientTarget[] = "tf_embedding_gradient";
inline constexpr char kFeaturesToCsrTarget[] = "tf_embedding_features_to_csr";
inline constexpr char kFeaturesLookupTarget[] = "tf_embedding_features_lookup";
// The sparse-apply handler of the op `op_name` (TfeSparseApply<Rule>[Rows]).
std::string SparseApplyTarget(const std::string& op_name);

// The attributes of a call, in the MLIR dictionary syntax the FFI reads from the call's backend
// config. Floats are written as their bit pattern, so they reach the handler exactly.
class FfiAttributes {
 public:
  void Add(const std::string& name, const std::string& value);
  void Add(const std::string& name, int64_t value);
  void Add(const std::string& name, float value);
  void Add(const std::string& name, bool value);
  void Add(const std::string& name, const std::vector<int64_t>& values);
  // The dictionary, e.g. {a = 1 : i64, b = "x"}.
  std::string ToString() const;

 private:
  std::vector<std::string> entries_;
};

// A typed-FFI custom call of `target`. `aliasing` maps output i (of a tuple shape) to operand
// aliasing[i]: the handler updates that operand's buffer in place.
xla::XlaOp FfiCall(xla::XlaBuilder* builder, const char* target,
                   const std::vector<xla::XlaOp>& operands, const xla::Shape& shape,
                   const FfiAttributes& attributes, const std::vector<int64_t>& aliasing = {});

// Adds every hyperparameter of Params (hyperparameters.h) under its attr name.
template <typename Params>
void AddHyperparameters(const Params& params, FfiAttributes* attributes) {
  for (const auto& hyperparameter : Params::Hyperparameters()) {
    std::visit([&](auto member) { attributes->Add(hyperparameter.name, params.*member); },
               hyperparameter.member);
  }
}

// The attributes of TfeFeaturesToCsr's handler: the table and feature specs.
FfiAttributes CsrConversionAttributes(const TableSpec& table,
                                      const std::vector<FeatureSpec>& features);
// Adds them to *attributes, each name prefixed with `prefix`.
void AddCsrConversionAttributes(const TableSpec& table, const std::vector<FeatureSpec>& features,
                                const std::string& prefix, FfiAttributes* attributes);

// The attribute prefix of table t of TfeFeaturesLookup's handler, whose attributes are
// num_tables and each table's CsrConversionAttributes under its prefix.
std::string TablePrefix(int64_t table);

}  // namespace tf_embedding

#endif  // TF_EMBEDDING_CC_XLA_CUSTOM_CALLS_H_
