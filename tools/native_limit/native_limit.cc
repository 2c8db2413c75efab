// The native limit of tools/benchmark.py: what plain C++ does with the benchmark's own ids on
// this machine, with no framework around it. Built by tools/benchmark_limit.py (-O3 -march=native
// -fopenmp); no TensorFlow headers, so it compiles in seconds.
//
//   native_limit --ids ids.npy --vocab V --dim D [--threads 1,2] [--prefetch 0,8,16,32,64]
//                [--steps 10] [--warmup 3] [--learning-rate 0.01] [--initial-accumulator 0.1]
//                [--rounds-on-stdin 1]
//
// ids.npy: int64 [batches, tables, batch, ids_per_sample], as benchmark.py writes it. For each
// thread count it times, median over the steps, batches cycled:
//   forward  the gather-sum: per table and sample, the sum of the rows of its ids;
//   train    per table, that gather-sum, then the exact Adagrad step the benchmark's loss
//            (0.5 * sum(activations^2)) asks for: the cotangent of each sample is its
//            activation, lookups are deduplicated, each unique id's gradient is summed in lookup
//            order, and each touched row is updated once: acc += g * g; w -= lr * g / sqrt(acc);
//            each table's update right after its gather-sum, which leaves its rows in the caches;
//   train_in_api_order  the same work in the order of an embedding API's step, which a model
//            between the lookup and the update imposes: all tables' gather-sums, then the
//            updates;
//   forward_sparse, train_sparse_in_api_order  forward and train_in_api_order reading the input
//            as a rank-2 SparseTensor of the same ids holds it, as the API's step must: each
//            lookup's output row from the indices ([lookups, 2] int64: sample, position; one
//            array for every table and batch, as the benchmark's SparseTensors share theirs)
//            and its id from the values, where the plain phases take the sample from the
//            lookup's place in a dense [batch, ids_per_sample] block;
//   read, rmw  STREAM-style bandwidth: a sum over the tables, `x *= s` over the accumulators.
// Tables and accumulators sit on 2 MiB pages (MADV_HUGEPAGE before the first touch), as the
// op library's are. The gather and the update prefetch rows a fixed number of rows ahead; every
// distance given is timed and each phase reports its fastest. Threads: the forward splits the
// samples of all tables evenly, the train steps give each thread whole tables to update. Prints
// one JSON object; with --rounds-on-stdin 1, one per line read from stdin (a round), until EOF.

#include <omp.h>
#include <sys/mman.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <iostream>
#include <functional>
#include <map>
#include <sstream>
#include <string>
#include <type_traits>
#include <vector>

namespace {

constexpr size_t kHugePage = size_t{2} << 20;
constexpr int64_t kFloatsPerLine = 16;

[[noreturn]] void Fail(const std::string& message) {
  std::fprintf(stderr, "native_limit: %s\n", message.c_str());
  std::exit(2);
}

// --- Inputs ------------------------------------------------------------------------------------

struct Ids {
  std::vector<int64_t> values;
  int64_t batches, tables, batch, per_sample;

