// The wording of cc/core's errors, written once.
//
// A message first says what it concerns (docs/kernels.md, "Ops"): the table, then the feature
// or the element of an N-list input, then what is wrong with which value. Those prefixes, and
// the messages that several validators share, are defined here; a message that only one
// validator writes stays next to its check.
#ifndef TF_EMBEDDING_CC_CORE_ERRORS_H_
#define TF_EMBEDDING_CC_CORE_ERRORS_H_

#include <cstdint>
#include <string>

#include "cc/core/status.h"

namespace tf_embedding {

// "Table '<table>': "
std::string TableContext(const std::string& table);

// "Table '<table>', feature '<feature>': "
std::string FeatureContext(const std::string& table, const std::string& feature);

// "batch <b>: ", for element b of an op's N-list inputs.
std::string BatchContext(int64_t batch);

template <typename... Parts>
Status TableError(const std::string& table, const Parts&... parts) {
  return InvalidArgument(TableContext(table), parts...);
}

template <typename... Parts>
Status FeatureError(const std::string& table, const std::string& feature, const Parts&... parts) {
  return InvalidArgument(FeatureContext(table, feature), parts...);
}

// "<tensor>[<index>]", how messages point at an element of an input.
std::string ElementName(const std::string& tensor, int64_t index);

// "lookup <i>", how messages point at the i-th id of a feature or of an ids input.
std::string LookupName(int64_t lookup);

// An id that is not a row of the table, in every op: "id <id> at <where> is out of range for
// vocabulary size <vocabulary_size>". A negative vocabulary_size means the bound is not known yet
// and only the sign was checked: "id <id> at <where> is negative".
std::string IdOutOfRange(int64_t id, const std::string& where, int64_t vocabulary_size);

// Fails unless the learning rate of a sparse-apply op is finite and >= 0: a NaN or infinite rate
// would poison every row it touches, a negative one ascends the loss (a callable learning rate is
// only known here, at the step). The check of both runtimes' apply kernels.
Status CheckLearningRate(const std::string& table, float learning_rate);

}  // namespace tf_embedding

#endif  // TF_EMBEDDING_CC_CORE_ERRORS_H_
