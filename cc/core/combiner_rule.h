#ifndef TF_EMBEDDING_CC_CORE_COMBINER_RULE_H_
#define TF_EMBEDDING_CC_CORE_COMBINER_RULE_H_

#include <cmath>

namespace tf_embedding {

enum class Combiner { kSum, kMean, kSqrtn };

// The combiners' gains, defined once: the gain of an id with weight w in a pooled row is w under
// sum, w / sum(w) under mean, w / sqrt(sum(w^2)) under sqrtn, and 0 when that denominator is 0
// (SparseCore's rule; stock TF's div_no_nan agrees). Sums are taken in double.
//
// `Math` supplies the arithmetic, so the TF kernels (scalars, `ScalarMath` below) and the XLA
// kernel (XLA operations, cc/xla/csr_conversion.cc) instantiate the same rule:
//   Value             the number type (double, or an f64 xla::XlaOp)
//   Sqrt(x)           its square root
//   DivideOrZero(w,d) w / d, or 0 where d is 0
template <typename Math>
struct CombinerRule {
  using Value = typename Math::Value;

  // What one id adds to its row's denominator before `Denominator` (unused under sum).
  static Value Term(Combiner combiner, const Value& weight) {
    return combiner == Combiner::kMean ? weight : weight * weight;
  }

  // The row's denominator from the sum of its ids' terms.
  static Value Denominator(Combiner combiner, const Value& sum_of_terms) {
    return combiner == Combiner::kSqrtn ? Math::Sqrt(sum_of_terms) : sum_of_terms;
  }

  static Value Gain(const Value& weight, const Value& denominator) {
    return Math::DivideOrZero(weight, denominator);
  }
};

struct ScalarMath {
  using Value = double;
  static double Sqrt(double x) { return std::sqrt(x); }
  static double DivideOrZero(double weight, double denominator) {
    return denominator == 0 ? 0.0 : weight / denominator;
  }
};

}  // namespace tf_embedding

#endif  // TF_EMBEDDING_CC_CORE_COMBINER_RULE_H_
