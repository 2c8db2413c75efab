// Per-row sparse optimizer updates (the math of tf_tpu_embedding_api.md §2; the rules of the TPU
// optimizers only TF v1 named say where theirs comes from; ordering of docs/kernels.md):
// gradient clip, decoupled weight decay, the optimizer rule, weight clip.
//
// Every rule is a small struct that is the whole C++ description of its optimizer: its name in
// the op names (kName), its slots in input order (kSlotNames), its hyperparameters (members with
// their defaults, listed by Hyperparameters(), see hyperparameters.h) and an elementwise
// `Update(lr, g, w, slots)`. The row loops of row_updates.h drive every rule, so the rules
// share one loop; AllRules lists them, and that list registers every optimizer's ops and
// kernels. Arithmetic is float32, in the order the formulas are written, so a float32 numpy
// transcription of §2 agrees to rounding: exactly for the rules built from correctly rounded
// operations (+ - * / sqrt), to ~1 ulp where pow is involved.
//
// The math is defined once for both runtimes: the TF kernels and the XLA CPU custom calls run
// the same row loops (row_updates.h) over `Update` and UpdateElement, written in the scalar
// vocabulary below (operators, Sqrt, Pow, Clamp, ReciprocalSqrt).
#ifndef TF_EMBEDDING_CC_CORE_OPTIMIZERS_H_
#define TF_EMBEDDING_CC_CORE_OPTIMIZERS_H_

#include <algorithm>
#include <array>
#include <cmath>
#include <cstdint>
#include <limits>
#include <type_traits>

#include "cc/core/hyperparameters.h"

namespace tf_embedding {

// The scalar vocabulary of the rules.
// Clamps x to [lo, hi]; NaN stays NaN, like numpy.clip.
inline float Clamp(float x, float lo, float hi) { return std::min(std::max(x, lo), hi); }
inline float Sqrt(float x) { return std::sqrt(x); }
inline float Pow(float x, float y) { return std::pow(x, y); }
// 1 / sqrt(x) rounded once: computed in double, whose result rounds to the correctly rounded
// float (what powf(x, -0.5f) gives) and, unlike powf, vectorises.
inline float ReciprocalSqrt(float x) {
  return static_cast<float>(1.0 / std::sqrt(static_cast<double>(x)));
}
// -1, 0 or 1 by the sign of x, as tf.sign (0 for NaN, where tf.sign gives NaN).
inline float Sign(float x) { return static_cast<float>((x > 0.0f) - (x < 0.0f)); }
inline float Abs(float x) { return std::abs(x); }
// max(x, y) as std::max computes it: y only when x < y, so a NaN x stays.
inline float Max(float x, float y) { return std::max(x, y); }

// Knobs every optimizer shares; their attrs precede each rule's own.
struct CommonUpdateParams {
  float clip_gradient_min = -std::numeric_limits<float>::infinity();
  float clip_gradient_max = std::numeric_limits<float>::infinity();
  float clip_weight_min = -std::numeric_limits<float>::infinity();
  float clip_weight_max = std::numeric_limits<float>::infinity();
  float weight_decay_factor = 0.0f;
  bool multiply_weight_decay_factor_by_learning_rate = false;

  static constexpr std::array<Hyperparameter<CommonUpdateParams>, 6> Hyperparameters() {
    using P = CommonUpdateParams;
    return {{{"clip_gradient_min", &P::clip_gradient_min},
             {"clip_gradient_max", &P::clip_gradient_max},
             {"clip_weight_min", &P::clip_weight_min},
             {"clip_weight_max", &P::clip_weight_max},
             {"weight_decay_factor", &P::weight_decay_factor},
             {"multiply_weight_decay_factor_by_learning_rate",
              &P::multiply_weight_decay_factor_by_learning_rate}}};
  }

  float WeightDecay(float lr) const {
    return multiply_weight_decay_factor_by_learning_rate
               ? weight_decay_factor * lr
               : weight_decay_factor;
  }

