// The optimizer rules against values computed by hand (inputs chosen so that every step is exact
// in float), the knobs every rule shares, the row loops, and the attr declarations built from
// the rules' descriptions.
#include "cc/core/optimizers.h"

#include <array>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <random>
#include <set>
#include <string>
#include <type_traits>
#include <vector>

#include "cc/core/errors.h"
#include "cc/core/row_updates.h"
#include "cc/core/simd_dispatch.h"
#include "cc/core/testing.h"

namespace tf_embedding {
namespace {

// One element through UpdateRow: returns the new weight, updates `slots` in place.
template <typename Rule>
float Step(const Rule& rule, float lr, float g, float w,
           std::array<float, Rule::kNumSlots>* slots = nullptr,
           const CommonUpdateParams& common = {}) {
  std::array<float, Rule::kNumSlots> no_slots{};
  std::array<float, Rule::kNumSlots>& values = slots != nullptr ? *slots : no_slots;
  std::array<float*, Rule::kNumSlots> rows;
  for (int k = 0; k < Rule::kNumSlots; ++k) rows[k] = &values[k];
  UpdateRow(rule, common, lr, &g, 1, &w, rows);
  return w;
}

TFE_TEST(Sgd) { TFE_EXPECT_EQ(Step(SgdRule{}, 0.5f, 0.5f, 1.0f), 0.75f); }

TFE_TEST(Adagrad) {
  // a = 0.75 + 0.5^2 = 1; w = 1 - 0.5 * 0.5 / sqrt(1).
  std::array<float, 1> slots = {0.75f};
  TFE_EXPECT_EQ(Step(AdagradRule{}, 0.5f, 0.5f, 1.0f, &slots), 0.75f);
  TFE_EXPECT_EQ(slots[0], 1.0f);
}

TFE_TEST(AdagradMomentum) {
  AdagradMomentumRule rule;
  rule.momentum = 0.5f;
  rule.epsilon = 0.0f;
  // a = 0.75 + 0.25 = 1; scaled = 0.5 / sqrt(1); m = 0.5 * 3 + 0.5 = 2; w = 1 - 0.5 * 2.
  std::array<float, 2> slots = {0.75f, 3.0f};
  TFE_EXPECT_EQ(Step(rule, 0.5f, 0.5f, 1.0f, &slots), 0.0f);
  TFE_EXPECT_EQ(slots, (std::array<float, 2>{1.0f, 2.0f}));
  // Nesterov: w = 1 - 0.5 * (0.5 * 2 + 0.5).
  rule.use_nesterov = true;
  slots = {0.75f, 3.0f};
  TFE_EXPECT_EQ(Step(rule, 0.5f, 0.5f, 1.0f, &slots), 0.25f);
  // beta2 < 1 averages: a = 0.5 * 1.75 + 0.5 * 0.25 = 1.
  rule.use_nesterov = false;
  rule.beta2 = 0.5f;
  slots = {1.75f, 3.0f};
  TFE_EXPECT_EQ(Step(rule, 0.5f, 0.5f, 1.0f, &slots), 0.0f);
  TFE_EXPECT_EQ(slots[0], 1.0f);
  // exponent 4: a = 15.75 + 0.25 = 16, 16^(-1/4) = 0.5; m = 0 * m + 0.25; w = 1 - 0.5 * 0.25.
  rule = AdagradMomentumRule{};
  rule.epsilon = 0.0f;
  rule.exponent = 4.0f;
  slots = {15.75f, 0.0f};
  TFE_EXPECT_EQ(Step(rule, 0.5f, 0.5f, 1.0f, &slots), 0.875f);
  TFE_EXPECT_EQ(slots, (std::array<float, 2>{16.0f, 0.25f}));
}

TFE_TEST(Adam) {
  AdamRule rule;
  rule.beta_1 = 0.5f;
  rule.beta_2 = 0.5f;
  rule.epsilon = 0.5f;
  // m = 0.5 * 0 + 0.5 * 1; v = 0.5 * 0.5 + 0.5 * 1 = 0.75; w = 1 - 0.5 * m / sqrt(v + 0.25).
  std::array<float, 2> slots = {0.0f, 0.5f};
  TFE_EXPECT_EQ(Step(rule, 0.5f, 1.0f, 1.0f, &slots), 0.75f);
  TFE_EXPECT_EQ(slots, (std::array<float, 2>{0.5f, 0.75f}));
  // Epsilon outside the root, beta_2 = 0: m = 0.5 * 0.5 = 0.25; v = 0.5^2 = 0.25;
  // w = 1 - 0.5 * 0.25 / (sqrt(0.25) + 0.5).
  rule.sum_inside_sqrt = false;
  rule.beta_2 = 0.0f;
  slots = {0.0f, 0.0f};
  TFE_EXPECT_EQ(Step(rule, 0.5f, 0.5f, 1.0f, &slots), 0.875f);
  TFE_EXPECT_EQ(slots, (std::array<float, 2>{0.25f, 0.25f}));
  TFE_EXPECT(!AdamRule{}.UpdatesUntouchedRows());
  rule.lazy_adam = false;
  TFE_EXPECT(rule.UpdatesUntouchedRows());
}

TFE_TEST(Ftrl) {
  // a: 0 -> 1, p = sqrt(a): dp = 1; l = 0 + 1 - 1 * 0.25 / 0.5 = 0.5.
  std::array<float, 2> slots = {0.0f, 0.0f};
  FtrlRule rule;
  // w = -l / ((1 + 0) / 0.5 + 0) = -0.25.
  TFE_EXPECT_EQ(Step(rule, 0.5f, 1.0f, 0.25f, &slots), -0.25f);
  TFE_EXPECT_EQ(slots, (std::array<float, 2>{1.0f, 0.5f}));
  // l1 = 0.25: numerator = clip(0.5, -0.25, 0.25) - 0.5 = -0.25, over 2.
  rule.l1_regularization_strength = 0.25f;
  slots = {0.0f, 0.0f};
  TFE_EXPECT_EQ(Step(rule, 0.5f, 1.0f, 0.25f, &slots), -0.125f);
  // l2 = 1, beta = 2: denominator (1 + 2) / 0.5 + 2 = 8; numerator -0.5.
  rule = FtrlRule{};
  rule.l2_regularization_strength = 1.0f;
  rule.beta = 2.0f;
  slots = {0.0f, 0.0f};
  TFE_EXPECT_EQ(Step(rule, 0.5f, 1.0f, 0.25f, &slots), -0.0625f);
  // Linear times lr: l = 0 + 0.5 * 1 - 1 * 0.25 = 0.25; w = -0.25 / (1 + 0 + 0).
  rule = FtrlRule{};
  rule.multiply_linear_by_learning_rate = true;
  slots = {0.0f, 0.0f};
  TFE_EXPECT_EQ(Step(rule, 0.5f, 1.0f, 0.25f, &slots), -0.25f);
  TFE_EXPECT_EQ(slots, (std::array<float, 2>{1.0f, 0.25f}));
  // Power -0.25 (pow): a: 0 -> 16, p = a^0.25 = 2, dp = 2; l = 4 - 2 * 0.25 / 0.5 = 3;
  // w = -3 / (2 / 0.5).
  rule = FtrlRule{};
  rule.learning_rate_power = -0.25f;
  slots = {0.0f, 0.0f};
  TFE_EXPECT_EQ(Step(rule, 0.5f, 4.0f, 0.25f, &slots), -0.75f);
  TFE_EXPECT_EQ(slots, (std::array<float, 2>{16.0f, 3.0f}));
}

TFE_TEST(ProximalAdagrad) {
  // a = 0.75 + 0.25 = 1, rate = 0.5 / sqrt(1); prox = 1 - 0.5 * 0.5 = 0.75; no l1, l2: w = prox.
  ProximalAdagradRule rule;
  std::array<float, 1> slots = {0.75f};
  TFE_EXPECT_EQ(Step(rule, 0.5f, 0.5f, 1.0f, &slots), 0.75f);
  TFE_EXPECT_EQ(slots[0], 1.0f);
  // l2 = 2: prox / (1 + 2 * 0.5).
  rule.l2_regularization_strength = 2.0f;
  slots = {0.75f};
  TFE_EXPECT_EQ(Step(rule, 0.5f, 0.5f, 1.0f, &slots), 0.375f);
  // l1 = 0.5: sign(prox) * (|prox| - 0.5 * 0.5) / 2, on both sides of zero.
  rule.l1_regularization_strength = 0.5f;
  slots = {0.75f};
  TFE_EXPECT_EQ(Step(rule, 0.5f, 0.5f, 1.0f, &slots), 0.25f);
  slots = {0.75f};
  TFE_EXPECT_EQ(Step(rule, 0.5f, -0.5f, -1.0f, &slots), -0.25f);
  // l1 = 2: |prox| <= rate * l1 shrinks the weight to 0.
  rule.l1_regularization_strength = 2.0f;
  slots = {0.75f};
  TFE_EXPECT_EQ(Step(rule, 0.5f, 0.5f, 1.0f, &slots), 0.0f);
  // A NaN weight stays NaN (the shrinkage does not zero it), with l1 and without.
  slots = {0.75f};
  TFE_EXPECT(std::isnan(Step(rule, 0.5f, 0.5f, std::nanf(""), &slots)));
  slots = {0.75f};
  TFE_EXPECT(std::isnan(Step(ProximalAdagradRule{}, 0.5f, 0.5f, std::nanf(""), &slots)));
}

TFE_TEST(Momentum) {
  MomentumRule rule;
  rule.momentum = 0.5f;
  // m = 3 * 0.5 + 0.5 = 2; w = 1 - 2 * 0.5.
  std::array<float, 1> slots = {3.0f};
  TFE_EXPECT_EQ(Step(rule, 0.5f, 0.5f, 1.0f, &slots), 0.0f);
  TFE_EXPECT_EQ(slots[0], 2.0f);
  // Nesterov: w = 1 - (0.5 * 0.5 + 2 * 0.5 * 0.5).
  rule.use_nesterov = true;
  slots = {3.0f};
  TFE_EXPECT_EQ(Step(rule, 0.5f, 0.5f, 1.0f, &slots), 0.25f);
  TFE_EXPECT_EQ(slots[0], 2.0f);
}

TFE_TEST(RmsProp) {
  RmsPropRule rule;
  rule.rho = 0.5f;
  rule.momentum = 0.5f;
  rule.epsilon = 0.25f;
  // ms = 0.5 + (1 - 0.5) * 0.5 = 0.75; mom = 1 * 0.5 + 1 * 0.5 / sqrt(1); w = 1 - mom.
  std::array<float, 2> slots = {0.5f, 1.0f};
  TFE_EXPECT_EQ(Step(rule, 0.5f, 1.0f, 1.0f, &slots), 0.0f);
  TFE_EXPECT_EQ(slots, (std::array<float, 2>{0.75f, 1.0f}));
}

TFE_TEST(ProximalYogi) {
  ProximalYogiRule rule;
  rule.beta1 = 0.5f;
  rule.beta2 = 0.5f;
  rule.epsilon = 0.5f;
  // m = 0 * 0.5 + 1 * 0.5; g^2 = 1 > v: v = 0.5 + 0.5 * 1 * 1 = 1; rate = 0.75 / (1 + 0.5);
  // w = 1 - 0.5 * 0.5.
  std::array<float, 2> slots = {0.5f, 0.0f};
  TFE_EXPECT_EQ(Step(rule, 0.75f, 1.0f, 1.0f, &slots), 0.75f);
  TFE_EXPECT_EQ(slots, (std::array<float, 2>{1.0f, 0.5f}));
  // g^2 < v lowers v additively: v = 4.5 - 0.5 * 1 = 4; rate = 1.25 / (2 + 0.5) = 0.5.
  slots = {4.5f, 0.0f};
  TFE_EXPECT_EQ(Step(rule, 1.25f, 1.0f, 1.0f, &slots), 0.75f);
  TFE_EXPECT_EQ(slots, (std::array<float, 2>{4.0f, 0.5f}));
  // g^2 == v leaves v as it is.
  slots = {1.0f, 0.0f};
  Step(rule, 1.25f, 1.0f, 1.0f, &slots);
  TFE_EXPECT_EQ(slots[0], 1.0f);
  // l2 = 2: 0.75 / (1 + 2 * 0.5).
  rule.l2_regularization_strength = 2.0f;
  slots = {4.5f, 0.0f};
  TFE_EXPECT_EQ(Step(rule, 1.25f, 1.0f, 1.0f, &slots), 0.375f);
  // l1 = 0.5: b = -0.75, c = 0.25: (0.25 * -1 + 0.75) / 2; mirrored for a negative weight.
  rule.l1_regularization_strength = 0.5f;
  slots = {4.5f, 0.0f};
  TFE_EXPECT_EQ(Step(rule, 1.25f, 1.0f, 1.0f, &slots), 0.25f);
  slots = {4.5f, 0.0f};
  TFE_EXPECT_EQ(Step(rule, 1.25f, -1.0f, -1.0f, &slots), -0.25f);
  // l1 = 2: |b| <= c = 1 shrinks the weight to 0.
  rule.l1_regularization_strength = 2.0f;
  slots = {4.5f, 0.0f};
  TFE_EXPECT_EQ(Step(rule, 1.25f, 1.0f, 1.0f, &slots), 0.0f);
  // A NaN weight or gradient stays NaN (the proximal step does not zero it).
  slots = {4.5f, 0.0f};
  TFE_EXPECT(std::isnan(Step(rule, 1.25f, 1.0f, std::nanf(""), &slots)));
  slots = {4.5f, 0.0f};
  TFE_EXPECT(std::isnan(Step(ProximalYogiRule{}, 1.25f, std::nanf(""), 1.0f, &slots)));
}

TFE_TEST(CommonKnobsClipDecayAndClip) {
  CommonUpdateParams common;
  common.clip_gradient_max = 0.25f;
  // g = min(1, 0.25); w = 1 - 0.5 * 0.25.
  TFE_EXPECT_EQ(Step(SgdRule{}, 0.5f, 1.0f, 1.0f, nullptr, common), 0.875f);
  common = CommonUpdateParams{};
  common.clip_gradient_min = -0.5f;
  TFE_EXPECT_EQ(Step(SgdRule{}, 0.5f, -4.0f, 1.0f, nullptr, common), 1.25f);
  // Decay before the rule: w = 1 - 0.5 * 1, then SGD with g = 0.
  common = CommonUpdateParams{};
  common.weight_decay_factor = 0.5f;
  TFE_EXPECT_EQ(Step(SgdRule{}, 0.5f, 0.0f, 1.0f, nullptr, common), 0.5f);
  common.multiply_weight_decay_factor_by_learning_rate = true;
  TFE_EXPECT_EQ(Step(SgdRule{}, 0.5f, 0.0f, 1.0f, nullptr, common), 0.75f);
  // Weight clip after the rule: 1 - 0.5 * -1 = 1.5, clipped to 1.25.
  common = CommonUpdateParams{};
  common.clip_weight_max = 1.25f;
  TFE_EXPECT_EQ(Step(SgdRule{}, 0.5f, -1.0f, 1.0f, nullptr, common), 1.25f);
  common.clip_weight_min = 1.125f;
  TFE_EXPECT_EQ(Step(SgdRule{}, 0.5f, 1.0f, 1.0f, nullptr, common), 1.125f);
}

// Without clipping or decay the knobs are skipped: the same values as applying them, but that
// an infinite weight stays infinite (applied, w - 0 * w is NaN).
TFE_TEST(KnobsThatChangeNothingAreSkipped) {
  const CommonUpdateParams none;
  TFE_EXPECT(none.AreIdentity());
  CommonUpdateParams decay;
  decay.weight_decay_factor = 0.5f;
  CommonUpdateParams clip;
  clip.clip_weight_min = -2.0f;
  TFE_EXPECT(!decay.AreIdentity() && !clip.AreIdentity());
  const auto step = [](auto apply_common, float w) {
    std::array<float, 1> accumulator = {0.5f};
    UpdateElement<decltype(apply_common)::value>(AdagradRule{}, CommonUpdateParams{}, 0.25f, 0.0f,
                                                 1.5f, w, accumulator);
    return w;
  };
  for (float w : {1.0f, -3.0f, 0.0f, 1e30f}) {
    TFE_EXPECT_EQ(step(std::false_type(), w), step(std::true_type(), w));
  }
  const float infinity = std::numeric_limits<float>::infinity();
  TFE_EXPECT_EQ(step(std::false_type(), infinity), infinity);
  TFE_EXPECT(std::isnan(step(std::true_type(), infinity)));
}

// A batch of dim 2 touching rows 1 and 3 of a 5-row table; its groups point into it.
struct Touches {
  testing::CsrArrays csr = {{0, 2, 3}, {3, 1, 3}, {1.0f, 2.0f, 0.5f}};
  std::vector<float> gradients = {0.25f, 0.5f, 1.0f, 2.0f};  // [2 rows, dim 2]

