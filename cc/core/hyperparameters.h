// How optimizer rules describe their hyperparameters, once.
//
// A hyperparameter is a member of its rule struct (or of CommonUpdateParams): the member's
// default initializer is its default, and the struct's static Hyperparameters() lists it with its
// attr name. The op registration declares the attrs from that list (AttrDeclaration) and the
// kernel reads each attr back into its member, so the name, type and default are written nowhere
// else in C++.
#ifndef TF_EMBEDDING_CC_CORE_HYPERPARAMETERS_H_
#define TF_EMBEDDING_CC_CORE_HYPERPARAMETERS_H_

#include <charconv>
#include <string>
#include <variant>

namespace tf_embedding {

template <typename Params>
struct Hyperparameter {
  const char* name;
  std::variant<float Params::*, bool Params::*> member;
};

// The attr declaration of `hyperparameter` in REGISTER_OP syntax, "<name>: <type> = <default>",
// with the default of a default-constructed Params. Floats are written in the shortest form
// that reads back as the same float, so the registered default is exactly the member's.
template <typename Params>
std::string AttrDeclaration(const Hyperparameter<Params>& hyperparameter) {
  // Static: GCC cannot see that a rule with float hyperparameters only never reads a bool
  // member of an automatic `defaults` (a -Wmaybe-uninitialized false positive).
  static const Params defaults{};
  const std::string name = hyperparameter.name;
  if (const auto* member = std::get_if<bool Params::*>(&hyperparameter.member)) {
    return name + ": bool = " + (defaults.**member ? "true" : "false");
  }
  const float value = defaults.*std::get<float Params::*>(hyperparameter.member);
  char text[32];
  const std::to_chars_result written = std::to_chars(text, text + sizeof(text), value);
  return name + ": float = " + std::string(text, written.ptr);
}

}  // namespace tf_embedding

#endif  // TF_EMBEDDING_CC_CORE_HYPERPARAMETERS_H_
