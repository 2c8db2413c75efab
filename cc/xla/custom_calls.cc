#include "cc/xla/custom_calls.h"

#include <cctype>
#include <cstdio>
#include <cstring>
#include <utility>

#include "xla/shape_util.h"
#include "xla/xla_data.pb.h"

namespace tf_embedding {
namespace {

// An MLIR string literal: bytes other than letters and digits are written as \XX escapes, so
// any table or feature name survives (quotes, backslashes, non-ASCII).
std::string Quoted(const std::string& text) {
  std::string quoted = "\"";
  for (const unsigned char c : text) {
    if (std::isalnum(c) != 0 || c == '_') {
      quoted += static_cast<char>(c);
    } else {
      char escape[4];
      std::snprintf(escape, sizeof(escape), "\\%02X", c);
      quoted += escape;
    }
  }
  return quoted + "\"";
}

}  // namespace

std::string SparseApplyTarget(const std::string& op_name) { return "tf_embedding_" + op_name; }

void FfiAttributes::Add(const std::string& name, const std::string& value) {
  entries_.push_back(name + " = " + Quoted(value));
}

void FfiAttributes::Add(const std::string& name, int64_t value) {
  entries_.push_back(name + " = " + std::to_string(value) + " : i64");
}

void FfiAttributes::Add(const std::string& name, float value) {
  uint32_t bits;
  std::memcpy(&bits, &value, sizeof(bits));
  char hex[16];
  std::snprintf(hex, sizeof(hex), "0x%08X", bits);
  entries_.push_back(name + " = " + hex + " : f32");
}

void FfiAttributes::Add(const std::string& name, bool value) {
  entries_.push_back(name + " = " + (value ? "true" : "false"));
}

void FfiAttributes::Add(const std::string& name, const std::vector<int64_t>& values) {
  std::string list;
  for (size_t i = 0; i < values.size(); ++i) {
    list += (i == 0 ? " " : ", ") + std::to_string(values[i]);
  }
  entries_.push_back(name + " = array<i64:" + list + ">");
}

std::string FfiAttributes::ToString() const {
  std::string text = "{";
  for (size_t i = 0; i < entries_.size(); ++i) text += (i == 0 ? "" : ", ") + entries_[i];
  return text + "}";
}

xla::XlaOp FfiCall(xla::XlaBuilder* builder, const char* target,
                   const std::vector<xla::XlaOp>& operands, const xla::Shape& shape,
                   const FfiAttributes& attributes, const std::vector<int64_t>& aliasing) {
  std::vector<std::pair<xla::ShapeIndex, std::pair<int64_t, xla::ShapeIndex>>> aliases;
  for (size_t i = 0; i < aliasing.size(); ++i) {
    aliases.emplace_back();
    aliases.back().first = xla::ShapeIndex({static_cast<int64_t>(i)});
    aliases.back().second.first = aliasing[i];
  }
  return xla::CustomCall(builder, target, operands, shape, attributes.ToString(),
                         /*has_side_effect=*/false, aliases, /*literal=*/nullptr,
                         xla::CustomCallSchedule::SCHEDULE_NONE,
                         xla::CustomCallApiVersion::API_VERSION_TYPED_FFI);
}

FfiAttributes CsrConversionAttributes(const TableSpec& table,
                                      const std::vector<FeatureSpec>& features) {
  FfiAttributes attributes;
  AddCsrConversionAttributes(table, features, "", &attributes);
  return attributes;
}

void AddCsrConversionAttributes(const TableSpec& table, const std::vector<FeatureSpec>& features,
                                const std::string& prefix, FfiAttributes* attributes) {
  attributes->Add(prefix + "table_name", table.name);
  attributes->Add(prefix + "vocabulary_size", table.vocabulary_size);
  attributes->Add(prefix + "combiner", static_cast<int64_t>(table.combiner));
  std::vector<int64_t> kinds, has_weights, max_sequence_lengths, prune_invalid;
  for (size_t f = 0; f < features.size(); ++f) {
    const FeatureSpec& feature = features[f];
    attributes->Add(prefix + "feature_name_" + std::to_string(f), feature.name);
    kinds.push_back(static_cast<int64_t>(feature.kind));
    has_weights.push_back(feature.has_weights);
    max_sequence_lengths.push_back(feature.max_sequence_length);
    prune_invalid.push_back(feature.prune_invalid);
  }
  attributes->Add(prefix + "input_kinds", kinds);
  attributes->Add(prefix + "has_weights", has_weights);
  attributes->Add(prefix + "max_sequence_lengths", max_sequence_lengths);
  attributes->Add(prefix + "prune_invalid", prune_invalid);
}

std::string TablePrefix(int64_t table) { return "t" + std::to_string(table) + "_"; }

}  // namespace tf_embedding
