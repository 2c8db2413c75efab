// The one error type of cc/core.
//
// Core code never throws and never aborts on bad data: it validates its inputs and returns a
// Status. Every failure it can report is a bad input, so a Status needs no error code: it is OK
// or it carries the message of an invalid argument. Kernels turn it into absl::Status in one
// place (cc/kernels/tf_status.h); core tests read the message directly.
#ifndef TF_EMBEDDING_CC_CORE_STATUS_H_
#define TF_EMBEDDING_CC_CORE_STATUS_H_

#include <sstream>
#include <string>
#include <utility>

namespace tf_embedding {

class [[nodiscard]] Status {
 public:
  // OK.
  Status() = default;

  // An invalid-argument error. An empty message would read as OK, so it is replaced.
  static Status Error(std::string message) {
    return Status(message.empty() ? std::string("invalid argument") : std::move(message));
  }

  bool ok() const { return message_.empty(); }
  const std::string& message() const { return message_; }

  // The same error with `context` (what the error concerns, e.g. "batch 2: ") in front of its
  // message; OK stays OK.
  Status WithContext(const std::string& context) const {
    return ok() ? Status() : Status(context + message_);
  }

 private:
  explicit Status(std::string message) : message_(std::move(message)) {}

  std::string message_;
};

// An error whose message is the concatenation of `parts` (anything an ostream prints).
template <typename... Parts>
Status InvalidArgument(const Parts&... parts) {
  std::ostringstream message;
  (message << ... << parts);
  return Status::Error(message.str());
}

}  // namespace tf_embedding

// Returns the Status of `expr` from the enclosing function unless it is OK.
#define TFE_RETURN_IF_ERROR(expr)                           \
  do {                                                      \
    ::tf_embedding::Status tfe_status_ = (expr);            \
    if (!tfe_status_.ok()) return tfe_status_;              \
  } while (false)

#endif  // TF_EMBEDDING_CC_CORE_STATUS_H_
