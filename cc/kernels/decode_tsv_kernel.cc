// TfeDecodeTsv (cc/ops/tsv_ops.cc): labeled TSV lines parsed by the rules of criteo.py's
// `decode_lines`, number for number: decimals by absl::SimpleAtof, as tf.strings.to_number reads
// them, and string ids by TensorFlow's own Fingerprint64 (tests/job/test_decode_tsv_op.py
// compares the two on valid and malformed lines).
#include <cmath>
#include <cstdint>
#include <limits>
#include <string>
#include <string_view>
#include <vector>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "tensorflow/core/framework/op_kernel.h"
#include "tensorflow/core/framework/tensor.h"

// TensorFlow's pip build hashes strings with util::Fingerprint64 (its USE_OSS_FARMHASH branch of
// tsl/platform/fingerprint.h), the symbol libtensorflow_framework exports.
namespace util {
uint64_t Fingerprint64(const char* data, size_t size);
}  // namespace util

namespace tf_embedding {
namespace {

using ::tensorflow::OpKernel;
using ::tensorflow::OpKernelConstruction;
using ::tensorflow::OpKernelContext;
using ::tensorflow::Tensor;
using ::tensorflow::TensorShape;

bool IsDigit(char c) { return c >= '0' && c <= '9'; }

// Advances *i past the digits at it; returns how many there were.
int64_t SkipDigits(std::string_view s, size_t* i) {
  const size_t start = *i;
  while (*i < s.size() && IsDigit(s[*i])) ++*i;
  return static_cast<int64_t>(*i - start);
}

// criteo.py's _FLOAT, in full: [-+]?([0-9]+\.?[0-9]*|\.[0-9]+)([eE][-+]?[0-9]+)?
bool IsDecimal(std::string_view s) {
  size_t i = 0;
  if (i < s.size() && (s[i] == '-' || s[i] == '+')) ++i;
  const int64_t whole = SkipDigits(s, &i);
  if (whole > 0) {
    if (i < s.size() && s[i] == '.') {
      ++i;
      SkipDigits(s, &i);
    }
  } else {
    if (i >= s.size() || s[i] != '.') return false;
    ++i;
    if (SkipDigits(s, &i) == 0) return false;
  }
  if (i < s.size() && (s[i] == 'e' || s[i] == 'E')) {
    ++i;
    if (i < s.size() && (s[i] == '-' || s[i] == '+')) ++i;
    if (SkipDigits(s, &i) == 0) return false;
  }
  return i == s.size();
}

// A finite decimal (IsDecimal) read as tf.strings.to_number reads it.
bool ParseFiniteDecimal(std::string_view s, float* value) {
  return IsDecimal(s) && absl::SimpleAtof(s, value) && std::isfinite(*value);
}

// criteo.py's _INT, in full: -?[0-9]{1,18} (so that it fits in int64).
bool ParseInteger(std::string_view s, int64_t* value) {
  size_t i = 0;
  const bool negative = !s.empty() && s[0] == '-';
  if (negative) ++i;
  const size_t digits = s.size() - i;
  if (digits < 1 || digits > 18) return false;
  int64_t magnitude = 0;
  for (; i < s.size(); ++i) {
    if (!IsDigit(s[i])) return false;
    magnitude = magnitude * 10 + (s[i] - '0');
  }
  *value = negative ? -magnitude : magnitude;
  return true;
}

// The pieces of `s` between separators, as tf.strings.split with a separator yields them
// ("" is one empty piece).
template <typename Visit>
void ForEachPiece(std::string_view s, char separator, Visit visit) {
  size_t start = 0;
  while (true) {
    const size_t end = s.find(separator, start);
    if (end == std::string_view::npos) {
      visit(s.substr(start));
      return;
    }
    visit(s.substr(start, end - start));
    start = end + 1;
  }
}

// A dynamic table's vocabulary: its ids are keys, kept as they are (strings hashed into
// [0, kKeySpace), as `tf.strings.to_hash_bucket_fast(ids, 2**63 - 1)`).
constexpr int64_t kAnyKey = -1;
constexpr int64_t kKeySpace = std::numeric_limits<int64_t>::max();

struct FeatureRule {
  std::string name;
  bool string_ids = false;
  bool weighted = false;
  int64_t vocabulary_size = 1;
};

// One feature's outputs, grown line by line.
struct FeatureValues {
  std::vector<int64_t> rows;
  std::vector<float> weights;
};

class DecodeTsvOp : public OpKernel {
 public:
  explicit DecodeTsvOp(OpKernelConstruction* ctx) : OpKernel(ctx) {
    OP_REQUIRES_OK(ctx, ctx->GetAttr("num_dense", &num_dense_));
    int64_t num_features = 0;
    OP_REQUIRES_OK(ctx, ctx->GetAttr("num_features", &num_features));
    OP_REQUIRES_OK(ctx, ctx->GetAttr("num_weighted", &num_weighted_));
    std::vector<std::string> names;
    std::vector<bool> string_ids;
    std::vector<bool> weighted;
    std::vector<int64_t> vocabulary_sizes;
    OP_REQUIRES_OK(ctx, ctx->GetAttr("feature_names", &names));
    OP_REQUIRES_OK(ctx, ctx->GetAttr("string_ids", &string_ids));
    OP_REQUIRES_OK(ctx, ctx->GetAttr("weighted", &weighted));
    OP_REQUIRES_OK(ctx, ctx->GetAttr("vocabulary_sizes", &vocabulary_sizes));
    const auto expected = static_cast<size_t>(num_features);
    OP_REQUIRES(ctx,
                names.size() == expected && string_ids.size() == expected &&
                    weighted.size() == expected && vocabulary_sizes.size() == expected,
                absl::InvalidArgumentError(absl::StrCat(
                    "TfeDecodeTsv: feature_names, string_ids, weighted and vocabulary_sizes "
                    "must each have num_features = ",
                    num_features, " entries, got ", names.size(), ", ", string_ids.size(), ", ",
                    weighted.size(), " and ", vocabulary_sizes.size())));
    int64_t weighted_count = 0;
    for (size_t f = 0; f < expected; ++f) {
      OP_REQUIRES(ctx, vocabulary_sizes[f] >= 1 || vocabulary_sizes[f] == kAnyKey,
                  absl::InvalidArgumentError(absl::StrCat(
                      "Feature '", names[f], "': vocabulary size must be >= 1 (or -1: keys), got ",
                      vocabulary_sizes[f])));
      features_.push_back({names[f], string_ids[f], weighted[f], vocabulary_sizes[f]});
      weighted_count += weighted[f] ? 1 : 0;
    }
    OP_REQUIRES(ctx, weighted_count == num_weighted_,
                absl::InvalidArgumentError(absl::StrCat(
                    "TfeDecodeTsv: num_weighted is ", num_weighted_, " but ", weighted_count,
                    " features are weighted")));
  }

