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

Status GroupLookupsById(const std::vector<GradientBatch>& batches, int64_t dim,
                        GradientGroups* groups) {
  groups->Reset(kLookupIdsInput);
  int64_t total = 0;
  for (size_t b = 0; b < batches.size(); ++b) {
    const Status status = ValidateCsrBatch(batches[b].csr, /*vocabulary_size=*/-1);
    if (!status.ok()) return status.WithContext(BatchContext(b));
    total += batches[b].csr.num_ids;
  }
  groups->starts.push_back(0);
  if (total == 0) return Status();

  // Global position p numbers the lookups in batch order, then lookup order; record what the
  // gradient sum needs of each one, and the largest id (which sizes the sort).
  std::vector<float>& gain_at = groups->gain_at;
  std::vector<const float*>& row_at = groups->row_at;
  gain_at.resize(total);
  row_at.resize(total);
  int64_t p = 0;
  for (size_t b = 0; b < batches.size(); ++b) {
    const CsrBatch& csr = batches[b].csr;
    for (int64_t r = 0; r < csr.num_rows(); ++r) {
      for (int64_t k = csr.row_splits[r]; k < csr.row_splits[r + 1]; ++k, ++p) {
        gain_at[p] = csr.gains[k];
        row_at[p] = batches[b].activation_gradients + r * dim;
        if (csr.ids[k] > groups->max_id) {
          groups->max_id = csr.ids[k];
          groups->max_id_batch = static_cast<int64_t>(b);
          groups->max_id_index = k;
        }
      }
    }
  }

  // Sort keys are (id, p) packed into 64 bits: sorting by the id bits alone, stably, leaves
  // each id's lookups in position order.
  const int position_bits = BitWidth(static_cast<uint64_t>(total - 1));
  const int id_bits = BitWidth(static_cast<uint64_t>(groups->max_id));
  if (position_bits + id_bits > 64) {
    return InvalidArgument(total, " lookups with ids up to ", groups->max_id,
                           " do not fit the 64-bit sort key");
  }
  std::vector<uint64_t>& keys = groups->sort_keys;
  keys.resize(total);
  p = 0;
  for (const GradientBatch& batch : batches) {
    for (int64_t k = 0; k < batch.csr.num_ids; ++k, ++p) {
      keys[p] = (static_cast<uint64_t>(batch.csr.ids[k]) << position_bits) | p;
    }
  }
  StableRadixSort(position_bits, id_bits, [](uint64_t key) { return key; }, &keys,
                  &groups->sort_scratch);

  groups->gains.resize(total);
  groups->gradient_rows.resize(total);
  const uint64_t position_mask = (uint64_t{1} << position_bits) - 1;
  for (int64_t i = 0; i < total; ++i) {
    // Each term's gain and row pointer sit at a random position of arrays larger than L1:
    // fetch them some terms ahead.
    if (i + kTermPrefetchDistance < total) {
      const uint64_t ahead = keys[i + kTermPrefetchDistance] & position_mask;
      __builtin_prefetch(&gain_at[ahead]);
      __builtin_prefetch(&row_at[ahead]);
    }
    const int64_t id = static_cast<int64_t>(keys[i] >> position_bits);
    const uint64_t position = keys[i] & position_mask;
    if (groups->unique_ids.empty() || groups->unique_ids.back() != id) {
      if (i > 0) groups->starts.push_back(i);
      groups->unique_ids.push_back(id);
    }
    groups->gains[i] = gain_at[position];
    groups->gradient_rows[i] = row_at[position];
  }
  groups->starts.push_back(total);
  return Status();
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
