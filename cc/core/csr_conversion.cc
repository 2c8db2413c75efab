#include "cc/core/csr_conversion.h"

#include <algorithm>
#include <cmath>
#include <sstream>

#include "cc/core/csr_batch.h"
#include "cc/core/errors.h"
#include "cc/core/range_checks.h"

namespace tf_embedding {
namespace {

// Formats a list of integers as "[a, b, c]" for error messages.
template <typename T>
std::string ListToString(const T* values, int64_t size) {
  std::ostringstream out;
  out << "[";
  for (int64_t i = 0; i < size; ++i) out << (i > 0 ? ", " : "") << values[i];
  out << "]";
  return out.str();
}

// a * b for non-negative operands, or -1 when the product exceeds `limit`.
int64_t CheckedProduct(int64_t a, int64_t b, int64_t limit) {
  if (a != 0 && b > limit / a) return -1;
  return a * b;
}

// Builds the errors about one feature, which name its table and itself.
class FeatureErrors {
 public:
  FeatureErrors(const std::string& table, const std::string& feature)
      : table_(table), feature_(feature) {}
  template <typename... Parts>
  Status operator()(const Parts&... parts) const {
    return FeatureError(table_, feature_, parts...);
  }
  // Names the table and feature in `status`, a context-free error about the feature's input.
  Status About(const Status& status) const {
    return status.WithContext(FeatureContext(table_, feature_));
  }