  const int64_t* Of(int64_t b, int64_t t) const {
    return values.data() + (b * tables + t) * batch * per_sample;
  }
};

// The .npy format numpy.save writes: magic, version, header length, a Python dict literal.
Ids ReadNpy(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  char magic[8];
  if (!in.read(magic, 8) || std::memcmp(magic, "\x93NUMPY", 6) != 0) Fail(path + ": not .npy");
  uint32_t header_length = 0;
  in.read(reinterpret_cast<char*>(&header_length), magic[6] == 1 ? 2 : 4);
  std::string header(header_length, '\0');
  in.read(header.data(), header_length);
  if (header.find("'descr': '<i8'") == std::string::npos ||
      header.find("'fortran_order': False") == std::string::npos) {
    Fail(path + ": expected little-endian int64 in C order");
  }
  const size_t shape = header.find("'shape': (");
  if (shape == std::string::npos) Fail(path + ": no shape");
  std::vector<int64_t> dims;
  const char* p = header.c_str() + shape + 10;
  while (*p != ')') {
    char* end;
    dims.push_back(std::strtoll(p, &end, 10));
    p = end;
    while (*p == ',' || *p == ' ') ++p;
  }
  if (dims.size() != 4) Fail(path + ": expected [batches, tables, batch, ids_per_sample]");
  Ids ids{std::vector<int64_t>(dims[0] * dims[1] * dims[2] * dims[3]), dims[0], dims[1],
          dims[2], dims[3]};
  if (!in.read(reinterpret_cast<char*>(ids.values.data()), ids.values.size() * 8)) {
    Fail(path + ": truncated");
  }
  return ids;
}

std::vector<int64_t> ParseList(const std::string& text) {
  std::vector<int64_t> values;
  std::stringstream stream(text);
  for (std::string item; std::getline(stream, item, ',');) values.push_back(std::stoll(item));
  return values;
}

// Never freed: the process ends when its runs do.
float* AllocateOnHugePages(size_t floats) {
  const size_t bytes = (floats * sizeof(float) + kHugePage - 1) / kHugePage * kHugePage;
  void* raw = mmap(nullptr, bytes + kHugePage, PROT_READ | PROT_WRITE,
                   MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (raw == MAP_FAILED) Fail("out of memory");
  // Aligned to 2 MiB so that every page of the buffer can be a huge page.
  auto* aligned = reinterpret_cast<float*>(
      (reinterpret_cast<uintptr_t>(raw) + kHugePage - 1) / kHugePage * kHugePage);
  madvise(aligned, bytes, MADV_HUGEPAGE);
  return aligned;
}

// AnonHugePages of this process: whether the kernel granted the advice.
int64_t HugePageBytes() {
  std::ifstream in("/proc/self/smaps_rollup");
  for (std::string line; std::getline(in, line);) {
    if (line.rfind("AnonHugePages:", 0) == 0) return std::stoll(line.substr(14)) * 1024;
  }
  return -1;
}

// --- Kernels -----------------------------------------------------------------------------------

void PrefetchRow(const float* row, int64_t dim, bool for_write) {
  for (int64_t j = 0; j < dim; j += kFloatsPerLine) {
    if (for_write) {
      __builtin_prefetch(row + j, 1);
    } else {
      __builtin_prefetch(row + j);
    }
  }
}

// Calls f(std::integral_constant<int64_t, kDim>) with the dimension fixed at compile time for
// the common ones (rows then live in registers and the loops unroll), kDim = 0 for any other.
template <typename F>
void WithDim(int64_t dim, F&& f) {
  switch (dim) {
    case 16: return f(std::integral_constant<int64_t, 16>());
    case 32: return f(std::integral_constant<int64_t, 32>());
    case 64: return f(std::integral_constant<int64_t, 64>());
    case 128: return f(std::integral_constant<int64_t, 128>());
    default: return f(std::integral_constant<int64_t, 0>());
  }
}

// out[s] = sum of the rows of sample s's ids, for samples [begin, end).
template <int64_t kDim>
void GatherSum(const float* __restrict table, int64_t dim, const int64_t* __restrict ids,
               int64_t per_sample, int64_t begin, int64_t end, int64_t prefetch,
               float* __restrict out) {
  const int64_t d = kDim > 0 ? kDim : dim;
  const int64_t last = end * per_sample;
  for (int64_t s = begin; s < end; ++s) {
    float registers[kDim > 0 ? kDim : 1] = {};
    float* __restrict sum = kDim > 0 ? registers : out + s * d;
    if (kDim == 0) std::fill(sum, sum + d, 0.0f);
    for (int64_t j = s * per_sample; j < (s + 1) * per_sample; ++j) {
      if (prefetch > 0 && j + prefetch < last) PrefetchRow(table + ids[j + prefetch] * d, d, false);
      const float* __restrict row = table + ids[j] * d;
      for (int64_t i = 0; i < d; ++i) sum[i] += row[i];
    }
    if (kDim > 0) std::copy(sum, sum + d, out + s * d);
  }
}

// out[r] = the sum of the rows of the lookups whose sample (indices[2 j]) is r, for the lookups
// [begin, end) of a SparseTensor in row order: the gather-sum as it reads indices and values.
// Samples without lookups between two that have some come out zero.
template <int64_t kDim>
void GatherSumCoo(const float* __restrict table, int64_t dim, const int64_t* __restrict indices,
                  const int64_t* __restrict ids, int64_t begin, int64_t end, int64_t prefetch,
                  float* __restrict out) {
  const int64_t d = kDim > 0 ? kDim : dim;
  float registers[kDim > 0 ? kDim : 1] = {};
  int64_t j = begin;
  while (j < end) {
    const int64_t sample = indices[2 * j];
    float* __restrict sum = kDim > 0 ? registers : out + sample * d;
    std::fill(sum, sum + d, 0.0f);
    for (; j < end && indices[2 * j] == sample; ++j) {
      if (prefetch > 0 && j + prefetch < end) PrefetchRow(table + ids[j + prefetch] * d, d, false);
      const float* __restrict row = table + ids[j] * d;
      for (int64_t i = 0; i < d; ++i) sum[i] += row[i];
    }
    if (kDim > 0) std::copy(sum, sum + d, out + sample * d);
    const int64_t next = j < end ? indices[2 * j] : sample + 1;
    std::fill(out + (sample + 1) * d, out + next * d, 0.0f);
  }
}

struct Model {
  int64_t tables, vocab, dim;
  float* weights;       // [tables, vocab, dim]
  float* accumulators;  // [tables, vocab, dim]

  float* Table(int64_t t) const { return weights + t * vocab * dim; }
  float* Accumulator(int64_t t) const { return accumulators + t * vocab * dim; }
};

// One thread's buffers for the train step of one table. Deduplication is a counting sort of the
// lookups by id: a bit per id (fits the L2 cache for vocabularies up to a few million) gives the
// unique ids in ascending order, i.e. the rows at ascending addresses, and each id's rank. The
// gradient of a row is then summed from the activations of its samples (a batch's activations
// fit the caches) right before the row is updated, so no gradient buffer is written.
struct Scratch {
  std::vector<uint64_t> touched;   // bit per id: looked up in this batch
  std::vector<int32_t> rank_base;  // touched ids below each 64-id word
  std::vector<int64_t> unique;     // touched ids, ascending
  std::vector<int32_t> rank;       // per lookup: the index of its id in `unique`
  std::vector<int32_t> ends;       // per unique id: the end of its lookups in `samples`
  std::vector<int32_t> samples;    // per lookup, grouped by id, in lookup order within an id
  std::vector<float> activations;  // [batch, dim]
  std::vector<float> gradient;     // [dim], for dimensions not fixed at compile time

  Scratch(int64_t vocab, int64_t lookups, int64_t batch, int64_t dim)
      : touched((vocab + 63) / 64), rank_base(touched.size()), unique(lookups), rank(lookups),
        ends(lookups), samples(lookups), activations(batch * dim), gradient(dim) {}
};

// The whole batch's gather-sum, samples of all tables split evenly over the threads. With
// `indices` (a SparseTensor's, [batch * per_sample, 2]), each lookup's sample is read from them
// (GatherSumCoo); the split falls between samples, as the benchmark's rows all hold
// `per_sample` lookups.
void Forward(const Model& m, const Ids& ids, int64_t b, int64_t prefetch, float* out,
             const int64_t* indices = nullptr) {
  const int64_t batch = ids.batch, total = m.tables * batch;
#pragma omp parallel
  {
    const int64_t threads = omp_get_num_threads(), thread = omp_get_thread_num();
    const int64_t begin = total * thread / threads, end = total * (thread + 1) / threads;
    for (int64_t t = begin / batch; t < m.tables && t * batch < end; ++t) {
      const int64_t first = std::max(begin - t * batch, int64_t{0});
      const int64_t last = std::min(end - t * batch, batch);
      float* table_out = out + t * batch * m.dim;
      WithDim(m.dim, [&](auto dim) {
        if (indices == nullptr) {
          GatherSum<dim()>(m.Table(t), m.dim, ids.Of(b, t), ids.per_sample, first, last,
                           prefetch, table_out);
        } else {
          GatherSumCoo<dim()>(m.Table(t), m.dim, indices, ids.Of(b, t),
                              first * ids.per_sample, last * ids.per_sample, prefetch,
                              table_out);
        }
      });
    }
  }
}

// Gradient and Adagrad update of one table, from its activations [batch, dim] (the cotangent).
template <int64_t kDim>
void UpdateTable(const Model& m, const Ids& ids, int64_t b, int64_t t, int64_t prefetch,
                 float lr, const float* __restrict activations, Scratch& s) {
  const int64_t d = kDim > 0 ? kDim : m.dim, per_sample = ids.per_sample;
  const int64_t lookups = ids.batch * per_sample;
  const int64_t* __restrict table_ids = ids.Of(b, t);
  float* __restrict table = m.Table(t);
  float* __restrict accumulator = m.Accumulator(t);
  uint64_t* __restrict touched = s.touched.data();
  int32_t* __restrict ends = s.ends.data();

  for (int64_t j = 0; j < lookups; ++j) touched[table_ids[j] >> 6] |= 1ull << (table_ids[j] & 63);
  int64_t unique = 0;
  for (size_t w = 0; w < s.touched.size(); ++w) {
    s.rank_base[w] = static_cast<int32_t>(unique);
    for (uint64_t bits = touched[w]; bits != 0; bits &= bits - 1) {
      s.unique[unique++] = static_cast<int64_t>(w) * 64 + __builtin_ctzll(bits);
    }
  }
  std::fill(ends, ends + unique, 0);
  for (int64_t j = 0; j < lookups; ++j) {
    const int64_t id = table_ids[j], w = id >> 6;
    const int32_t r = s.rank_base[w] + __builtin_popcountll(touched[w] & ((1ull << (id & 63)) - 1));
    s.rank[j] = r;
    ++ends[r];
  }
  for (int64_t u = 1; u < unique; ++u) ends[u] += ends[u - 1];
  // Placed from the back, so each id's samples keep lookup order and the gradient sums are the
  // same whatever the thread count; ends[u] then holds the start of u's samples.
  for (int64_t sample = ids.batch - 1; sample >= 0; --sample) {
    for (int64_t j = (sample + 1) * per_sample - 1; j >= sample * per_sample; --j) {
      s.samples[--ends[s.rank[j]]] = static_cast<int32_t>(sample);
    }
  }

  for (int64_t u = 0; u < unique; ++u) {
    if (prefetch > 0 && u + prefetch < unique) {
      PrefetchRow(table + s.unique[u + prefetch] * d, d, true);
      PrefetchRow(accumulator + s.unique[u + prefetch] * d, d, true);
    }
    float registers[kDim > 0 ? kDim : 1];
    float* __restrict g = kDim > 0 ? registers : s.gradient.data();
    const int64_t begin = ends[u], end = u + 1 < unique ? ends[u + 1] : lookups;
    std::copy(activations + s.samples[begin] * d, activations + (s.samples[begin] + 1) * d, g);
    for (int64_t k = begin + 1; k < end; ++k) {
      const float* __restrict cotangent = activations + s.samples[k] * d;
      for (int64_t i = 0; i < d; ++i) g[i] += cotangent[i];
    }
    float* __restrict w = table + s.unique[u] * d;
    float* __restrict acc = accumulator + s.unique[u] * d;
    for (int64_t i = 0; i < d; ++i) {
      const float a = acc[i] + g[i] * g[i];
      acc[i] = a;
      w[i] -= lr * g[i] / std::sqrt(a);
    }
  }
  std::fill(s.touched.begin(), s.touched.end(), 0);
}

// The train step fused per table: each table's gather-sum, then right away its update, which
// finds the table's touched rows still in the caches. Tables are the unit of parallelism: each
// is gathered, deduplicated and updated by one thread, so no two threads write a row (with
// fewer tables than threads, the extra threads idle).
void TrainFused(const Model& m, const Ids& ids, int64_t b, int64_t prefetch, float lr,
                std::vector<Scratch>& scratch) {
#pragma omp parallel for schedule(dynamic, 1)
  for (int64_t t = 0; t < m.tables; ++t) {
    WithDim(m.dim, [&](auto dim) {
      Scratch& s = scratch[omp_get_thread_num()];
      GatherSum<dim()>(m.Table(t), m.dim, ids.Of(b, t), ids.per_sample, 0, ids.batch, prefetch,
                       s.activations.data());
      UpdateTable<dim()>(m, ids, b, t, prefetch, lr, s.activations.data(), s);
    });
  }
}

// The same step in the order an embedding API's training step has: every table's gather-sum
// first (the model needs all activations before any gradient exists), then each table's
// update, by table as in TrainFused. `activations`: [tables, batch, dim]; `indices`: as
// Forward's.
void TrainInApiOrder(const Model& m, const Ids& ids, int64_t b, int64_t prefetch, float lr,
                     std::vector<Scratch>& scratch, float* activations,
                     const int64_t* indices = nullptr) {
  Forward(m, ids, b, prefetch, activations, indices);
#pragma omp parallel for schedule(dynamic, 1)
  for (int64_t t = 0; t < m.tables; ++t) {
    WithDim(m.dim, [&](auto dim) {
      UpdateTable<dim()>(m, ids, b, t, prefetch, lr, activations + t * ids.batch * m.dim,
                         scratch[omp_get_thread_num()]);
    });
  }
}

// The sum of x[0, n): the STREAM read. 64 independent partial sums per thread keep enough vector
// additions in flight that their latency never limits the read (one sum would, to ~3 GB/s).
double ReadAll(const float* __restrict x, size_t n) {
  double total = 0;
#pragma omp parallel reduction(+ : total)
  {
    const size_t threads = omp_get_num_threads(), thread = omp_get_thread_num();
    const size_t begin = n * thread / threads, end = n * (thread + 1) / threads;
    float lanes[64] = {};
    size_t i = begin;
    for (; i + 64 <= end; i += 64) {
      for (int j = 0; j < 64; ++j) lanes[j] += x[i + j];
    }
    for (; i < end; ++i) lanes[0] += x[i];
    for (const float lane : lanes) total += lane;
  }
  return total;
}

// --- Timing ------------------------------------------------------------------------------------

double Seconds(const std::function<void()>& run) {
  const auto start = std::chrono::steady_clock::now();
  run();
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
}

double MedianStep(const std::function<void(int64_t)>& step, int64_t warmup, int64_t steps) {
  for (int64_t i = 0; i < warmup; ++i) step(i);
  std::vector<double> times;
  for (int64_t i = warmup; i < warmup + steps; ++i) times.push_back(Seconds([&] { step(i); }));
  std::sort(times.begin(), times.end());
  const size_t n = times.size();
  return n % 2 ? times[n / 2] : (times[n / 2 - 1] + times[n / 2]) / 2;
}

// STREAM reports the best of its repetitions: contention only ever slows a pass down.
double BestSeconds(const std::function<void()>& run, int64_t repeats) {
  double best = INFINITY;
  for (int64_t i = 0; i < repeats; ++i) best = std::min(best, Seconds(run));
  return best;
}

struct PhaseResult {
  int64_t best_prefetch = 0;
  double seconds = INFINITY;
  std::map<int64_t, double> by_prefetch;
};

PhaseResult TimePhase(const std::vector<int64_t>& distances,
                      const std::function<void(int64_t, int64_t)>& step, int64_t warmup,
                      int64_t steps) {
  PhaseResult result;
  for (const int64_t distance : distances) {
    const double seconds =
        MedianStep([&](int64_t i) { step(distance, i); }, warmup, steps);
    result.by_prefetch[distance] = seconds;
    if (seconds < result.seconds) {
      result.best_prefetch = distance;
      result.seconds = seconds;
    }
  }
  return result;
}

std::string Json(const PhaseResult& r) {
  std::ostringstream out;
  out << "{\"seconds\": " << r.seconds << ", \"best_prefetch\": " << r.best_prefetch
      << ", \"seconds_by_prefetch\": {";
  for (auto it = r.by_prefetch.begin(); it != r.by_prefetch.end(); ++it) {
    out << (it == r.by_prefetch.begin() ? "" : ", ") << '"' << it->first << "\": " << it->second;
  }
  out << "}}";
  return out.str();
}

const char* VectorIsa() {
#if defined(__AVX512F__)
  return "avx512";
#elif defined(__AVX2__)
  return "avx2";
#else
  return "baseline";
#endif
}

}  // namespace

int main(int argc, char** argv) {
  std::map<std::string, std::string> args = {
      {"threads", "1,2"}, {"prefetch", "0,8,16,32,64"}, {"steps", "10"}, {"warmup", "3"},
      {"learning-rate", "0.01"}, {"initial-accumulator", "0.1"},
      {"rounds-on-stdin", "0"}};
  for (int i = 1; i + 1 < argc; i += 2) {
    if (std::strncmp(argv[i], "--", 2) != 0) Fail(std::string("unexpected ") + argv[i]);
    args[argv[i] + 2] = argv[i + 1];
  }
  for (const char* required : {"ids", "vocab", "dim"}) {
    if (!args.count(required)) Fail(std::string("--") + required + " is required");
  }
  const Ids ids = ReadNpy(args["ids"]);
  const int64_t vocab = std::stoll(args["vocab"]), dim = std::stoll(args["dim"]);
  const std::vector<int64_t> thread_counts = ParseList(args["threads"]);
  const std::vector<int64_t> distances = ParseList(args["prefetch"]);
  const int64_t steps = std::stoll(args["steps"]), warmup = std::stoll(args["warmup"]);
  const float lr = std::stof(args["learning-rate"]);
  const float initial_accumulator = std::stof(args["initial-accumulator"]);
  for (const int64_t id : ids.values) {
    if (id < 0 || id >= vocab) Fail("id " + std::to_string(id) + " outside the vocabulary");
  }
  const int64_t max_threads = *std::max_element(thread_counts.begin(), thread_counts.end());

  const size_t floats = static_cast<size_t>(ids.tables * vocab * dim);
  const Model model{ids.tables, vocab, dim, AllocateOnHugePages(floats),
                    AllocateOnHugePages(floats)};
  // First touch in parallel; small values like the benchmark's tables.
#pragma omp parallel for num_threads(max_threads) schedule(static)
  for (size_t i = 0; i < floats; ++i) {
    model.weights[i] = static_cast<float>((i * 2654435761u) % 1000) * 1e-4f - 0.05f;
    model.accumulators[i] = initial_accumulator;
  }
  std::vector<Scratch> scratch(
      max_threads, Scratch(vocab, ids.batch * ids.per_sample, ids.batch, dim));
  std::vector<float> activations(ids.tables * ids.batch * dim);
  // The SparseTensor indices of a [batch, per_sample] batch of ids: (sample, position).
  std::vector<int64_t> indices(2 * ids.batch * ids.per_sample);
  for (int64_t j = 0; j < ids.batch * ids.per_sample; ++j) {
    indices[2 * j] = j / ids.per_sample;
    indices[2 * j + 1] = j % ids.per_sample;
  }
  // Opaque to the compiler, so the read is not optimised away and `x *= scale` stays a write.
  volatile double sink = 0;
  volatile float scale = 1.0f;

  const auto measure = [&] {
    std::ostringstream out;
    out << "{\"isa\": \"" << VectorIsa() << "\", \"huge_page_bytes\": " << HugePageBytes()
        << ", \"table_bytes\": " << floats * sizeof(float) << ", \"results\": [";
    for (size_t n = 0; n < thread_counts.size(); ++n) {
      omp_set_num_threads(static_cast<int>(thread_counts[n]));
      const PhaseResult forward = TimePhase(
          distances,
          [&](int64_t distance, int64_t i) {
            Forward(model, ids, i % ids.batches, distance, activations.data());
          },
          warmup, steps);
      const PhaseResult train = TimePhase(
          distances,
          [&](int64_t distance, int64_t i) {
            TrainFused(model, ids, i % ids.batches, distance, lr, scratch);
          },
          warmup, steps);
      const PhaseResult train_in_api_order = TimePhase(
          distances,
          [&](int64_t distance, int64_t i) {
            TrainInApiOrder(model, ids, i % ids.batches, distance, lr, scratch,
                            activations.data());
          },
          warmup, steps);
      const PhaseResult forward_sparse = TimePhase(
          distances,
          [&](int64_t distance, int64_t i) {
            Forward(model, ids, i % ids.batches, distance, activations.data(), indices.data());
          },
          warmup, steps);
      const PhaseResult train_sparse_in_api_order = TimePhase(
          distances,
          [&](int64_t distance, int64_t i) {
            TrainInApiOrder(model, ids, i % ids.batches, distance, lr, scratch,
                            activations.data(), indices.data());
          },
          warmup, steps);
      const double read = BestSeconds([&] { sink = ReadAll(model.weights, floats); }, 3);
      const double rmw = BestSeconds([&] {
        const float s = scale;
#pragma omp parallel for simd schedule(static)
        for (size_t i = 0; i < floats; ++i) model.accumulators[i] *= s;
      }, 3);
      const double bytes = static_cast<double>(floats * sizeof(float));
      out << (n ? ", " : "") << "{\"threads\": " << thread_counts[n]
          << ", \"forward\": " << Json(forward) << ", \"train\": " << Json(train)
          << ", \"train_in_api_order\": " << Json(train_in_api_order)
          << ", \"forward_sparse\": " << Json(forward_sparse)
          << ", \"train_sparse_in_api_order\": " << Json(train_sparse_in_api_order)
          << ", \"read_bytes_per_second\": " << bytes / read
          << ", \"rmw_bytes_per_second\": " << 2 * bytes / rmw << "}";
    }
    out << "]}";
    std::printf("%s\n", out.str().c_str());
    std::fflush(stdout);
  };
  if (args["rounds-on-stdin"] == "0") {
    measure();
    return 0;
  }
  // Kept alive between rounds, so that a caller alternating its own timings with this
  // program's (tools/benchmark.py's workers) compares both at the same moments, on tables
  // allocated once.
  for (std::string line; std::getline(std::cin, line);) measure();
  return 0;
}