  GradientGroups Groups() const {
    GradientGroups groups;
    if (!GroupLookupsById({{csr.View(), gradients.data()}}, 2, &groups).ok()) std::abort();
    return groups;
  }
};

TFE_TEST(UpdateTouchedRowsUpdatesEachTouchedRowOnceWithItsSum) {
  const Touches touches;
  const GradientGroups groups = touches.Groups();
  std::vector<float> table(10, 1.0f);
  std::vector<float> accumulators(10, 0.75f);
  std::vector<float> scratch(2);
  UpdateTouchedRows(AdagradRule{}, {}, 1.0f, groups, 2, 0, groups.num_unique(), table.data(),
                    std::array<float*, 1>{accumulators.data()}, scratch.data());
  // Row 1: g = 2 * (0.25, 0.5) = (0.5, 1): a = (1, 1.75). Row 3: g = (0.25, 0.5) +
  // 0.5 * (1, 2) = (0.75, 1.5): a = (1.3125, 3).
  std::vector<float> expected_table(10, 1.0f), expected_accumulators(10, 0.75f);
  const float g[2][2] = {{0.5f, 1.0f}, {0.75f, 1.5f}};
  const int rows[2] = {1, 3};
  for (int i = 0; i < 2; ++i) {
    for (int j = 0; j < 2; ++j) {
      float& a = expected_accumulators[rows[i] * 2 + j];
      a = a + g[i][j] * g[i][j];
      expected_table[rows[i] * 2 + j] = 1.0f - g[i][j] / std::sqrt(a);
    }
  }
  TFE_EXPECT_EQ(table, expected_table);
  TFE_EXPECT_EQ(accumulators, expected_accumulators);
}

TFE_TEST(UpdateAllRowsGivesUntouchedRowsAZeroGradient) {
  const Touches touches;
  const GradientGroups groups = touches.Groups();
  AdamRule rule;
  rule.lazy_adam = false;
  std::vector<float> table(10, 1.0f), momenta(10, 0.5f), velocities(10, 0.25f);
  std::vector<float> scratch(2);
  // Rows [1, 5): touched rows 1 and 3, untouched 2 and 4; row 0 stays as it is.
  UpdateAllRows(rule, {}, 0.1f, groups, 2, 1, 5, table.data(),
                std::array<float*, 2>{momenta.data(), velocities.data()}, scratch.data());
  const std::vector<float> sums = {0.0f, 0.0f, 0.5f, 1.0f, 0.0f, 0.0f, 0.75f, 1.5f, 0.0f, 0.0f};
  for (int64_t i = 0; i < 10; ++i) {
    float w = 1.0f;
    std::array<float, 2> slots = {0.5f, 0.25f};
    if (i >= 2) w = Step(rule, 0.1f, sums[i], 1.0f, &slots);
    TFE_EXPECT_EQ(table[i], w);
    TFE_EXPECT_EQ(momenta[i], slots[0]);
    TFE_EXPECT_EQ(velocities[i], slots[1]);
  }
}

// Both row loops skip knobs that change nothing (WithCommonKnobs): an infinite weight stays
// infinite in a touched row (1) and in an untouched one (0).
TFE_TEST(RowLoopsSkipKnobsThatChangeNothing) {
  const Touches touches;
  const GradientGroups groups = touches.Groups();
  const float infinity = std::numeric_limits<float>::infinity();
  std::vector<float> scratch(2);
  std::vector<float> touched(10, infinity), all(10, infinity);
  UpdateTouchedRows(SgdRule{}, {}, 0.5f, groups, 2, 0, groups.num_unique(), touched.data(), {},
                    scratch.data());
  UpdateAllRows(SgdRule{}, {}, 0.5f, groups, 2, 0, 5, all.data(), {}, scratch.data());
  TFE_EXPECT_EQ(touched, std::vector<float>(10, infinity));
  TFE_EXPECT_EQ(all, std::vector<float>(10, infinity));
}

// Random rows of a table and its slots, and a batch touching them, for the ISA comparison.
struct RandomTouches {
  static constexpr int64_t kRows = 50;
  static constexpr int64_t kSamples = 40;
  testing::CsrArrays csr;
  std::vector<float> gradients;
  std::vector<float> variables;  // the table, then each slot: [kRows, dim] each