  void Compute(OpKernelContext* ctx) override {
    const Tensor& lines_tensor = ctx->input(0);
    OP_REQUIRES(ctx, lines_tensor.dims() == 1,
                absl::InvalidArgumentError(absl::StrCat(
                    "TfeDecodeTsv: lines must be a vector, got shape ",
                    lines_tensor.shape().DebugString())));
    const auto lines = lines_tensor.vec<tensorflow::tstring>();
    const int64_t batch = lines.size();
    const int64_t num_features = static_cast<int64_t>(features_.size());

    Tensor* label = nullptr;
    Tensor* dense = nullptr;
    Tensor* valid = nullptr;
    OP_REQUIRES_OK(ctx, ctx->allocate_output(0, TensorShape({batch}), &label));
    OP_REQUIRES_OK(ctx, ctx->allocate_output(1, TensorShape({batch, num_dense_}), &dense));
    OP_REQUIRES_OK(ctx, ctx->allocate_output(2, TensorShape({batch}), &valid));
    std::vector<int64_t*> splits(num_features);
    for (int64_t f = 0; f < num_features; ++f) {
      Tensor* row_splits = nullptr;
      OP_REQUIRES_OK(ctx, ctx->allocate_output(3 + num_features + f, TensorShape({batch + 1}),
                                               &row_splits));
      splits[f] = row_splits->vec<int64_t>().data();
      splits[f][0] = 0;
    }

    float* labels = label->vec<float>().data();
    float* dense_values = dense->matrix<float>().data();
    bool* valid_lines = valid->vec<bool>().data();
    std::vector<FeatureValues> values(num_features);
    std::vector<std::string_view> cells;
    for (int64_t line = 0; line < batch; ++line) {
      cells.clear();
      const tensorflow::tstring& text = lines(line);
      ForEachPiece(std::string_view(text.data(), text.size()), '\t',
                   [&](std::string_view cell) { cells.push_back(cell); });
      valid_lines[line] =
          DecodeLine(cells, &labels[line], dense_values + line * num_dense_, &values);
      for (int64_t f = 0; f < num_features; ++f) {
        splits[f][line + 1] = static_cast<int64_t>(values[f].rows.size());
      }
    }

    int64_t weighted_output = 3 + 2 * num_features;
    for (int64_t f = 0; f < num_features; ++f) {
      Tensor* rows = nullptr;
      const auto count = static_cast<int64_t>(values[f].rows.size());
      OP_REQUIRES_OK(ctx, ctx->allocate_output(3 + f, TensorShape({count}), &rows));
      std::copy(values[f].rows.begin(), values[f].rows.end(), rows->vec<int64_t>().data());
      if (features_[f].weighted) {
        Tensor* weights = nullptr;
        OP_REQUIRES_OK(ctx, ctx->allocate_output(weighted_output++, TensorShape({count}),
                                                 &weights));
        std::copy(values[f].weights.begin(), values[f].weights.end(),
                  weights->vec<float>().data());
      }
    }
  }

