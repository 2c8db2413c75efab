// Times two copies of cc/core's hot loops on the benchmark's ids, in one process, alternating the
// copies step by step, so both see the same minute of a machine whose memory speed drifts: first
// forward steps alone (every table's feature, as a SparseTensor then as a RaggedTensor, combined
// straight from its indices or row splits with the sum combiner, as a forward step does), then
// training steps (the fused lookup's combine, the gradient's grouping by id, the Adagrad row
// update). Built and run by tools/core_ab/run.sh, which says what the copies are.
//
//   core_ab IDS.npy VOCAB DIM STEPS
//
// IDS.npy: int64 [batches, tables, batch, ids_per_sample], as tools/benchmark.py writes it.
// The loops run on the ISA the op library would pick (TF_EMBEDDING_SIMD caps it). Prints, per
// copy and phase, the median and the fastest step in ms over the tables, after two warm-up steps
// per copy.
#include <sys/mman.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <iterator>
#include <string>
#include <vector>

#include "tools/core_ab/phases.h"

extern "C" double RunForward_tfe_base(const Step* step, int ragged);
extern "C" double RunForward_tfe_work(const Step* step, int ragged);
extern "C" PhaseSeconds RunPhases_tfe_base(const Step* step);
extern "C" PhaseSeconds RunPhases_tfe_work(const Step* step);

namespace {

constexpr size_t kHugePage = size_t{2} << 20;
constexpr int kWarmupSteps = 2;

[[noreturn]] void Fail(const std::string& message) {
  std::fprintf(stderr, "core_ab: %s\n", message.c_str());
  std::exit(2);
}

// A [rows, dim] float array on 2 MiB pages (as the op library advises for its tables).
float* HugePageArray(int64_t rows, int64_t dim, float value) {
  const size_t bytes = (rows * dim * sizeof(float) + kHugePage - 1) / kHugePage * kHugePage;
  void* memory = std::aligned_alloc(kHugePage, bytes);
  if (memory == nullptr) Fail("out of memory");
  madvise(memory, bytes, MADV_HUGEPAGE);
  float* array = static_cast<float*>(memory);
  std::fill(array, array + rows * dim, value);
  return array;
}

// The npy file's int64 payload and its 4 dimensions.
std::vector<int64_t> ReadIds(const char* path, int64_t shape[4]) {
  std::ifstream file(path, std::ios::binary);
  const std::string bytes((std::istreambuf_iterator<char>(file)), {});
  if (bytes.size() < 10 || bytes.compare(1, 5, "NUMPY") != 0) {
    Fail(std::string(path) + ": not .npy");
  }
  uint16_t header_size;
  std::memcpy(&header_size, bytes.data() + 8, 2);
  const std::string header = bytes.substr(10, header_size);
  if (header.find("'<i8'") == std::string::npos) Fail("ids must be int64");
  if (std::sscanf(header.c_str() + header.find("'shape': (") + 10, "%ld, %ld, %ld, %ld",
                  &shape[0], &shape[1], &shape[2], &shape[3]) != 4) {
    Fail("ids must be [batches, tables, batch, ids_per_sample]");
  }
  std::vector<int64_t> ids(shape[0] * shape[1] * shape[2] * shape[3]);
  if (bytes.size() < 10 + header_size + ids.size() * sizeof(int64_t)) Fail("ids file truncated");
  std::memcpy(ids.data(), bytes.data() + 10 + header_size, ids.size() * sizeof(int64_t));
  return ids;
}

double MedianMs(std::vector<double> seconds) {
  std::sort(seconds.begin(), seconds.end());
  return seconds[seconds.size() / 2] * 1e3;
}

double FastestMs(const std::vector<double>& seconds) {
  return *std::min_element(seconds.begin(), seconds.end()) * 1e3;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc != 5) Fail("usage: core_ab IDS.npy VOCAB DIM STEPS");
  int64_t shape[4];
  const std::vector<int64_t> ids = ReadIds(argv[1], shape);
  const int64_t vocab = std::atol(argv[2]), dim = std::atol(argv[3]);
  const int steps = std::atoi(argv[4]);
  const int64_t batches = shape[0], tables = shape[1], rows = shape[2], per_row = shape[3];
  if (steps < 1) Fail("STEPS must be positive");
  for (int64_t id : ids) {
    if (id < 0 || id >= vocab) Fail("an id is outside [0, VOCAB)");
  }

