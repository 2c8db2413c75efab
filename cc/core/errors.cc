#include "cc/core/errors.h"

#include <cmath>

namespace tf_embedding {

std::string TableContext(const std::string& table) {
  return "Table '" + table + "': ";
}

std::string FeatureContext(const std::string& table, const std::string& feature) {
  return "Table '" + table + "', feature '" + feature + "': ";
}

std::string BatchContext(int64_t batch) { return "batch " + std::to_string(batch) + ": "; }

std::string ElementName(const std::string& tensor, int64_t index) {
  return tensor + "[" + std::to_string(index) + "]";
}

std::string LookupName(int64_t lookup) { return "lookup " + std::to_string(lookup); }

std::string IdOutOfRange(int64_t id, const std::string& where, int64_t vocabulary_size) {
  const std::string message = "id " + std::to_string(id) + " at " + where + " is ";
  if (vocabulary_size < 0) return message + "negative";
  return message + "out of range for vocabulary size " + std::to_string(vocabulary_size);
}

Status CheckLearningRate(const std::string& table, float learning_rate) {
  if (std::isfinite(learning_rate) && learning_rate >= 0.0f) return Status();
  return TableError(table, "learning_rate must be finite and >= 0, got ", learning_rate);
}

}  // namespace tf_embedding