  // Whether the knobs change nothing: no clipping bound and no weight decay (the defaults).
  // Updates then skip them (UpdateElement<false>).
  bool AreIdentity() const {
    constexpr float kInfinity = std::numeric_limits<float>::infinity();
    return clip_gradient_min == -kInfinity && clip_gradient_max == kInfinity &&
           clip_weight_min == -kInfinity && clip_weight_max == kInfinity &&
           weight_decay_factor == 0.0f;
  }
};

// Rules update only the rows a batch touches, unless they say otherwise (non-lazy Adam).
struct LazyRule {
  bool UpdatesUntouchedRows() const { return false; }
};

struct SgdRule : LazyRule {
  static constexpr char kName[] = "Sgd";
  static constexpr int kNumSlots = 0;
  static constexpr std::array<const char*, 0> kSlotNames = {};
  static constexpr std::array<Hyperparameter<SgdRule>, 0> Hyperparameters() { return {}; }

  void Update(float lr, float g, float& w, std::array<float, 0>&) const {
    w = w - lr * g;
  }
};

struct AdagradRule : LazyRule {
  static constexpr char kName[] = "Adagrad";
  static constexpr int kNumSlots = 1;
  static constexpr std::array<const char*, 1> kSlotNames = {"accumulators"};
  static constexpr std::array<Hyperparameter<AdagradRule>, 0> Hyperparameters() { return {}; }

  // No epsilon: the accumulator starts at initial_accumulator_value > 0.
  void Update(float lr, float g, float& w, std::array<float, 1>& s) const {
    float& a = s[0];
    a = a + g * g;
    w = w - lr * g / Sqrt(a);
  }
};

struct AdagradMomentumRule : LazyRule {
  static constexpr char kName[] = "AdagradMomentum";
  static constexpr int kNumSlots = 2;
  static constexpr std::array<const char*, 2> kSlotNames = {"accumulators", "momenta"};

  float momentum = 0.0f;
  bool use_nesterov = false;
  float exponent = 2.0f;
  float beta2 = 1.0f;
  float epsilon = 1e-10f;

  static constexpr std::array<Hyperparameter<AdagradMomentumRule>, 5> Hyperparameters() {
    using R = AdagradMomentumRule;
    return {{{"momentum", &R::momentum},
             {"use_nesterov", &R::use_nesterov},
             {"exponent", &R::exponent},
             {"beta2", &R::beta2},
             {"epsilon", &R::epsilon}}};
  }

  // (a + epsilon)^(-1/exponent); the default exponent 2 is a reciprocal square root.
  float Preconditioner(float x) const {
    if (exponent == 2.0f) return ReciprocalSqrt(x);
    return Pow(x, -1.0f / exponent);
  }

  void Update(float lr, float g, float& w, std::array<float, 2>& s) const {
    float& a = s[0];
    float& m = s[1];
    // beta2 == 1 is plain Adagrad accumulation, not an exponential average with weight 0.
    a = beta2 == 1.0f ? a + g * g : beta2 * a + (1.0f - beta2) * g * g;
    const float scaled = Preconditioner(a + epsilon) * g;
    m = momentum * m + scaled;
    w = w - lr * (use_nesterov ? momentum * m + scaled : m);
  }
};

struct AdamRule {
  static constexpr char kName[] = "Adam";
  static constexpr int kNumSlots = 2;
  static constexpr std::array<const char*, 2> kSlotNames = {"momenta", "velocities"};

  float beta_1 = 0.9f;
  float beta_2 = 0.999f;
  float epsilon = 1e-7f;
  bool lazy_adam = true;
  bool sum_inside_sqrt = true;

  static constexpr std::array<Hyperparameter<AdamRule>, 5> Hyperparameters() {
    using R = AdamRule;
    return {{{"beta_1", &R::beta_1},
             {"beta_2", &R::beta_2},
             {"epsilon", &R::epsilon},
             {"lazy_adam", &R::lazy_adam},
             {"sum_inside_sqrt", &R::sum_inside_sqrt}}};
  }

  bool UpdatesUntouchedRows() const { return !lazy_adam; }

