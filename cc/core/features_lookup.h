// The forward lookup of several tables' features in one call, without building CSR batches where
// the inputs allow: what TfeFeaturesLookup runs, as its TF kernel and as its XLA CPU custom call.
// Pooled rank-2 sparse and ragged features without weights, and dense ones, are combined straight
// from their indices, row splits or ids (sparse_lookup.h), in ranges of rows that the threads claim
// from every table together, so they share the whole step's rows evenly; each range checks its
// lookups before combining them. A table with any other feature, or one that fails those checks, is
// converted (CsrBuilder, with its errors) and its batch looked up. Both give the bits of
// converting, then looking up (CombineRows).
#ifndef TF_EMBEDDING_CC_CORE_FEATURES_LOOKUP_H_
#define TF_EMBEDDING_CC_CORE_FEATURES_LOOKUP_H_

#include <cstdint>
#include <functional>
#include <vector>

#include "cc/core/csr_conversion.h"
#include "cc/core/parallel_steps.h"
#include "cc/core/status.h"

namespace tf_embedding {

// One table of the call: its spec, its features with their inputs, and its rows.
struct TableFeatures {
  const TableSpec* spec = nullptr;
  const std::vector<FeatureSpec>* features = nullptr;
  const FeatureTensors* tensors = nullptr;  // one per feature
  const float* table = nullptr;             // [rows >= spec->vocabulary_size, dim]
  int64_t dim = 0;
};

// Checks that a table of `rows` rows holds the vocabulary its ids are checked against.
Status CheckTableHoldsVocabulary(const TableSpec& table, int64_t rows);

// Gives the buffers of table `table`'s outputs once its row count is known: activations
// [rows, dim] and its features' row counts [features]. It is asked again, for the same rows, when
// a table combined directly fails its checks and is converted: it must then give the same
// buffers. An error (say a failed allocation) ends the call with it.
using LookupOutputs = std::function<Status(size_t table, int64_t rows, float** activations,
                                           int64_t** row_counts)>;

// Looks up every table's features into the buffers `outputs` gives: the activations of the CSR
// batch the conversion would build, and each feature's rows. `threads` is how many threads
// `shard` runs shards on (for how finely to split). Returns the first table's error (in table
// order) if any table's features are invalid, with the conversion's message.
Status LookUpTablesFeatures(const std::vector<TableFeatures>& tables,
                            const LookupOutputs& outputs, int64_t threads, const Sharder& shard);

}  // namespace tf_embedding

#endif  // TF_EMBEDDING_CC_CORE_FEATURES_LOOKUP_H_
