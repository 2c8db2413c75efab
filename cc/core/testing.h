// The harness of cc/core's unit tests (cc/core/*_test.cc), which build without TensorFlow and
// without a test framework: `make -C cc/core test` or `bazel test //cc/core/...`.
//
//   TFE_TEST(SortsKeys) {
//     TFE_EXPECT_EQ(Sorted({3, 1}), (std::vector<int>{1, 3}));
//   }
//   int main() { return tf_embedding::testing::RunAllTests(); }
//
// A failed TFE_EXPECT* prints where and what, and the test goes on; a failed TFE_ASSERT* also
// returns from the test (for checks that later lines index with). The program exits with 1 if
// any check failed.
#ifndef TF_EMBEDDING_CC_CORE_TESTING_H_
#define TF_EMBEDDING_CC_CORE_TESTING_H_

#include <array>
#include <cstdint>
#include <cstdio>
#include <sstream>
#include <string>
#include <vector>

#include "cc/core/csr_batch.h"
#include "cc/core/simd_dispatch.h"
#include "cc/core/status.h"

namespace tf_embedding {
namespace testing {

// The arrays of a CSR batch, owned, for tests to build batches in place.
struct CsrArrays {
  std::vector<int64_t> row_splits;
  std::vector<int64_t> ids;
  std::vector<float> gains;

  CsrBatch View() const {
    return {row_splits.data(), static_cast<int64_t>(row_splits.size()),
            ids.data(),        static_cast<int64_t>(ids.size()),
            gains.data(),      static_cast<int64_t>(gains.size())};
  }
};

struct TestCase {
  const char* name;
  void (*body)();
};

inline std::vector<TestCase>& Registry() {
  static std::vector<TestCase> tests;
  return tests;
}

inline int& FailedChecks() {
  static int failed = 0;
  return failed;
}

inline bool Register(const char* name, void (*body)()) {
  Registry().push_back({name, body});
  return true;
}

template <typename T>
std::string Show(const T& value) {
  std::ostringstream out;
  out << value;
  return out.str();
}

// Arrays and vectors print their size and at most their first kShownElements elements.
constexpr size_t kShownElements = 20;

template <typename Container>
std::string ShowElements(const Container& values) {
  std::string out = "(" + std::to_string(values.size()) + " elements) {";
  for (size_t i = 0; i < values.size() && i < kShownElements; ++i) {
    out += (i > 0 ? ", " : "") + Show(values[i]);
  }
  return out + (values.size() > kShownElements ? ", ...}" : "}");
}

template <typename T>
std::string Show(const std::vector<T>& values) {
  return ShowElements(values);
}

template <typename T, size_t N>
std::string Show(const std::array<T, N>& values) {
  return ShowElements(values);
}

inline bool Check(bool ok, const std::string& what, const char* file, int line) {
  if (!ok) {
    ++FailedChecks();
    std::fprintf(stderr, "%s:%d: check failed: %s\n", file, line, what.c_str());
  }
  return ok;
}

template <typename A, typename B>
bool CheckEq(const A& actual, const B& expected, const char* actual_text,
             const char* expected_text, const char* file, int line) {
  return Check(actual == expected,
               std::string(actual_text) + " == " + expected_text + "\n  actual:   " +
                   Show(actual) + "\n  expected: " + Show(expected),
               file, line);
}

inline bool CheckOk(const Status& status, const char* status_text, const char* file, int line) {
  return Check(status.ok(),
               std::string(status_text) + " is OK\n  got: \"" + status.message() + "\"", file,
               line);
}

// `status` failed with exactly `message`.
inline bool CheckError(const Status& status, const std::string& message, const char* file,
                       int line) {
  return Check(!status.ok() && status.message() == message,
               "error \"" + message + "\"\n  got: " +
                   (status.ok() ? std::string("OK") : "\"" + status.message() + "\""),
               file, line);
}

// The vector ISAs this CPU and build support, narrowest first (the loops compiled per ISA must
// give the same bits on each).
inline std::vector<SimdIsa> RunnableIsas() {
  std::vector<SimdIsa> isas;
  for (SimdIsa isa : {SimdIsa::kBaseline, SimdIsa::kAvx2, SimdIsa::kAvx512}) {
    if (static_cast<int>(isa) <= static_cast<int>(SupportedSimdIsa())) isas.push_back(isa);
  }
  return isas;
}

inline const char* IsaName(SimdIsa isa) {
  switch (isa) {
    case SimdIsa::kBaseline: return "baseline";
    case SimdIsa::kAvx2: return "avx2";
    case SimdIsa::kAvx512: return "avx512";
  }
  return "?";
}

inline int RunAllTests() {
  int failed_tests = 0;
  for (const TestCase& test : Registry()) {
    const int failed_before = FailedChecks();
    test.body();
    const bool passed = FailedChecks() == failed_before;
    std::printf("%s %s\n", passed ? "ok  " : "FAIL", test.name);
    failed_tests += passed ? 0 : 1;
  }
  std::printf("%zu tests, %d failed\n", Registry().size(), failed_tests);
  return failed_tests == 0 ? 0 : 1;
}

}  // namespace testing
}  // namespace tf_embedding

#define TFE_TEST(name)                                                           \
  static void name();                                                            \
  [[maybe_unused]] static const bool name##_registered =                         \
      ::tf_embedding::testing::Register(#name, name);                            \
  static void name()

#define TFE_EXPECT(condition) \
  ::tf_embedding::testing::Check((condition), #condition, __FILE__, __LINE__)

#define TFE_EXPECT_EQ(actual, expected) \
  ::tf_embedding::testing::CheckEq((actual), (expected), #actual, #expected, __FILE__, __LINE__)

#define TFE_EXPECT_OK(status) \
  ::tf_embedding::testing::CheckOk((status), #status, __FILE__, __LINE__)

#define TFE_EXPECT_ERROR(status, message) \
  ::tf_embedding::testing::CheckError((status), (message), __FILE__, __LINE__)

#define TFE_ASSERT(condition)           \
  do {                                  \
    if (!TFE_EXPECT(condition)) return; \
  } while (false)

#define TFE_ASSERT_OK(status)           \
  do {                                  \
    if (!TFE_EXPECT_OK(status)) return; \
  } while (false)

#endif  // TF_EMBEDDING_CC_CORE_TESTING_H_