  // No bias correction, as on TPU.
  void Update(float lr, float g, float& w, std::array<float, 2>& s) const {
    float& m = s[0];
    float& v = s[1];
    m = beta_1 * m + (1.0f - beta_1) * g;
    v = beta_2 * v + (1.0f - beta_2) * g * g;
    const float inside = sum_inside_sqrt ? epsilon * epsilon : 0.0f;
    const float outside = sum_inside_sqrt ? 0.0f : epsilon;
    w = w - lr * m / (Sqrt(v + inside) + outside);
  }
};

struct FtrlRule : LazyRule {
  static constexpr char kName[] = "Ftrl";
  static constexpr int kNumSlots = 2;
  static constexpr std::array<const char*, 2> kSlotNames = {"accumulators", "linears"};

  float learning_rate_power = -0.5f;
  float l1_regularization_strength = 0.0f;
  float l2_regularization_strength = 0.0f;
  float beta = 0.0f;
  bool multiply_linear_by_learning_rate = false;
  // Accepted for API parity; the TPU now handles zero accumulators without it and so does this
  // rule (0^0.5 is 0), so it changes nothing.
  bool allow_zero_accumulator = false;

  static constexpr std::array<Hyperparameter<FtrlRule>, 6> Hyperparameters() {
    using R = FtrlRule;
    return {{{"learning_rate_power", &R::learning_rate_power},
             {"l1_regularization_strength", &R::l1_regularization_strength},
             {"l2_regularization_strength", &R::l2_regularization_strength},
             {"beta", &R::beta},
             {"multiply_linear_by_learning_rate", &R::multiply_linear_by_learning_rate},
             {"allow_zero_accumulator", &R::allow_zero_accumulator}}};
  }

  // a^(-learning_rate_power); the default -0.5 is a (correctly rounded, vectorisable) sqrt.
  float Power(float a) const {
    if (learning_rate_power == -0.5f) return Sqrt(a);
    return Pow(a, -learning_rate_power);
  }

  void Update(float lr, float g, float& w, std::array<float, 2>& s) const {
    float& a = s[0];
    float& l = s[1];
    const float l1 = l1_regularization_strength;
    const float l2 = l2_regularization_strength;
    const float a_new = a + g * g;
    const float p_new = Power(a_new);
    const float dp = p_new - Power(a);
    float numerator, denominator;
    if (multiply_linear_by_learning_rate) {
      l = l + lr * g - dp * w;
      numerator = l1 == 0.0f ? -l : Clamp(l, -lr * l1, lr * l1) - l;
      denominator = p_new + 2.0f * lr * l2 + beta;
    } else {
      l = l + g - dp * w / lr;
      numerator = l1 == 0.0f ? -l : Clamp(l, -l1, l1) - l;
      denominator = (p_new + beta) / lr + 2.0f * l2;
    }
    w = numerator / denominator;
    a = a_new;
  }
};

// Proximal Adagrad: Adagrad's per-coordinate rate, then the FOBOS proximal step for l1 and l2.
// optimization_parameters.proto's ProximalAdagradParameters gives TF's CPU kernel as the TPU
// rule's reference: ApplyProximalAdagrad / SparseApplyProximalAdagrad in
// tensorflow/core/kernels/training_ops.cc, written here as its scalar path computes it.
struct ProximalAdagradRule : LazyRule {
  static constexpr char kName[] = "ProximalAdagrad";
  static constexpr int kNumSlots = 1;
  static constexpr std::array<const char*, 1> kSlotNames = {"accumulators"};

  float l1_regularization_strength = 0.0f;
  float l2_regularization_strength = 0.0f;

  static constexpr std::array<Hyperparameter<ProximalAdagradRule>, 2> Hyperparameters() {
    using R = ProximalAdagradRule;
    return {{{"l1_regularization_strength", &R::l1_regularization_strength},
             {"l2_regularization_strength", &R::l2_regularization_strength}}};
  }

