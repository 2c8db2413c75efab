#ifndef TF_EMBEDDING_CC_CORE_COMBINER_RULE_H_
#define TF_EMBEDDING_CC_CORE_COMBINER_RULE_H_

#include <cmath>
#include <string>

namespace tf_embedding {

enum class Combiner { kSum, kMean, kSqrtn };

// The combiner named "sum", "mean" or "sqrtn"; false for any other name.
inline bool ParseCombiner(const std::string& name, Combiner* combiner) {
  if (name == "sum") *combiner = Combiner::kSum;
  else if (name == "mean") *combiner = Combiner::kMean;
  else if (name == "sqrtn") *combiner = Combiner::kSqrtn;
  else return false;
  return true;
}

// The combiners' gains, defined once: the gain of an id with weight w in a pooled row is w under
// sum, w / sum(w) under mean, w / sqrt(sum(w^2)) under sqrtn, and 0 when that denominator is 0
// (SparseCore's rule; stock TF's div_no_nan agrees). Sums are taken in double.
struct CombinerRule {
  // What one id adds to its row's denominator before `Denominator` (unused under sum).
  static double Term(Combiner combiner, double weight) {
    return combiner == Combiner::kMean ? weight : weight * weight;
  }

  // The row's denominator from the sum of its ids' terms.
  static double Denominator(Combiner combiner, double sum_of_terms) {
    return combiner == Combiner::kSqrtn ? std::sqrt(sum_of_terms) : sum_of_terms;
  }

  static double Gain(double weight, double denominator) {
    return denominator == 0 ? 0.0 : weight / denominator;
  }
};

}  // namespace tf_embedding

#endif  // TF_EMBEDDING_CC_CORE_COMBINER_RULE_H_