  RandomTouches(int num_slots, int64_t dim, unsigned seed) {
    std::mt19937 gen(seed);
    std::uniform_real_distribution<float> signed_unit(-1.0f, 1.0f), positive(0.25f, 2.0f);
    std::uniform_int_distribution<int64_t> id(0, kRows - 1);
    csr.row_splits.push_back(0);
    for (int64_t s = 0; s < kSamples; ++s) {
      for (int k = 0; k < 5; ++k) {
        csr.ids.push_back(id(gen));
        csr.gains.push_back(signed_unit(gen));
      }
      csr.row_splits.push_back(static_cast<int64_t>(csr.ids.size()));
    }
    for (int64_t i = 0; i < kSamples * dim; ++i) gradients.push_back(signed_unit(gen));
    for (int64_t i = 0; i < kRows * dim; ++i) variables.push_back(signed_unit(gen));
    // Slots positive: accumulators and second moments must be.
    for (int64_t i = 0; i < num_slots * kRows * dim; ++i) variables.push_back(positive(gen));
  }
};

// Both row loops of every rule give the same bits with every ISA this CPU runs as with the
// baseline, at the dimension compiled in (64) and at a general one (5).
TFE_TEST(RowLoopsGiveTheSameBitsWithEveryIsa) {
  std::vector<SimdIsa> wider;
  for (SimdIsa isa : {SimdIsa::kAvx2, SimdIsa::kAvx512}) {
    if (static_cast<int>(isa) <= static_cast<int>(SupportedSimdIsa())) wider.push_back(isa);
  }
  AllRules::ForEach([&](auto rule) {
    using Rule = decltype(rule);
    for (int64_t dim : {5, 64}) {
      const RandomTouches touches(Rule::kNumSlots, dim, /*seed=*/static_cast<unsigned>(dim));
      GradientGroups groups;
      TFE_ASSERT_OK(GroupLookupsById({{touches.csr.View(), touches.gradients.data()}}, dim,
                                     &groups));
      // Both loops, one after the other, on a copy of the variables, without knobs and with
      // every knob (the touched-row loop has a variant for each).
      CommonUpdateParams knobs;
      knobs.clip_gradient_min = -0.75f;
      knobs.clip_gradient_max = 0.5f;
      knobs.clip_weight_min = -2.0f;
      knobs.clip_weight_max = 1.5f;
      knobs.weight_decay_factor = 0.25f;
      for (const CommonUpdateParams& common : {CommonUpdateParams{}, knobs}) {
        const auto run = [&](SimdIsa isa) {
          std::vector<float> variables = touches.variables;
          std::array<float*, Rule::kNumSlots> slots;
          for (int k = 0; k < Rule::kNumSlots; ++k) {
            slots[k] = variables.data() + (1 + k) * RandomTouches::kRows * dim;
          }
          std::vector<float> scratch(dim);
          UpdateTouchedRowsWithIsa(isa, rule, common, 0.125f, groups, dim, 0,
                                   groups.num_unique(), variables.data(), slots, scratch.data());
          UpdateAllRowsWithIsa(isa, rule, common, 0.125f, groups, dim, 0, RandomTouches::kRows,
                               variables.data(), slots, scratch.data());
          return variables;
        };
        const std::vector<float> baseline = run(SimdIsa::kBaseline);
        TFE_EXPECT(baseline != touches.variables);
        for (SimdIsa isa : wider) {
          const std::vector<float> result = run(isa);
          // Bit patterns, so that NaNs and signed zeros compare too.
          TFE_EXPECT(std::memcmp(result.data(), baseline.data(),
                                 baseline.size() * sizeof(float)) == 0);
        }
      }
    }
  });
}

// The attr declarations of every optimizer op: for the first five rules as TensorFlow registered
// them before the rules described themselves (tf.raw_ops op defs); for the later ones, the
// defaults of their Python classes.
TFE_TEST(AttrDeclarationsComeFromTheRules) {
  const auto declarations = [](auto params) {
    std::vector<std::string> out;
    for (const auto& hyperparameter : decltype(params)::Hyperparameters()) {
      out.push_back(AttrDeclaration(hyperparameter));
    }
    return out;
  };
  TFE_EXPECT_EQ(declarations(CommonUpdateParams{}),
                (std::vector<std::string>{"clip_gradient_min: float = -inf",
                                          "clip_gradient_max: float = inf",
                                          "clip_weight_min: float = -inf",
                                          "clip_weight_max: float = inf",
                                          "weight_decay_factor: float = 0",
                                          "multiply_weight_decay_factor_by_learning_rate: bool = "
                                          "false"}));
  TFE_EXPECT_EQ(declarations(SgdRule{}), std::vector<std::string>{});
  TFE_EXPECT_EQ(declarations(AdagradRule{}), std::vector<std::string>{});
  TFE_EXPECT_EQ(declarations(AdagradMomentumRule{}),
                (std::vector<std::string>{"momentum: float = 0", "use_nesterov: bool = false",
                                          "exponent: float = 2", "beta2: float = 1",
                                          "epsilon: float = 1e-10"}));
  TFE_EXPECT_EQ(declarations(AdamRule{}),
                (std::vector<std::string>{"beta_1: float = 0.9", "beta_2: float = 0.999",
                                          "epsilon: float = 1e-07", "lazy_adam: bool = true",
                                          "sum_inside_sqrt: bool = true"}));
  TFE_EXPECT_EQ(declarations(FtrlRule{}),
                (std::vector<std::string>{"learning_rate_power: float = -0.5",
                                          "l1_regularization_strength: float = 0",
                                          "l2_regularization_strength: float = 0",
                                          "beta: float = 0",
                                          "multiply_linear_by_learning_rate: bool = false",
                                          "allow_zero_accumulator: bool = false"}));
  TFE_EXPECT_EQ(declarations(ProximalAdagradRule{}),
                (std::vector<std::string>{"l1_regularization_strength: float = 0",
                                          "l2_regularization_strength: float = 0"}));
  TFE_EXPECT_EQ(declarations(MomentumRule{}),
                (std::vector<std::string>{"momentum: float = 0", "use_nesterov: bool = false"}));
  TFE_EXPECT_EQ(declarations(RmsPropRule{}),
                (std::vector<std::string>{"rho: float = 0.9", "momentum: float = 0",
                                          "epsilon: float = 1e-07"}));
  TFE_EXPECT_EQ(declarations(ProximalYogiRule{}),
                (std::vector<std::string>{"beta1: float = 0.9", "beta2: float = 0.999",
                                          "epsilon: float = 0.001",
                                          "l1_regularization_strength: float = 0",
                                          "l2_regularization_strength: float = 0"}));
}

TFE_TEST(EveryRuleHasDistinctNamesAndAttrs) {
  std::set<std::string> rule_names;
  AllRules::ForEach([&](auto rule) {
    using Rule = decltype(rule);
    TFE_EXPECT(rule_names.insert(Rule::kName).second);
    std::set<std::string> attrs = {"N", "table_name"};
    for (const auto& hyperparameter : CommonUpdateParams::Hyperparameters()) {
      TFE_EXPECT(attrs.insert(hyperparameter.name).second);
    }
    for (const auto& hyperparameter : Rule::Hyperparameters()) {
      TFE_EXPECT(attrs.insert(hyperparameter.name).second);
    }
    std::set<std::string> slots;
    for (const char* slot : Rule::kSlotNames) TFE_EXPECT(slots.insert(slot).second);
  });
  TFE_EXPECT_EQ(rule_names.size(), size_t{9});
}

// The apply kernels' check of the learning rate: no rule takes one that is not finite or is
// negative (zero freezes the table, as a warm-up schedule's first steps may).
TFE_TEST(LearningRateMustBeFiniteAndNonNegative) {
  TFE_EXPECT_OK(CheckLearningRate("t", 0.5f));
  TFE_EXPECT_OK(CheckLearningRate("t", 0.0f));
  TFE_EXPECT_ERROR(CheckLearningRate("t", -0.1f),
                   "Table 't': learning_rate must be finite and >= 0, got -0.1");
  TFE_EXPECT_ERROR(CheckLearningRate("t", std::numeric_limits<float>::quiet_NaN()),
                   "Table 't': learning_rate must be finite and >= 0, got nan");
  TFE_EXPECT_ERROR(CheckLearningRate("t", -std::numeric_limits<float>::infinity()),
                   "Table 't': learning_rate must be finite and >= 0, got -inf");
}

}  // namespace
}  // namespace tf_embedding

int main() { return tf_embedding::testing::RunAllTests(); }
