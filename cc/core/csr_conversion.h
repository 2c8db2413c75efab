// Host-side conversion of one table's features (dense, sparse, ragged) into a CSR batch.
//
// Plain C++17 without TensorFlow so that it can be unit-tested and fuzzed on its own. The
// semantics are those of `TfeFeaturesToCsr` in docs/kernels.md. Every input is validated
// before it is used to index anything: no input may make this code read or write out of bounds.
// Errors are complete: they start with the table (and feature) they concern.
#ifndef TF_EMBEDDING_CC_CORE_CSR_CONVERSION_H_
#define TF_EMBEDDING_CC_CORE_CSR_CONVERSION_H_

#include <algorithm>
#include <cstdint>
#include <limits>
#include <string>
#include <utility>
#include <vector>

#include "cc/core/combiner_rule.h"
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
  bool is_int64() const { return i64_ != nullptr; }
  // The ids as stored if they are int64, else nullptr.
  const int64_t* int64_data() const { return i64_; }
  int64_t operator[](int64_t i) const { return i64_ != nullptr ? i64_[i] : i32_[i]; }
  // Calls f(pointer) with the ids as they are stored (const int32_t* or const int64_t*).
  template <typename F>
  auto WithData(F&& f) const {
    return i64_ != nullptr ? f(i64_) : f(i32_);
  }
  // Writes the ids, widened, to out[0 .. size()).
  void CopyTo(int64_t* out) const {
    if (i64_ != nullptr) {
      std::copy(i64_, i64_ + size_, out);
    } else {
      std::copy(i32_, i32_ + size_, out);
    }
  }

 private:
  const int32_t* i32_ = nullptr;
  const int64_t* i64_ = nullptr;
  int64_t size_ = 0;
};

// Output rows of one batch are capped so that row indices fit int32 consumers and a malformed
// dense_shape cannot ask for an absurd allocation (2^31 rows is 16 GB of row_splits alone).
constexpr int64_t kMaxRows = std::numeric_limits<int32_t>::max();

enum class InputKind { kDense, kSparse, kRagged };

// Turns the weights of one pooled row, [begin, end), into its gains in place, by the
// combiner's rule (cc/core/combiner_rule.h).
void ApplyCombinerToRow(Combiner combiner, float* begin, float* end);

// The gain ApplyCombinerToRow gives every id of a row of `ids` ids whose weights are all 1, bit
// for bit (a row without ids: 0 under mean and sqrtn, whose denominator is then 0).
float UnitWeightGain(Combiner combiner, int64_t ids);

// The vocabulary_size of a table whose ids are keys (a dynamic table's): any id >= 0.
constexpr int64_t kAnyKey = -1;

struct TableSpec {
  std::string name;
  int64_t vocabulary_size = 0;  // or kAnyKey
  Combiner combiner = Combiner::kSum;

  // Ids below this bound are valid (compared as unsigned, so a negative id never is).
  uint64_t IdBound() const {
    return vocabulary_size == kAnyKey ? uint64_t{1} << 63 : static_cast<uint64_t>(vocabulary_size);
  }
};

struct FeatureSpec {
  std::string name;
  InputKind kind = InputKind::kDense;
  bool has_weights = false;
  int64_t max_sequence_length = 0;
  bool prune_invalid = false;
};

// Builds the table and feature specs from the op's attrs, checking that every per-feature list
// has `num_features` entries and that every value is known (a vocabulary_size of kAnyKey only
// where `any_key` allows it: the conversion of a dynamic table's keys).
Status ParseTableSpec(const std::string& table_name, int64_t vocabulary_size,
                      const std::string& combiner, TableSpec* table, bool any_key = false);
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

// AddFeature's checks of the feature's structure, without its ids' values: the layout's checks,
// a ragged feature's row splits, a sparse one's indices (in bounds), weights as many as ids.
// Reads no id, so it is cheap where AddFeature is a pass over the ids: what a multi-worker step
// checks of every worker's batch before its conversion (the ids' range is checked there from
// their largest value).
Status CheckFeatureStructure(const std::string& table_name, const FeatureSpec& spec,
                             const FeatureTensors& t);

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
  // AddFeature of specs[f] with tensors[f] for every feature in order (`tensors` holds one per
  // spec); returns the first error.
  Status AddFeatures(const std::vector<FeatureSpec>& specs, const FeatureTensors* tensors);

  int64_t num_rows() const { return num_rows_; }
  int64_t num_lookups() const { return num_lookups_; }
  const std::vector<int64_t>& feature_row_counts() const { return feature_row_counts_; }

  // Whether the batch's CSR ids are its only feature's ids as they are (int64, every lookup
  // kept, in row order): the caller may then pass that input on as the ids output, without a
  // copy, and give Build ids == nullptr.
  bool CsrIdsAreFeatureIds() const;

  // ids may be nullptr only if CsrIdsAreFeatureIds().
  void Build(int64_t* row_splits, int64_t* ids, float* gains) const;

 private:
  // What Build needs of an added feature: its inputs and the rows they give.
  struct AddedFeature {
    FeatureSpec spec;
    FeatureTensors tensors;  // weights empty when the feature has no weights
    int64_t first_row;
    int64_t num_rows;
    bool pooled;             // fold the combiner into the gains (not a sequence feature)
    bool prune_weights;      // drop lookups of non-positive weight
    // Every lookup kept, in row order: the feature's ids are its CSR ids as they are.
    bool contiguous = false;

    // Whether lookup i, of local output row `row` (-1: beyond max_sequence_length), is kept.
    // Stock safe_embedding_lookup_sparse prunes negative ids always and non-positive weights
    // only when they would feed a mean or sqrtn denominator. (Defined here so that it inlines
    // into the conversion's loops: out of line it is a call through the PLT.)
    bool Keeps(int64_t i, int64_t row) const {
      return row >= 0 && tensors.ids[i] >= 0 && !(prune_weights && !(tensors.weights[i] > 0));
    }
  };

  // Build's two ways to place a feature's kept lookups after its rows' start: a copy when it is
  // contiguous, else a stable counting-sort scatter by row.
  void Copy(const AddedFeature& feature, const int64_t* row_splits, int64_t* ids,
            float* gains) const;
  void Scatter(const AddedFeature& feature, const int64_t* row_splits, int64_t* ids,
               float* gains) const;
  void ApplyCombiner(const AddedFeature& feature, const int64_t* row_splits,
                     float* gains) const;

  TableSpec table_;
  std::vector<AddedFeature> features_;
  std::vector<int64_t> feature_row_counts_;
  // Kept lookups of every output row, features concatenated.
  std::vector<int64_t> row_sizes_;
  int64_t num_rows_ = 0;
  int64_t num_lookups_ = 0;
};

}  // namespace tf_embedding

#endif  // TF_EMBEDDING_CC_CORE_CSR_CONVERSION_H_
