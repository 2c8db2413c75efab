// What tools/core_ab/main.cc hands each copy's RunForward_<copy> and RunPhases_<copy>
// (phases.cc): one step of the benchmark's workload, and the seconds cc/core's loops took on it.
#ifndef TF_EMBEDDING_TOOLS_CORE_AB_PHASES_H_
#define TF_EMBEDDING_TOOLS_CORE_AB_PHASES_H_

#include <cstdint>

extern "C" {

// Every table's samples are rows of `ids_per_row` lookups, the same row_splits and gains.
struct Step {
  int64_t tables, rows, ids_per_row, dim, vocab;
  const int64_t* ids;         // [tables, rows * ids_per_row]
  const int64_t* row_splits;  // [rows + 1]
  const int64_t* indices;     // [rows * ids_per_row, 2]: a SparseTensor's indices of the ids
  const float* gains;         // [rows * ids_per_row]
  float* const* tables_data;  // per table [vocab, dim]
  float* const* accumulators;  // per table [vocab, dim], Adagrad's slot
  float* activations;         // [tables, rows, dim], written by the lookup
  float learning_rate;
};

// Summed over the tables of a step; all -1 if the grouping rejected the step.
struct PhaseSeconds {
  double lookup, group, update;
};

}  // extern "C"

#endif  // TF_EMBEDDING_TOOLS_CORE_AB_PHASES_H_