  std::vector<int64_t> row_splits(rows + 1), indices(2 * rows * per_row);
  for (int64_t r = 0; r <= rows; ++r) row_splits[r] = r * per_row;
  for (int64_t k = 0; k < rows * per_row; ++k) {
    indices[2 * k] = k / per_row;
    indices[2 * k + 1] = k % per_row;
  }
  const std::vector<float> gains(rows * per_row, 1.0f);
  std::vector<float*> table_data, accumulators;
  for (int64_t t = 0; t < tables; ++t) {
    table_data.push_back(HugePageArray(vocab, dim, 0.01f));
    accumulators.push_back(HugePageArray(vocab, dim, 0.1f));
  }
  std::vector<float> activations(tables * rows * dim);

  const char* const names[2] = {"base", "work"};
  // Step i on batch i (cycled); each step runs both copies, in alternating order.
  const auto step_of = [&](int i) {
    return Step{tables, rows, per_row, dim, vocab,
                ids.data() + (i % batches) * tables * rows * per_row, row_splits.data(),
                indices.data(), gains.data(), table_data.data(), accumulators.data(),
                activations.data(), 0.01f};
  };
  const auto copy_of = [](int i, int turn) { return (i % 2 == 0) ? turn : 1 - turn; };

  double (*const forwards[2])(const Step*, int) = {RunForward_tfe_base, RunForward_tfe_work};
  std::vector<double> forward[2][2];  // [ragged][copy]
  for (int i = 0; i < kWarmupSteps + steps; ++i) {
    for (int ragged = 0; ragged < 2; ++ragged) {
      for (int turn = 0; turn < 2; ++turn) {
        const int copy = copy_of(i, turn);
        const Step step = step_of(i);
        const double seconds = forwards[copy](&step, ragged);
        if (seconds < 0) Fail(std::string(names[copy]) + ": the forward failed");
        if (i >= kWarmupSteps) forward[ragged][copy].push_back(seconds);
      }
    }
  }

  PhaseSeconds (*const copies[2])(const Step*) = {RunPhases_tfe_base, RunPhases_tfe_work};
  std::vector<double> lookup[2], group[2], update[2];
  for (int i = 0; i < kWarmupSteps + steps; ++i) {
    for (int turn = 0; turn < 2; ++turn) {
      const int copy = copy_of(i, turn);
      const Step step = step_of(i);
      const PhaseSeconds seconds = copies[copy](&step);
      if (seconds.lookup < 0) Fail(std::string(names[copy]) + ": the grouping failed");
      if (i < kWarmupSteps) continue;
      lookup[copy].push_back(seconds.lookup);
      group[copy].push_back(seconds.group);
      update[copy].push_back(seconds.update);
    }
  }
  std::printf("ms per step of %ld tables, median (fastest) of %d steps\n", tables, steps);
  std::printf("%-5s %16s %16s | %16s %16s %16s\n", "copy", "sparse forward", "ragged forward",
              "lookup", "group", "update");
  for (int copy = 0; copy < 2; ++copy) {
    std::printf("%-5s %8.2f (%5.2f) %8.2f (%5.2f) | %8.2f (%5.2f) %8.2f (%5.2f) %8.2f (%5.2f)\n",
                names[copy], MedianMs(forward[0][copy]), FastestMs(forward[0][copy]),
                MedianMs(forward[1][copy]), FastestMs(forward[1][copy]), MedianMs(lookup[copy]),
                FastestMs(lookup[copy]), MedianMs(group[copy]), FastestMs(group[copy]),
                MedianMs(update[copy]), FastestMs(update[copy]));
  }
  return 0;
}
