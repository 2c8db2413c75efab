// Host-side conversion of one table's features (dense, sparse, ragged) into a CSR batch.
//
// Plain C++17 without TensorFlow so that it can be unit-tested and fuzzed on its own. The
// semantics are those of `TfeFeaturesToCsr` in docs/internals.md. Every input is validated
// before it is used to index anything: no input may make this code read or write out of bounds.
// Errors are complete: they start with the table (and feature) they concern.
#ifndef TF_EMBEDDING_CC_CORE_CSR_CONVERSION_H_
#define TF_EMBEDDING_CC_CORE_CSR_CONVERSION_H_

#include <cstdint>
#include <limits>
#include <string>
#include <utility>
#include <vector>

#include "cc/core/status.h"

namespace tf_embedding {

// A read-only view of a contiguous array that someone else owns (a tensor buffer).
template <typename T>
struct Span {
  const T* data = nullptr;
  int64_t size = 0;
  const T& operator[](int64_t i) const { return data[i]; }
};

// Ids arrive as int32 or int64, as stock TF accepts both; they are widened on read.
class IdSpan {
 public:
  IdSpan() = default;
  IdSpan(const int32_t* data, int64_t size) : i32_(data), size_(size) {}
  IdSpan(const int64_t* data, int64_t size) : i64_(data), size_(size) {}
  int64_t size() const { return size_; }
  int64_t operator[](int64_t i) const { return i64_ != nullptr ? i64_[i] : i32_[i]; }

 private:
  const int32_t* i32_ = nullptr;
  const int64_t* i64_ = nullptr;
  int64_t size_ = 0;
};

// Output rows of one batch are capped so that row indices fit int32 consumers and a malformed
// dense_shape cannot ask for an absurd allocation (2^31 rows is 16 GB of row_splits alone).
constexpr int64_t kMaxRows = std::numeric_limits<int32_t>::max();

enum class InputKind { kDense, kSparse, kRagged };
enum class Combiner { kSum, kMean, kSqrtn };

struct TableSpec {
  std::string name;
  int64_t vocabulary_size = 0;
  Combiner combiner = Combiner::kSum;
};

struct FeatureSpec {
  std::string name;
  InputKind kind = InputKind::kDense;
  bool has_weights = false;
  int64_t max_sequence_length = 0;
  bool prune_invalid = false;
};

// Builds the table and feature specs from the op's attrs, checking that every per-feature list
// has `num_features` entries and that every value is known.
Status ParseTableSpec(const std::string& table_name, int64_t vocabulary_size,
                      const std::string& combiner, TableSpec* table);
Status ParseFeatureSpecs(const std::string& table_name, int64_t num_features,
                         const std::vector<std::string>& feature_names,
                         const std::vector<std::string>& input_kinds,
                         const std::vector<bool>& has_weights,
                         const std::vector<int64_t>& max_sequence_lengths,
                         const std::vector<bool>& prune_invalid,
                         std::vector<FeatureSpec>* features);

// One feature's input tensors, as views. `row_info` is the sparse indices (shape
// `row_info_shape`, expected [nnz, rank]) or the ragged row_splits; `dense_shape` is the sparse
// dense_shape. Both are ignored for dense features.
struct FeatureTensors {
  IdSpan ids;
  Span<int64_t> row_info;
  std::vector<int64_t> row_info_shape;
  Span<int64_t> dense_shape;
  Span<float> weights;
};

// How a feature's input maps to output rows: how many it gives, and whether they are sequence
// rows (one per sample and position, no combiner) or pooled rows.
struct FeatureLayout {
  int64_t num_rows = 0;
  bool sequence = false;
};

// The feature's layout, after the checks of AddFeature that need only the sizes of its tensors,
// the shape of row_info and the values of dense_shape: what the XLA kernel, which compiles for
// shapes, can check. Reads no other data.
Status FeatureLayoutOf(const std::string& table_name, const FeatureSpec& spec,
                       const FeatureTensors& t, FeatureLayout* layout);

// Checks that stacking a feature of `rows` rows after `rows_before` stays within kMaxRows.
Status CheckStackedRows(const std::string& table_name, const FeatureSpec& spec,
                        int64_t rows_before, int64_t rows);

// Stacks the features of one table into a CSR batch, in two phases so that the caller can
// allocate the outputs (tensors) once the sizes are known:
//   AddFeature for each feature in order (validates it and assigns output rows), then
//   Build into buffers of num_rows() + 1, num_lookups() and num_lookups() elements.
// The views passed to AddFeature must stay valid until Build returns. After an error the
// builder is unusable (the caller reports the error and drops it).
class CsrBuilder {
 public:
  explicit CsrBuilder(TableSpec table) : table_(std::move(table)) {}

  Status AddFeature(const FeatureSpec& spec, const FeatureTensors& tensors);

  int64_t num_rows() const { return num_rows_; }
  int64_t num_lookups() const { return num_lookups_; }
  const std::vector<int64_t>& feature_row_counts() const { return feature_row_counts_; }

  void Build(int64_t* row_splits, int64_t* ids, float* gains) const;

 private:
  // What Build needs of an added feature: its lookups and where its rows start.
  struct AddedFeature {
    IdSpan ids;
    Span<float> weights;  // empty when the feature has no weights
    int64_t first_row;
    bool pooled;          // fold the combiner into the gains (not a sequence feature)
  };

  // Build's two ways to place the kept lookups: a copy when they are already in row order,
  // else a stable counting-sort scatter by row.
  void CopyInRowOrder(int64_t* row_splits, int64_t* ids, float* gains) const;
  void Scatter(int64_t* row_splits, int64_t* ids, float* gains) const;
  void ApplyCombiner(const AddedFeature& feature, int64_t num_rows, const int64_t* row_splits,
                     float* gains) const;

  TableSpec table_;
  std::vector<AddedFeature> features_;
  std::vector<int64_t> feature_row_counts_;
  // Output row of every input lookup, features concatenated; -1 for dropped lookups.
  std::vector<int64_t> lookup_rows_;
  int64_t num_rows_ = 0;
  int64_t num_lookups_ = 0;
  // Whether the kept lookups' rows never decrease in input order, and the last of those rows.
  bool in_row_order_ = true;
  int64_t last_row_ = 0;
};

}  // namespace tf_embedding

#endif  // TF_EMBEDDING_CC_CORE_CSR_CONVERSION_H_