 private:
  // One line's cells into its label, dense values and ids (appended to `values`, also for an
  // invalid line, so that the row splits stay in step); whether the line is valid.
  bool DecodeLine(const std::vector<std::string_view>& cells, float* label, float* dense,
                  std::vector<FeatureValues>* values) const {
    const size_t width = 1 + num_dense_ + features_.size();
    *label = 0.0f;
    std::fill(dense, dense + num_dense_, 0.0f);
    if (cells.size() != width) return false;
    bool ok = cells[0] == "0" || cells[0] == "1";
    *label = cells[0] == "1" ? 1.0f : 0.0f;
    for (int64_t d = 0; d < num_dense_; ++d) {
      const std::string_view cell = cells[1 + d];
      if (!cell.empty()) ok &= ParseFiniteDecimal(cell, &dense[d]);
    }
    for (size_t f = 0; f < features_.size(); ++f) {
      ok &= DecodeIds(features_[f], cells[1 + num_dense_ + f], &(*values)[f]);
    }
    return ok;
  }

  // A categorical cell's ids (and weights); whether every token is valid.
  static bool DecodeIds(const FeatureRule& feature, std::string_view cell,
                        FeatureValues* values) {
    bool ok = true;
    ForEachPiece(cell, ',', [&](std::string_view token) {
      if (token.empty()) return;
      std::string_view id = token;
      if (feature.weighted) {
        float weight = 1.0f;
        const size_t colon = token.find(':');
        if (colon != std::string_view::npos) {
          id = token.substr(0, colon);
          const std::string_view weight_cell = token.substr(colon + 1);
          ok &= weight_cell.find(':') == std::string_view::npos &&
                ParseFiniteDecimal(weight_cell, &weight);
        }
        values->weights.push_back(weight);
      }
      int64_t row = 0;
      const bool keys = feature.vocabulary_size == kAnyKey;
      if (feature.string_ids) {
        ok &= !id.empty();
        row = static_cast<int64_t>(
            util::Fingerprint64(id.data(), id.size()) %
            static_cast<uint64_t>(keys ? kKeySpace : feature.vocabulary_size));
      } else {
        int64_t value = 0;
        ok &= ParseInteger(id, &value);
        row = keys ? value : value % feature.vocabulary_size;
        if (!keys && row < 0) row += feature.vocabulary_size;
      }
      values->rows.push_back(row);
    });
    return ok;
  }

  int64_t num_dense_ = 0;
  int64_t num_weighted_ = 0;
  std::vector<FeatureRule> features_;
};

REGISTER_KERNEL_BUILDER(Name("TfeDecodeTsv").Device(::tensorflow::DEVICE_CPU), DecodeTsvOp);

}  // namespace
}  // namespace tf_embedding