 private:
  const std::string& table_;
  const std::string& feature_;
};


Status CheckRowCount(const FeatureErrors& error, int64_t rows, const char* what) {
  if (rows < 0 || rows > kMaxRows) {
    return error(what, " gives more than ", kMaxRows, " output rows");
  }
  return Status();
}

// Checks the sparse tensor's structure; element-wise index bounds are checked in
// VisitLookupRows.
Status CheckSparseStructure(const FeatureErrors& error, const FeatureTensors& t) {
  const std::vector<int64_t>& shape = t.row_info_shape;
  const int64_t rank = t.dense_shape.size;
  if (shape.size() != 2) {
    return error("sparse indices must be a matrix [nnz, rank], got shape ",
                 ListToString(shape.data(), shape.size()));
  }
  if (rank < 2) {
    return error("sparse input must have rank >= 2 (dense_shape ",
                 ListToString(t.dense_shape.data, rank), ")");
  }
  if (shape[1] != rank) {
    return error("sparse indices have ", shape[1], " columns but dense_shape ",
                 ListToString(t.dense_shape.data, rank), " has ", rank, " entries");
  }
  if (shape[0] != t.ids.size()) {
    return error("sparse indices have ", shape[0], " rows but there are ", t.ids.size(),
                 " ids");
  }
  if (CheckedProduct(shape[0], rank, t.row_info.size) != t.row_info.size) {
    return error("sparse indices shape ", ListToString(shape.data(), shape.size()),
                 " does not match their ", t.row_info.size, " elements");
  }
  for (int64_t d = 0; d < rank; ++d) {
    if (t.dense_shape[d] < 0) {
      return error("sparse dense_shape ", ListToString(t.dense_shape.data, rank),
                   " has a negative dimension");
    }
  }
  return Status();
}

// Rows of a pooled sparse feature: prod(dense_shape[:-1]), or -1 past kMaxRows.
int64_t PooledSparseRowCount(const Span<int64_t>& dense_shape) {
  const int64_t* outer_end = dense_shape.data + dense_shape.size - 1;
  // An empty dimension empties the product even when the others would overflow it.
  if (std::find(dense_shape.data, outer_end, 0) != outer_end) return 0;
  int64_t rows = 1;
  for (const int64_t* d = dense_shape.data; d != outer_end && rows >= 0; ++d) {
    rows = CheckedProduct(rows, *d, kMaxRows);
  }
  return rows;
}

Status SparseIndexError(const FeatureErrors& error, const FeatureTensors& t, int64_t i) {
  const int64_t rank = t.dense_shape.size;
  return error("sparse indices[", i, "] = ", ListToString(t.row_info.data + i * rank, rank),
               " is out of bounds for dense_shape ", ListToString(t.dense_shape.data, rank));
}

// Rows of a sparse feature: prod(dense_shape[:-1]) pooled rows, or dense_shape[0] * msl sequence
// rows for rank 2 with max_sequence_length > 0. Rank > 2 ignores max_sequence_length, as stock
// TF's CPU lookup does.
Status SparseLayout(const FeatureErrors& error, const FeatureSpec& spec, const FeatureTensors& t,
                    FeatureLayout* layout) {
  TFE_RETURN_IF_ERROR(CheckSparseStructure(error, t));
  const Span<int64_t>& dense_shape = t.dense_shape;
  const int64_t msl = spec.max_sequence_length;
  layout->sequence = msl > 0 && dense_shape.size == 2;
  layout->num_rows = layout->sequence ? CheckedProduct(dense_shape[0], msl, kMaxRows)
                                      : PooledSparseRowCount(dense_shape);
  return CheckRowCount(error, layout->num_rows, "the sparse dense_shape");
}

// Rows of a ragged feature: one per batch row when pooled, batch * msl for a sequence.
Status RaggedLayout(const FeatureErrors& error, const FeatureSpec& spec, const FeatureTensors& t,
                    FeatureLayout* layout) {
  const int64_t size = t.row_info.size;
  TFE_RETURN_IF_ERROR(error.About(CheckRowSplitsNotEmpty(size)));
  const int64_t msl = spec.max_sequence_length;
  layout->sequence = msl > 0;
  layout->num_rows = msl > 0 ? CheckedProduct(size - 1, msl, kMaxRows) : size - 1;
  return CheckRowCount(error, layout->num_rows, "the ragged row_splits");
}

// Calls visit(i, row) for every lookup i of a feature, in input order, with its local output row:
// the lookup's position for dense ids; for sparse ids the row-major index of indices[i, :-1]
// when pooled, b * msl + p for a sequence; for ragged ids the batch row when pooled,
// b * msl + position for a sequence; -1 for a sequence position beyond max_sequence_length.
// Stops when visit returns false. Checks the indices that give the rows as it goes (the layout
// checks of FeatureLayoutOf have passed) and returns the first bad one's error.
template <typename Visit>
Status VisitLookupRows(const FeatureErrors& error, const FeatureSpec& spec,
                       const FeatureTensors& t, bool sequence, Visit&& visit) {
  const int64_t nnz = t.ids.size();
  const int64_t msl = spec.max_sequence_length;
  switch (spec.kind) {
    case InputKind::kDense:
      for (int64_t i = 0; i < nnz; ++i) {
        if (!visit(i, i)) break;
      }
      return Status();
    case InputKind::kSparse: {
      const Span<int64_t>& dense_shape = t.dense_shape;
      const int64_t rank = dense_shape.size;
      if (rank == 2 && !sequence) {
        // The common case, [batch, ids] indices, in a loop the compiler keeps tight.
        const int64_t* index = t.row_info.data;
        const uint64_t batch = dense_shape[0];
        const uint64_t width = dense_shape[1];
        for (int64_t i = 0; i < nnz; ++i, index += 2) {
          // Unsigned compares reject negative indices too.
          if (static_cast<uint64_t>(index[0]) >= batch ||
              static_cast<uint64_t>(index[1]) >= width) {
            return SparseIndexError(error, t, i);
          }
          if (!visit(i, index[0])) break;
        }
        return Status();
      }
      for (int64_t i = 0; i < nnz; ++i) {
        const int64_t* index = t.row_info.data + i * rank;
        for (int64_t d = 0; d < rank; ++d) {
          if (index[d] < 0 || index[d] >= dense_shape[d]) return SparseIndexError(error, t, i);
        }
        int64_t row = 0;
        if (sequence) {
          row = index[1] < msl ? index[0] * msl + index[1] : -1;
        } else {
          for (int64_t d = 0; d + 1 < rank; ++d) row = row * dense_shape[d] + index[d];
        }
        if (!visit(i, row)) break;
      }
      return Status();
    }
    case InputKind::kRagged: {
      const Span<int64_t>& splits = t.row_info;
      TFE_RETURN_IF_ERROR(error.About(ValidateRowSplits(splits.data, splits.size, nnz)));
      for (int64_t b = 0; b + 1 < splits.size; ++b) {
        for (int64_t i = splits[b]; i < splits[b + 1]; ++i) {
          const int64_t position = i - splits[b];
          if (!visit(i, msl == 0 ? b : (position < msl ? b * msl + position : -1))) {
            return Status();
          }
        }
      }
      return Status();
    }
  }
  return Status();
}

// The fast path of AddFeature for a rank-2 pooled sparse feature whose lookups are all valid
// and in row order (what tf.sparse ops and tf.data give): a vectorised check of that, then each
// row's size from where its run of indices ends, one store per row. Returns false, having
// written nothing, for any other input, which takes the exact per-lookup pass.
bool CountInOrderSparseRows(const FeatureTensors& t, uint64_t id_bound, int64_t* row_sizes) {
  const int64_t nnz = t.ids.size();
  const int64_t* index = t.row_info.data;
  const bool valid = t.ids.WithData([&](const auto* ids) {
    return SparseLookupsValidInRowOrder(index, ids, nnz, t.dense_shape[0], t.dense_shape[1],
                                        id_bound);
  });
  if (!valid) return false;
  int64_t run_begin = 0;
  for (int64_t i = 1; i < nnz; ++i) {
    if (index[2 * i] != index[2 * i - 2]) {
      row_sizes[index[2 * i - 2]] = i - run_begin;
      run_begin = i;
    }
  }
  if (nnz > 0) row_sizes[index[2 * nnz - 2]] = nnz - run_begin;
  return true;
}

bool ParseInputKind(const std::string& name, InputKind* kind) {
  if (name == "dense") *kind = InputKind::kDense;
  else if (name == "sparse") *kind = InputKind::kSparse;
  else if (name == "ragged") *kind = InputKind::kRagged;
  else return false;
  return true;
}

}  // namespace

Status ParseTableSpec(const std::string& table_name, int64_t vocabulary_size,
                      const std::string& combiner, TableSpec* table, bool any_key) {
  table->name = table_name;
  table->vocabulary_size = vocabulary_size;
  if (vocabulary_size < 1 && !(any_key && vocabulary_size == kAnyKey)) {
    return TableError(table_name, "vocabulary_size must be >= 1, got ", vocabulary_size);
  }
  if (!ParseCombiner(combiner, &table->combiner)) {
    return TableError(table_name, "unknown combiner '", combiner,
                      "' (expected sum, mean or sqrtn)");
  }
  return Status();
}

Status ParseFeatureSpecs(const std::string& table_name, int64_t num_features,
                         const std::vector<std::string>& feature_names,
                         const std::vector<std::string>& input_kinds,
                         const std::vector<bool>& has_weights,
                         const std::vector<int64_t>& max_sequence_lengths,
                         const std::vector<bool>& prune_invalid,
                         std::vector<FeatureSpec>* features) {
  const std::pair<const char*, size_t> lengths[] = {
      {"feature_names", feature_names.size()},
      {"input_kinds", input_kinds.size()},
      {"has_weights", has_weights.size()},
      {"max_sequence_lengths", max_sequence_lengths.size()},
      {"prune_invalid", prune_invalid.size()}};
  for (const auto& [attr, length] : lengths) {
    if (static_cast<int64_t>(length) != num_features) {
      return TableError(table_name, "attr ", attr, " has ", length, " entries but there are ",
                        num_features, " features");
    }
  }
  features->assign(num_features, FeatureSpec{});
  for (int64_t f = 0; f < num_features; ++f) {
    FeatureSpec& spec = (*features)[f];
    spec.name = feature_names[f];
    spec.has_weights = has_weights[f];
    spec.max_sequence_length = max_sequence_lengths[f];
    spec.prune_invalid = prune_invalid[f];
    const FeatureErrors error(table_name, spec.name);
    if (!ParseInputKind(input_kinds[f], &spec.kind)) {
      return error("unknown input kind '", input_kinds[f], "' (expected dense, sparse or ragged)");
    }
    if (spec.max_sequence_length < 0) {
      return error("max_sequence_length must be >= 0, got ", spec.max_sequence_length);
    }
    if (spec.kind == InputKind::kDense && spec.max_sequence_length > 0) {
      return error("is a sequence feature (max_sequence_length ", spec.max_sequence_length,
                   ") but its input is dense");
    }
  }
  return Status();
}

Status FeatureLayoutOf(const std::string& table_name, const FeatureSpec& spec,
                       const FeatureTensors& t, FeatureLayout* layout) {
  const FeatureErrors error(table_name, spec.name);
  if (spec.has_weights && t.weights.size != t.ids.size()) {
    return error("weights have ", t.weights.size, " elements but there are ", t.ids.size(),
                 " ids");
  }
  switch (spec.kind) {
    case InputKind::kDense:
      *layout = FeatureLayout{t.ids.size(), /*sequence=*/false};
      return CheckRowCount(error, layout->num_rows, "the number of dense ids");
    case InputKind::kSparse:
      return SparseLayout(error, spec, t, layout);
    case InputKind::kRagged:
      return RaggedLayout(error, spec, t, layout);
  }
  return Status();
}

Status CheckStackedRows(const std::string& table_name, const FeatureSpec& spec,
                        int64_t rows_before, int64_t rows) {
  if (rows <= kMaxRows - rows_before) return Status();
  return FeatureError(table_name, spec.name, "stacking it after ", rows_before,
                      " rows gives more than ", kMaxRows, " output rows");
}

Status CheckFeatureStructure(const std::string& table_name, const FeatureSpec& spec,
                             const FeatureTensors& t) {
  FeatureLayout layout;
  TFE_RETURN_IF_ERROR(FeatureLayoutOf(table_name, spec, t, &layout));
  // A visit that reads nothing: only the indices and row splits that give the rows are checked.
  return VisitLookupRows(FeatureErrors(table_name, spec.name), spec, t, layout.sequence,
                         [](int64_t, int64_t) { return true; });
}

Status CsrBuilder::AddFeature(const FeatureSpec& spec, const FeatureTensors& t) {
  const FeatureErrors error(table_.name, spec.name);
  FeatureLayout layout;
  TFE_RETURN_IF_ERROR(FeatureLayoutOf(table_.name, spec, t, &layout));
  TFE_RETURN_IF_ERROR(CheckStackedRows(table_.name, spec, num_rows_, layout.num_rows));
  AddedFeature feature{spec, t, num_rows_, layout.num_rows, !layout.sequence,
                       spec.prune_invalid && spec.has_weights && table_.combiner != Combiner::kSum};
  if (!spec.has_weights) feature.tensors.weights = Span<float>{};

  // One pass validates the lookups and counts the kept ones of each output row (a vectorised
  // one for valid in-order sparse lookups, else VisitLookupRows's); Build places them from
  // those counts.
  row_sizes_.resize(num_rows_ + layout.num_rows, 0);
  int64_t* const row_sizes = row_sizes_.data() + num_rows_;
  const uint64_t id_bound = table_.IdBound();
  const bool prune_invalid = spec.prune_invalid;
  int64_t dropped = 0, last_row = 0, bad_lookup = -1;
  bool in_row_order = true;
  const bool fast = spec.kind == InputKind::kSparse && t.dense_shape.size == 2 &&
                    !layout.sequence && !feature.prune_weights &&
                    CountInOrderSparseRows(t, id_bound, row_sizes);
  if (!fast) {
    TFE_RETURN_IF_ERROR(VisitLookupRows(error, spec, t, layout.sequence,
                                        [&](int64_t i, int64_t row) {
      const int64_t id = t.ids[i];
      if (id < 0 ? !prune_invalid : static_cast<uint64_t>(id) >= id_bound) {
        bad_lookup = i;
        return false;
      }
      if (!feature.Keeps(i, row)) {
        ++dropped;
        return true;
      }
      ++row_sizes[row];
      in_row_order = in_row_order && row >= last_row;
      last_row = row;
      return true;
    }));
  }
  if (bad_lookup >= 0) {
    return error(IdOutOfRange(t.ids[bad_lookup], LookupName(bad_lookup),
                              table_.vocabulary_size));
  }
  feature.contiguous = in_row_order && dropped == 0;
  num_lookups_ += t.ids.size() - dropped;
  features_.push_back(std::move(feature));
  feature_row_counts_.push_back(layout.num_rows);
  num_rows_ += layout.num_rows;
  return Status();
}

Status CsrBuilder::AddFeatures(const std::vector<FeatureSpec>& specs,
                               const FeatureTensors* tensors) {
  for (size_t f = 0; f < specs.size(); ++f) TFE_RETURN_IF_ERROR(AddFeature(specs[f], tensors[f]));
  return Status();
}

bool CsrBuilder::CsrIdsAreFeatureIds() const {
  return features_.size() == 1 && features_[0].contiguous && features_[0].tensors.ids.is_int64();
}

void CsrBuilder::Build(int64_t* row_splits, int64_t* ids, float* gains) const {
  row_splits[0] = 0;
  for (int64_t r = 0; r < num_rows_; ++r) row_splits[r + 1] = row_splits[r] + row_sizes_[r];
  for (const AddedFeature& feature : features_) {
    if (feature.contiguous) {
      Copy(feature, row_splits, ids, gains);
    } else {
      Scatter(feature, row_splits, ids, gains);
    }
    if (feature.pooled) ApplyCombiner(feature, row_splits, gains);
  }
}

void CsrBuilder::Copy(const AddedFeature& feature, const int64_t* row_splits, int64_t* ids,
                      float* gains) const {
  const int64_t begin = row_splits[feature.first_row];
  const FeatureTensors& t = feature.tensors;
  if (ids != nullptr) t.ids.CopyTo(ids + begin);
  if (t.weights.size > 0) {
    std::copy(t.weights.data, t.weights.data + t.weights.size, gains + begin);
  } else {
    std::fill(gains + begin, gains + begin + t.ids.size(), 1.0f);
  }
}

void CsrBuilder::Scatter(const AddedFeature& feature, const int64_t* row_splits, int64_t* ids,
                         float* gains) const {
  // Stable counting sort by output row, the counts being row_splits: each row's kept lookups
  // in input order.
  std::vector<int64_t> next(row_splits + feature.first_row,
                            row_splits + feature.first_row + feature.num_rows);
  const FeatureTensors& t = feature.tensors;
  // AddFeature validated the feature, so no error can come back.
  (void)VisitLookupRows(FeatureErrors(table_.name, feature.spec.name), feature.spec, t,
                        !feature.pooled, [&](int64_t i, int64_t row) {
    if (!feature.Keeps(i, row)) return true;
    const int64_t slot = next[row]++;
    ids[slot] = t.ids[i];
    gains[slot] = t.weights.size > 0 ? t.weights[i] : 1.0f;
    return true;
  });
}

void CsrBuilder::ApplyCombiner(const AddedFeature& feature, const int64_t* row_splits,
                               float* gains) const {
  if (table_.combiner == Combiner::kSum) return;
  for (int64_t r = feature.first_row; r < feature.first_row + feature.num_rows; ++r) {
    ApplyCombinerToRow(table_.combiner, gains + row_splits[r], gains + row_splits[r + 1]);
  }
}

void ApplyCombinerToRow(Combiner combiner, float* begin, float* end) {
  if (combiner == Combiner::kSum) return;
  using Rule = CombinerRule;
  double sum_of_terms = 0;
  for (const float* g = begin; g != end; ++g) sum_of_terms += Rule::Term(combiner, *g);
  const double denominator = Rule::Denominator(combiner, sum_of_terms);
  for (float* g = begin; g != end; ++g) {
    *g = static_cast<float>(Rule::Gain(*g, denominator));
  }
}

float UnitWeightGain(Combiner combiner, int64_t ids) {
  if (combiner == Combiner::kSum) return 1.0f;
  using Rule = CombinerRule;
  // Each id's term is 1 under both rules (1 and 1^2), and a double sums up to 2^53 ones exactly.
  const double sum_of_terms = static_cast<double>(ids);
  return static_cast<float>(Rule::Gain(1.0, Rule::Denominator(combiner, sum_of_terms)));
}

}  // namespace tf_embedding
