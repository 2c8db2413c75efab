// Gradient grouping: GroupLookupsById over CSR batches, GroupSortedRows over already-summed row
// lists, the bound check and the per-id sums.
#include "cc/core/gradient_aggregation.h"

#include <algorithm>
#include <cstring>
#include <random>
#include <string>
#include <utility>
#include <vector>

#include "cc/core/testing.h"

namespace tf_embedding {
namespace {

// A CSR batch with its activation gradients, owning the arrays.
struct Batch {
  Batch() = default;
  Batch(std::vector<int64_t> row_splits, std::vector<int64_t> ids, std::vector<float> gains,
        std::vector<float> gradients)
      : csr{std::move(row_splits), std::move(ids), std::move(gains)},
        gradients(std::move(gradients)) {}

  GradientBatch View() const { return {csr.View(), gradients.data()}; }

  testing::CsrArrays csr;
  std::vector<float> gradients;  // [rows, dim]
};

// An id list with its rows, owning the arrays.
struct Rows {
  std::vector<int64_t> ids;
  std::vector<float> rows;  // [ids.size(), dim]

  SortedRows View() const { return {ids.data(), static_cast<int64_t>(ids.size()), rows.data()}; }
};

std::vector<GradientBatch> BatchViews(const std::vector<Batch>& batches) {
  std::vector<GradientBatch> views;
  for (const Batch& batch : batches) views.push_back(batch.View());
  return views;
}

std::vector<SortedRows> ListViews(const std::vector<Rows>& lists) {
  std::vector<SortedRows> views;
  for (const Rows& list : lists) views.push_back(list.View());
  return views;
}

// Every group's sum, concatenated.
std::vector<float> Sums(const GradientGroups& groups, int64_t dim) {
  std::vector<float> sums(groups.num_unique() * dim);
  for (int64_t u = 0; u < groups.num_unique(); ++u) SumGroup(groups, u, dim, &sums[u * dim]);
  return sums;
}

bool SameBits(const std::vector<float>& a, const std::vector<float>& b) {
  return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0;
}

TFE_TEST(GroupsLookupsByIdInBatchThenLookupOrder) {
  // dim 1: the gradient of row r is r + 1 in batch 0 and 10 * (r + 1) in batch 1.
  const std::vector<Batch> batches = {
      {{0, 2, 2, 3}, {7, 2, 7}, {1.0f, 0.5f, 2.0f}, {1, 2, 3}},
      {{0, 1, 3}, {2, 7, 0}, {1.0f, -1.0f, 4.0f}, {10, 20}},
  };
  GradientGroups groups;
  TFE_ASSERT_OK(GroupLookupsById(BatchViews(batches), 1, &groups));
  TFE_EXPECT_EQ(groups.unique_ids, (std::vector<int64_t>{0, 2, 7}));
  TFE_EXPECT_EQ(groups.starts, (std::vector<int64_t>{0, 1, 3, 6}));
  TFE_EXPECT_EQ(groups.gains, (std::vector<float>{4.0f, 0.5f, 1.0f, 1.0f, 2.0f, -1.0f}));
  // id 0: 4 * 20; id 2: 0.5 * 1 + 1 * 10; id 7: 1 * 1 + 2 * 3 - 1 * 20.
  TFE_EXPECT_EQ(Sums(groups, 1), (std::vector<float>{80.0f, 10.5f, -13.0f}));
  TFE_EXPECT_EQ(groups.max_id, 7);
  TFE_EXPECT_EQ(groups.max_id_batch, 0);
  TFE_EXPECT_EQ(groups.max_id_index, 0);
}

TFE_TEST(GroupsNoLookups) {
  const std::vector<Batch> batches = {{{0}, {}, {}, {}}, {{0, 0, 0}, {}, {}, {0, 0}}};
  GradientGroups groups;
  TFE_ASSERT_OK(GroupLookupsById(BatchViews(batches), 1, &groups));
  TFE_EXPECT_EQ(groups.num_unique(), 0);
  TFE_EXPECT_EQ(groups.starts, (std::vector<int64_t>{0}));
  TFE_EXPECT_OK(CheckIdsBelow(groups, 0));
}

TFE_TEST(GroupsLargeIds) {
  const int64_t big = int64_t{1} << 40;
  const std::vector<Batch> batches = {
      {{0, 1, 2, 3, 4}, {big + 5, 3, big + 5, int64_t{1} << 33}, {1, 1, 1, 1}, {0, 1, 2, 3}}};
  GradientGroups groups;
  TFE_ASSERT_OK(GroupLookupsById(BatchViews(batches), 1, &groups));
  TFE_EXPECT_EQ(groups.unique_ids, (std::vector<int64_t>{3, int64_t{1} << 33, big + 5}));
  TFE_EXPECT_EQ(Sums(groups, 1), (std::vector<float>{1.0f, 3.0f, 2.0f}));
}

TFE_TEST(GroupLookupsErrorsNameTheBatch) {
  GradientGroups groups;
  const Batch good = {{0, 1}, {1}, {1}, {1}};
  TFE_EXPECT_ERROR(GroupLookupsById(BatchViews({good, {{0, 2}, {0, -7}, {1, 1}, {1}}}), 1, &groups),
                   "batch 1: id -7 at ids[1] is negative");
  TFE_EXPECT_ERROR(GroupLookupsById(BatchViews({{{0, 2}, {0, 1}, {1}, {1}}}), 1, &groups),
                   "batch 0: gains has 1 elements but ids has 2");
  // Keys are (id, position): 62 + 3 bits. With gains of 1 they are (id, row): 62 + 0 bits.
  const int64_t huge = int64_t{1} << 62;
  const Batch unsortable = {{0, 5}, std::vector<int64_t>(5, huge), std::vector<float>(5, 2), {1}};
  TFE_EXPECT_ERROR(GroupLookupsById(BatchViews({unsortable}), 1, &groups),
                   "5 lookups with ids up to 4611686018427387904 do not fit the 64-bit sort key");
  const std::vector<Batch> one_row = {
      {{0, 5}, std::vector<int64_t>(5, huge), std::vector<float>(5, 1), {1}}};
  TFE_ASSERT_OK(GroupLookupsById(BatchViews(one_row), 1, &groups));
  TFE_EXPECT_EQ(groups.unique_ids, (std::vector<int64_t>{huge}));
  TFE_EXPECT_EQ(Sums(groups, 1), (std::vector<float>{5.0f}));
}

// Gains of 1 take a path of their own (keys by row, not by lookup): the same groups, terms and
// sums as a plain stable sort of the lookups by id, for batches with repeated ids within and
// across rows and batches, and empty rows.
TFE_TEST(UnitGainsGroupLikeAStableSortOfTheLookups) {
  std::mt19937 random(3);
  std::normal_distribution<float> normal;
  const int64_t dim = 4;
  std::vector<Batch> batches(3);
  for (Batch& batch : batches) {
    batch.csr.row_splits.push_back(0);
    for (int64_t r = 0; r < 50; ++r) {
      const int64_t count = random() % 6;
      for (int64_t k = 0; k < count; ++k) batch.csr.ids.push_back(random() % 40);
      batch.csr.row_splits.push_back(static_cast<int64_t>(batch.csr.ids.size()));
      for (int64_t j = 0; j < dim; ++j) batch.gradients.push_back(normal(random));
    }
    batch.csr.gains.assign(batch.csr.ids.size(), 1.0f);
  }
  // The reference: (id, gradient row) of every lookup in input order, stably sorted by id.
  std::vector<std::pair<int64_t, const float*>> terms;
  for (const Batch& batch : batches) {
    for (int64_t r = 0; r + 1 < static_cast<int64_t>(batch.csr.row_splits.size()); ++r) {
      for (int64_t k = batch.csr.row_splits[r]; k < batch.csr.row_splits[r + 1]; ++k) {
        terms.emplace_back(batch.csr.ids[k], batch.gradients.data() + r * dim);
      }
    }
  }
  std::stable_sort(terms.begin(), terms.end(),
                   [](const auto& a, const auto& b) { return a.first < b.first; });
  std::vector<int64_t> unique_ids, starts = {0};
  std::vector<const float*> rows;
  for (size_t i = 0; i < terms.size(); ++i) {
    if (i > 0 && terms[i].first != terms[i - 1].first) starts.push_back(static_cast<int64_t>(i));
    if (i == 0 || terms[i].first != terms[i - 1].first) unique_ids.push_back(terms[i].first);
    rows.push_back(terms[i].second);
  }
  starts.push_back(static_cast<int64_t>(terms.size()));

  GradientGroups groups;
  TFE_ASSERT_OK(GroupLookupsById(BatchViews(batches), dim, &groups));
  TFE_EXPECT_EQ(groups.unique_ids, unique_ids);
  TFE_EXPECT_EQ(groups.starts, starts);
  TFE_EXPECT(groups.gradient_rows == rows);
  TFE_EXPECT_EQ(groups.gains, std::vector<float>(terms.size(), 1.0f));
}

TFE_TEST(CheckIdsBelowNamesWhereTheLargestIdFirstOccurs) {
  const std::vector<Batch> batches = {{{0, 1}, {3}, {1}, {1}},
                                      {{0, 3}, {0, 9, 9}, {1, 1, 1}, {1}}};
  GradientGroups groups;
  TFE_ASSERT_OK(GroupLookupsById(BatchViews(batches), 1, &groups));
  TFE_EXPECT_OK(CheckIdsBelow(groups, 10));
  TFE_EXPECT_ERROR(CheckIdsBelow(groups, 4),
                   "batch 1: id 9 at ids[1] is out of range for vocabulary size 4");
}

TFE_TEST(MergesOneList) {
  const std::vector<Rows> lists = {{{1, 4, 9}, {1, 2, 3, 4, 5, 6}}};
  GradientGroups groups;
  TFE_ASSERT_OK(GroupSortedRows(ListViews(lists), 2, &groups));
  TFE_EXPECT_EQ(groups.unique_ids, (std::vector<int64_t>{1, 4, 9}));
  TFE_EXPECT_EQ(groups.starts, (std::vector<int64_t>{0, 1, 2, 3}));
  TFE_EXPECT_EQ(Sums(groups, 2), (std::vector<float>{1, 2, 3, 4, 5, 6}));
}

TFE_TEST(MergesOverlappingListsSummingInListOrder) {
  // dim 1. Summing in list order: for id 5, (1e8 + 1) - 1e8 rounds to 0 in float, while any
  // other order of the three terms gives 1.
  const std::vector<Rows> lists = {
      {{0, 5, 8}, {1, 1e8f, 2}},
      {{5}, {1}},
      {{2, 5, 8, 11}, {3, -1e8f, 4, 5}},
  };
  GradientGroups groups;
  TFE_ASSERT_OK(GroupSortedRows(ListViews(lists), 1, &groups));
  TFE_EXPECT_EQ(groups.unique_ids, (std::vector<int64_t>{0, 2, 5, 8, 11}));
  TFE_EXPECT_EQ(groups.starts, (std::vector<int64_t>{0, 1, 2, 5, 7, 8}));
  TFE_EXPECT_EQ(groups.gains, std::vector<float>(8, 1.0f));
  TFE_EXPECT_EQ(Sums(groups, 1), (std::vector<float>{1, 3, 0, 6, 5}));
  TFE_EXPECT_EQ(groups.max_id, 11);
  TFE_EXPECT_ERROR(CheckIdsBelow(groups, 11),
                   "batch 2: id 11 at unique_ids[3] is out of range for vocabulary size 11");
}

TFE_TEST(MergesEmptyLists) {
  const std::vector<Rows> lists = {{{}, {}}, {{3}, {7}}, {{}, {}}};
  GradientGroups groups;
  TFE_ASSERT_OK(GroupSortedRows(ListViews(lists), 1, &groups));
  TFE_EXPECT_EQ(groups.unique_ids, (std::vector<int64_t>{3}));
  TFE_EXPECT_EQ(Sums(groups, 1), (std::vector<float>{7}));
  TFE_ASSERT_OK(GroupSortedRows(ListViews(std::vector<Rows>{{{}, {}}}), 1, &groups));
  TFE_EXPECT_EQ(groups.num_unique(), 0);
  TFE_EXPECT_EQ(groups.starts, (std::vector<int64_t>{0}));
}

TFE_TEST(MergeErrorsNameTheList) {
  GradientGroups groups;
  const Rows good = {{1, 2}, {0, 0}};
  TFE_EXPECT_ERROR(GroupSortedRows(ListViews({good, {{4, 3}, {0, 0}}}), 1, &groups),
                   "batch 1: unique_ids must be strictly ascending, but unique_ids[1] = 3 <= "
                   "unique_ids[0] = 4");
  TFE_EXPECT_ERROR(GroupSortedRows(ListViews({{{1, 2, 2}, {0, 0, 0}}}), 1, &groups),
                   "batch 0: unique_ids must be strictly ascending, but unique_ids[2] = 2 <= "
                   "unique_ids[1] = 2");
  TFE_EXPECT_ERROR(GroupSortedRows(ListViews({good, good, {{-1, 2}, {0, 0}}}), 1, &groups),
                   "batch 2: id -1 at unique_ids[0] is negative");
}

// The sharded engine used to feed summed rows to the CSR path as a batch of one lookup per row
// with gain 1; GroupSortedRows must give that path's groups and bits.
TFE_TEST(MergedRowsSumLikeTheEquivalentCsrBatches) {
  std::mt19937 random(5);
  const int64_t dim = 16;
  std::vector<Rows> lists(4);
  std::vector<Batch> batches;
  for (Rows& list : lists) {
    for (int64_t id = 0; id < 300; ++id) {
      if (random() % 3 != 0) continue;
      list.ids.push_back(id);
      for (int64_t j = 0; j < dim; ++j) {
        list.rows.push_back(std::normal_distribution<float>()(random));
      }
    }
    Batch batch;
    for (size_t k = 0; k <= list.ids.size(); ++k) batch.csr.row_splits.push_back(k);
    batch.csr.ids = list.ids;
    batch.csr.gains.assign(list.ids.size(), 1.0f);
    batch.gradients = list.rows;
    batches.push_back(batch);
  }
  GradientGroups merged, grouped;
  TFE_ASSERT_OK(GroupSortedRows(ListViews(lists), dim, &merged));
  TFE_ASSERT_OK(GroupLookupsById(BatchViews(batches), dim, &grouped));
  TFE_EXPECT_EQ(merged.unique_ids, grouped.unique_ids);
  TFE_EXPECT_EQ(merged.starts, grouped.starts);
  TFE_EXPECT(SameBits(Sums(merged, dim), Sums(grouped, dim)));
}

// Kernels group batch after batch into one object: what an earlier grouping (a larger batch, a
// failed one, the other kind) left in it must not show in the next.
TFE_TEST(GroupingIntoAReusedObjectGivesWhatAFreshOneGives) {
  std::mt19937 random(11);
  const int64_t dim = 3;
  const auto random_batch = [&](int64_t rows, int64_t vocabulary) {
    Batch batch;
    batch.csr.row_splits.push_back(0);
    for (int64_t r = 0; r < rows; ++r) {
      for (int64_t k = random() % 4; k > 0; --k) {
        batch.csr.ids.push_back(static_cast<int64_t>(random() % vocabulary));
        batch.csr.gains.push_back(std::normal_distribution<float>()(random));
      }
      batch.csr.row_splits.push_back(static_cast<int64_t>(batch.csr.ids.size()));
    }
    for (int64_t j = 0; j < rows * dim; ++j) {
      batch.gradients.push_back(std::normal_distribution<float>()(random));
    }
    return batch;
  };
  const std::vector<Batch> large = {random_batch(200, 1 << 20), random_batch(50, 1000)};
  const std::vector<Batch> small = {random_batch(7, 30)};
  const std::vector<Rows> lists = {{{2, 5}, {1, 2, 3, 4, 5, 6}}};
  GradientGroups reused;
  TFE_ASSERT_OK(GroupLookupsById(BatchViews(large), dim, &reused));
  TFE_EXPECT(!GroupLookupsById(BatchViews({{{0, 1}, {-1}, {1}, {0, 0, 0}}}), dim, &reused).ok());
  TFE_ASSERT_OK(GroupSortedRows(ListViews(lists), 2, &reused));
  TFE_ASSERT_OK(GroupLookupsById(BatchViews(small), dim, &reused));
  GradientGroups fresh;
  TFE_ASSERT_OK(GroupLookupsById(BatchViews(small), dim, &fresh));
  TFE_EXPECT_EQ(reused.unique_ids, fresh.unique_ids);
  TFE_EXPECT_EQ(reused.starts, fresh.starts);
  TFE_EXPECT_EQ(reused.gains, fresh.gains);
  TFE_EXPECT_EQ(reused.gradient_rows, fresh.gradient_rows);
  TFE_EXPECT_EQ(reused.max_id, fresh.max_id);
  TFE_EXPECT_EQ(reused.max_id_batch, fresh.max_id_batch);
  TFE_EXPECT_EQ(reused.max_id_index, fresh.max_id_index);
  TFE_EXPECT_EQ(std::string(reused.ids_input), std::string(fresh.ids_input));
  // And the other way: a list merge after lookups.
  TFE_ASSERT_OK(GroupSortedRows(ListViews(lists), 2, &reused));
  TFE_ASSERT_OK(GroupSortedRows(ListViews(lists), 2, &fresh));
  TFE_EXPECT_EQ(reused.unique_ids, fresh.unique_ids);
  TFE_EXPECT_EQ(reused.starts, fresh.starts);
  TFE_EXPECT_EQ(reused.gains, fresh.gains);
  TFE_EXPECT_EQ(reused.gradient_rows, fresh.gradient_rows);
  TFE_EXPECT_EQ(reused.max_id, fresh.max_id);
  TFE_EXPECT_EQ(std::string(reused.ids_input), std::string("unique_ids"));
}

TFE_TEST(SumGroupHandlesEveryDimension) {
  // The specialised dimensions and others: sum of gain * row in order.
  for (int64_t dim : {1, 3, 8, 16, 17, 32, 64, 128, 130}) {
    std::vector<float> gradients(2 * dim);
    for (int64_t j = 0; j < 2 * dim; ++j) gradients[j] = static_cast<float>(j % 7) - 3.0f;
    const std::vector<Batch> batches = {{{0, 2, 3}, {4, 4, 4}, {0.5f, 2.0f, -1.0f}, gradients}};
    GradientGroups groups;
    TFE_ASSERT_OK(GroupLookupsById(BatchViews(batches), dim, &groups));
    std::vector<float> expected(dim);
    for (int64_t j = 0; j < dim; ++j) {
      expected[j] = 0.0f + 0.5f * gradients[j] + 2.0f * gradients[j] - gradients[dim + j];
    }
    TFE_EXPECT_EQ(Sums(groups, dim), expected);
  }
}

}  // namespace
}  // namespace tf_embedding

int main() { return tf_embedding::testing::RunAllTests(); }