  // No epsilon: the accumulator starts at initial_accumulator_value > 0, as for Adagrad.
  // TF shrinks by l1 only when l1 > 0 and divides prox otherwise; with l1 = 0 the shrinking
  // formula gives that same value (sign(p) * |p| is p; only a zero's sign may differ), so one
  // branch-free formula covers both and the row loop vectorises.
  void Update(float lr, float g, float& w, std::array<float, 1>& s) const {
    float& a = s[0];
    const float l1 = l1_regularization_strength > 0.0f ? l1_regularization_strength : 0.0f;
    const float l2 = l2_regularization_strength;
    a = a + g * g;
    const float rate = lr / Sqrt(a);
    const float prox = w - g * rate;
    w = Sign(prox) * Max(Abs(prox) - rate * l1, 0.0f) / (1.0f + l2 * rate);
  }
};

// Momentum, TF1's form (the learning rate scales the step, not the accumulated momentum).
// optimization_parameters.proto's MomentumParameters gives TF's CPU kernel as the TPU rule's
// reference: ApplyMomentum in tensorflow/core/kernels/training_ops.cc
// (tf.raw_ops.ResourceApplyMomentum), including its Nesterov variant.
struct MomentumRule : LazyRule {
  static constexpr char kName[] = "Momentum";
  static constexpr int kNumSlots = 1;
  static constexpr std::array<const char*, 1> kSlotNames = {"momenta"};

  float momentum = 0.0f;
  bool use_nesterov = false;

  static constexpr std::array<Hyperparameter<MomentumRule>, 2> Hyperparameters() {
    using R = MomentumRule;
    return {{{"momentum", &R::momentum}, {"use_nesterov", &R::use_nesterov}}};
  }

  void Update(float lr, float g, float& w, std::array<float, 1>& s) const {
    float& m = s[0];
    m = m * momentum + g;
    w = use_nesterov ? w - (g * lr + m * momentum * lr) : w - m * lr;
  }
};

// RMSProp with momentum (not centered). optimization_parameters.proto's RmsPropParameters gives
// TF's CPU kernel as the TPU rule's reference: ApplyRMSProp in
// tensorflow/core/kernels/training_ops.cc (tf.raw_ops.ResourceApplyRMSProp), whose
// ms + (g^2 - ms) * (1 - rho) is rho * ms + (1 - rho) * g^2 rounded as TF rounds it.
struct RmsPropRule : LazyRule {
  static constexpr char kName[] = "RMSProp";
  static constexpr int kNumSlots = 2;
  static constexpr std::array<const char*, 2> kSlotNames = {"ms", "mom"};

  float rho = 0.9f;
  float momentum = 0.0f;
  float epsilon = 1e-7f;

  static constexpr std::array<Hyperparameter<RmsPropRule>, 3> Hyperparameters() {
    using R = RmsPropRule;
    return {{{"rho", &R::rho}, {"momentum", &R::momentum}, {"epsilon", &R::epsilon}}};
  }

  void Update(float lr, float g, float& w, std::array<float, 2>& s) const {
    float& ms = s[0];
    float& mom = s[1];
    ms = ms + (g * g - ms) * (1.0f - rho);
    mom = mom * momentum + g * lr / Sqrt(ms + epsilon);
    w = w - mom;
  }
};

// Proximal Yogi: Yogi's additive second moment (Zaheer et al. 2018, Algorithm 2) with an
// FTRL-like proximal step for l1 and l2. optimization_parameters.proto's ProximalYogiParameters
// fixes the TPU rule's shape: lazy, no bias correction (its hyperparameters are not updated;
// a schedule passes lr * sqrt(1 - beta2^t) / (1 - beta1^t) as the learning rate), the sign
// activation (tanh was removed). The TPU kernel is not public; the formulas are those of the
// Yogi optimizer of TensorFlow Addons (tensorflow_addons/optimizers/yogi.py), whose defaults and
// slots v1's ProximalYogiParameters copies, without its bias correction.
struct ProximalYogiRule : LazyRule {
  static constexpr char kName[] = "ProximalYogi";
  static constexpr int kNumSlots = 2;
  static constexpr std::array<const char*, 2> kSlotNames = {"v", "m"};

  float beta1 = 0.9f;
  float beta2 = 0.999f;
  float epsilon = 1e-3f;
  float l1_regularization_strength = 0.0f;
  float l2_regularization_strength = 0.0f;

