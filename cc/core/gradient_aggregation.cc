#include "cc/core/gradient_aggregation.h"

#include <algorithm>

#include "cc/core/errors.h"
#include "cc/core/radix_sort.h"

namespace tf_embedding {
namespace {

// The input names the groups' messages use for the ids: a CSR batch's, and a SortedRows list's.
constexpr char kLookupIdsInput[] = "ids";
constexpr char kSortedIdsInput[] = "unique_ids";

// How many sorted terms ahead GroupLookupsById's last pass prefetches its random reads.
constexpr int64_t kTermPrefetchDistance = 16;

// Checks that a list's ids are non-negative and strictly ascending (hence distinct).
Status ValidateSortedIds(const SortedRows& list) {
  if (list.num_ids > 0 && list.ids[0] < 0) {
    return Status::Error(
        IdOutOfRange(list.ids[0], ElementName(kSortedIdsInput, 0), /*vocabulary_size=*/-1));
  }
  for (int64_t k = 1; k < list.num_ids; ++k) {
    if (list.ids[k] <= list.ids[k - 1]) {
      return InvalidArgument(kSortedIdsInput, " must be strictly ascending, but ",
                             ElementName(kSortedIdsInput, k), " = ", list.ids[k], " <= ",
                             ElementName(kSortedIdsInput, k - 1), " = ", list.ids[k - 1]);
    }
  }
  return Status();
}

}  // namespace

void GradientGroups::Reset(const char* ids_input_name) {
  unique_ids.clear();
  starts.clear();
  gains.clear();
  gradient_rows.clear();
  max_id = -1;
  max_id_batch = 0;
  max_id_index = 0;
  ids_input = ids_input_name;
}

namespace {

// The groups from the sorted keys: each key is an id above `low_bits` bits that locate its term,
// term(low) gives the term's gain and gradient row, and prefetch(low) is called some keys ahead
// (the terms' data sit at random places).
template <typename Key, typename Term, typename Prefetch>
void CollectGroups(const std::vector<Key>& keys, int low_bits, Term term, Prefetch prefetch,
                   GradientGroups* groups) {
  const int64_t total = static_cast<int64_t>(keys.size());
  groups->gains.resize(total);
  groups->gradient_rows.resize(total);
  const Key low_mask = static_cast<Key>((uint64_t{1} << low_bits) - 1);
  for (int64_t i = 0; i < total; ++i) {
    if (i + kTermPrefetchDistance < total) prefetch(keys[i + kTermPrefetchDistance] & low_mask);
    const int64_t id = static_cast<int64_t>(keys[i] >> low_bits);
    if (groups->unique_ids.empty() || groups->unique_ids.back() != id) {
      if (i > 0) groups->starts.push_back(i);
      groups->unique_ids.push_back(id);
    }
    term(keys[i] & low_mask, &groups->gains[i], &groups->gradient_rows[i]);
  }
  groups->starts.push_back(total);
}

// GroupLookupsById when every gain is 1: a term is then its activation-gradient row alone, so
// the keys are (id, row), rows numbered across the batches. Sorting them by id stably leaves each
// id's lookups in input order, but for lookups of one id in one row, whose terms are equal. The
// terms' gradient rows come from a table of the batches' rows, small enough for the L1 or L2
// cache, where the general path reads a random entry of per-lookup arrays.
// `total` and `total_rows` count the batches' lookups and rows. REQUIRES: row_bits + id_bits fit
// a Key.
template <typename Key>
void GroupUnitGainLookupsByRow(const std::vector<GradientBatch>& batches, int64_t dim,
                               int64_t total, int64_t total_rows, int row_bits, int id_bits,
                               std::vector<Key>* keys, std::vector<Key>* scratch,
                               GradientGroups* groups) {
  std::vector<const float*>& row_at = groups->row_at;
  row_at.resize(total_rows);
  keys->resize(total);
  Key row = 0;
  int64_t p = 0;
  for (const GradientBatch& batch : batches) {
    const CsrBatch& csr = batch.csr;
    for (int64_t r = 0; r < csr.num_rows(); ++r, ++row) {
      row_at[row] = batch.activation_gradients + r * dim;
      for (int64_t k = csr.row_splits[r]; k < csr.row_splits[r + 1]; ++k, ++p) {
        (*keys)[p] = (static_cast<Key>(csr.ids[k]) << row_bits) | row;
      }
    }
  }
  StableRadixSort(row_bits, id_bits, [](Key key) { return static_cast<uint64_t>(key); }, keys,
                  scratch);
  CollectGroups(
      *keys, row_bits,
      [&](Key row, float* gain, const float** gradient_row) {
        *gain = 1.0f;
        *gradient_row = row_at[row];
      },
      [](Key) {}, groups);
}

// Records the batches' largest id in `groups` (it sizes the sort) and returns whether every
// gain is 1 (the sum combiner without weights, the common case).
bool RecordMaxIdAndCheckUnitGains(const std::vector<GradientBatch>& batches,
                                  GradientGroups* groups) {
  bool unit_gains = true;
  for (size_t b = 0; b < batches.size(); ++b) {
    const CsrBatch& csr = batches[b].csr;
    for (int64_t k = 0; k < csr.num_ids; ++k) {
      unit_gains &= csr.gains[k] == 1.0f;
      if (csr.ids[k] > groups->max_id) {
        groups->max_id = csr.ids[k];
        groups->max_id_batch = static_cast<int64_t>(b);
        groups->max_id_index = k;
      }
    }
  }
  return unit_gains;
}

// GroupLookupsById for any gains: the keys are (id, p), p numbering the `total` lookups in
// batch order, then lookup order, and each lookup's gain and gradient row are recorded by
// position.
Status GroupLookupsByPosition(const std::vector<GradientBatch>& batches, int64_t dim,
                              int64_t total, int id_bits, GradientGroups* groups) {
  const int position_bits = BitWidth(static_cast<uint64_t>(total - 1));
  if (position_bits + id_bits > 64) {
    return InvalidArgument(total, " lookups with ids up to ", groups->max_id,
                           " do not fit the 64-bit sort key");
  }
  std::vector<uint64_t>& keys = groups->sort_keys;
  keys.resize(total);
  std::vector<float>& gain_at = groups->gain_at;
  std::vector<const float*>& row_at = groups->row_at;
  gain_at.resize(total);
  row_at.resize(total);
  int64_t p = 0;
  for (const GradientBatch& batch : batches) {
    const CsrBatch& csr = batch.csr;
    for (int64_t r = 0; r < csr.num_rows(); ++r) {
      for (int64_t k = csr.row_splits[r]; k < csr.row_splits[r + 1]; ++k, ++p) {
        gain_at[p] = csr.gains[k];
        row_at[p] = batch.activation_gradients + r * dim;
        keys[p] = (static_cast<uint64_t>(csr.ids[k]) << position_bits) | p;
      }
    }
  }
  StableRadixSort(position_bits, id_bits, [](uint64_t key) { return key; }, &keys,
                  &groups->sort_scratch);
  CollectGroups(
      keys, position_bits,
      [&](uint64_t position, float* gain, const float** gradient_row) {
        *gain = gain_at[position];
        *gradient_row = row_at[position];
      },
      // Each term's gain and row pointer sit at a random position of arrays larger than L1.
      [&](uint64_t position) {
        __builtin_prefetch(&gain_at[position]);
        __builtin_prefetch(&row_at[position]);
      },
      groups);
  return Status();
}

}  // namespace

Status GroupLookupsById(const std::vector<GradientBatch>& batches, int64_t dim,
                        GradientGroups* groups) {
  groups->Reset(kLookupIdsInput);
  int64_t total = 0, total_rows = 0;
  for (size_t b = 0; b < batches.size(); ++b) {
    const Status status = ValidateCsrBatch(batches[b].csr, /*vocabulary_size=*/-1);
    if (!status.ok()) return status.WithContext(BatchContext(b));
    total += batches[b].csr.num_ids;
    total_rows += batches[b].csr.num_rows();
  }
  groups->starts.push_back(0);
  if (total == 0) return Status();

  const bool unit_gains = RecordMaxIdAndCheckUnitGains(batches, groups);
  const int id_bits = BitWidth(static_cast<uint64_t>(groups->max_id));

  // With every gain 1, the keys are (id, row): 32 bits wide when they fit, which halves the
  // sort's memory traffic (a 4096-row batch of a 1M-row table needs 12 + 20 bits).
  const int row_bits = BitWidth(static_cast<uint64_t>(std::max<int64_t>(total_rows - 1, 0)));
  if (unit_gains && row_bits + id_bits <= 32) {
    GroupUnitGainLookupsByRow(batches, dim, total, total_rows, row_bits, id_bits,
                              &groups->sort_keys32, &groups->sort_scratch32, groups);
    return Status();
  }
  if (unit_gains && row_bits + id_bits <= 64) {
    GroupUnitGainLookupsByRow(batches, dim, total, total_rows, row_bits, id_bits,
                              &groups->sort_keys, &groups->sort_scratch, groups);
    return Status();
  }
  return GroupLookupsByPosition(batches, dim, total, id_bits, groups);
}

Status GroupSortedRows(const std::vector<SortedRows>& lists, int64_t dim,
                       GradientGroups* groups) {
  groups->Reset(kSortedIdsInput);
  int64_t total = 0;
  for (size_t b = 0; b < lists.size(); ++b) {
    const SortedRows& list = lists[b];
    const Status status = ValidateSortedIds(list);
    if (!status.ok()) return status.WithContext(BatchContext(b));
    total += list.num_ids;
    // A list's largest id is its last; the first list holding the overall largest reports it.
    if (list.num_ids > 0 && list.ids[list.num_ids - 1] > groups->max_id) {
      groups->max_id = list.ids[list.num_ids - 1];
      groups->max_id_batch = static_cast<int64_t>(b);
      groups->max_id_index = list.num_ids - 1;
    }
  }
  groups->gains.assign(total, 1.0f);
  groups->gradient_rows.reserve(total);
  groups->starts.push_back(0);
  // next[b]: the first entry of list b not merged yet. Each round takes the smallest id among the
  // lists' heads, then that id's row from every list that has it, in list order.
  std::vector<int64_t> next(lists.size(), 0);
  for (int64_t merged = 0; merged < total;) {
    int64_t id = -1;
    for (size_t b = 0; b < lists.size(); ++b) {
      if (next[b] < lists[b].num_ids && (id < 0 || lists[b].ids[next[b]] < id)) {
        id = lists[b].ids[next[b]];
      }
    }
    groups->unique_ids.push_back(id);
    for (size_t b = 0; b < lists.size(); ++b) {
      if (next[b] < lists[b].num_ids && lists[b].ids[next[b]] == id) {
        groups->gradient_rows.push_back(lists[b].rows + next[b] * dim);
        ++next[b];
        ++merged;
      }
    }
    groups->starts.push_back(merged);
  }
  return Status();
}

Status CheckIdsBelow(const GradientGroups& groups, int64_t vocabulary_size) {
  if (groups.max_id < vocabulary_size) return Status();
  return Status::Error(IdOutOfRange(groups.max_id,
                                    ElementName(groups.ids_input, groups.max_id_index),
                                    vocabulary_size))
      .WithContext(BatchContext(groups.max_id_batch));
}

void SumGroup(const GradientGroups& groups, int64_t u, int64_t dim, float* out) {
  switch (dim) {
    case 8: return SumGroupInline<8>(groups, u, dim, out);
    case 16: return SumGroupInline<16>(groups, u, dim, out);
    case 32: return SumGroupInline<32>(groups, u, dim, out);
    case 64: return SumGroupInline<64>(groups, u, dim, out);
    case 128: return SumGroupInline<128>(groups, u, dim, out);
    default: return SumGroupInline<0>(groups, u, dim, out);
  }
}

}  // namespace tf_embedding