  static constexpr std::array<Hyperparameter<ProximalYogiRule>, 5> Hyperparameters() {
    using R = ProximalYogiRule;
    return {{{"beta1", &R::beta1},
             {"beta2", &R::beta2},
             {"epsilon", &R::epsilon},
             {"l1_regularization_strength", &R::l1_regularization_strength},
             {"l2_regularization_strength", &R::l2_regularization_strength}}};
  }

  void Update(float lr, float g, float& w, std::array<float, 2>& s) const {
    float& v = s[0];
    float& m = s[1];
    const float l1 = l1_regularization_strength > 0.0f ? l1_regularization_strength : 0.0f;
    const float l2 = l2_regularization_strength;
    m = m * beta1 + g * (1.0f - beta1);
    const float g2 = g * g;
    v = v + (1.0f - beta2) * Sign(g2 - v) * g2;
    const float rate = lr / (Sqrt(v) + epsilon);
    const float descended = w - rate * m;
    // TF Addons solves argmin_x a x^2 / 2 + b x + c |x| with a = 1 + l2 rate, b = -descended,
    // c = l1 rate when l1 > 0: (c sign(b) - b) / a where |b| > c, else 0. That is
    // sign(descended) max(|descended| - c, 0) / a, rounded the same (the subtraction is one
    // rounding either way and rounding is symmetric in sign); only a zero's sign may differ.
    // Without l1 it divides by a if l2 > 0 and keeps `descended` otherwise: the same formula with
    // c = 0 (and a = 1, an exact division). One branch-free formula lets the row loop
    // vectorise; a NaN propagates.
    const float a = 1.0f + l2 * rate;
    const float c = l1 * rate;
    w = Sign(descended) * Max(Abs(descended) - c, 0.0f) / a;
  }
};

// One optimizer step of one element: g = clip(grad), w -= decay * w, the rule, w = clip(w).
// `decay` is common.WeightDecay(lr). kApplyCommon = false, for knobs that AreIdentity(), is the
// rule alone: the same values, but that an infinite weight stays infinite (w - 0 * w is NaN) and
// a -0 weight is not made +0. Without the knobs the row loops run about a fifth fewer vector
// instructions per element, which made the AVX2 Adagrad update 12% faster.
template <bool kApplyCommon, typename Rule>
void UpdateElement(const Rule& rule, const CommonUpdateParams& common, float lr, float decay,
                   float grad, float& w, std::array<float, Rule::kNumSlots>& slots) {
  if constexpr (!kApplyCommon) {
    rule.Update(lr, grad, w, slots);
    return;
  }
  const float g = Clamp(grad, common.clip_gradient_min, common.clip_gradient_max);
  // Applied even when zero (exact for finite weights): a select here keeps GCC from
  // vectorising UpdateRow's loop once it is inlined into the row loops.
  w = w - decay * w;
  rule.Update(lr, g, w, slots);
  w = Clamp(w, common.clip_weight_min, common.clip_weight_max);
}

// Calls f(std::bool_constant<kApplyCommon>()) with kApplyCommon = !common.AreIdentity(): the one
// choice of UpdateElement's variant, for every row loop.
template <typename F>
void WithCommonKnobs(const CommonUpdateParams& common, F&& f) {
  if (common.AreIdentity()) return f(std::false_type());
  f(std::true_type());
}

// A list of rule types, walked by ForEach(f), which calls f(Rule{}) for each rule in order.
template <typename... Rules>
struct RuleList {
  template <typename F>
  static void ForEach(F&& f) {
    (f(Rules{}), ...);
  }
};

// Every optimizer. Adding a rule here registers its ops (cc/ops/optimizer_ops.cc) and kernels
// (cc/kernels/sparse_apply_kernels.cc).
using AllRules = RuleList<SgdRule, AdagradRule, AdagradMomentumRule, AdamRule, FtrlRule,
                          ProximalAdagradRule, MomentumRule, RmsPropRule, ProximalYogiRule>;

}  // namespace tf_embedding

#endif  // TF_EMBEDDING_CC_CORE_OPTIMIZERS_H_
