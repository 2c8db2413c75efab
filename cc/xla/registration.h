// Registration of the XLA kernels, robust to the order in which TensorFlow and this library
// meet XLA.
//
// TensorFlow turns XLA kernel registrations (REGISTER_XLA_OP) into kernels of its XLA
// compilation devices once per process, at the first XLA compilation. The op library is loaded
// lazily, at the first use of a tf_embedding op, which may come after that: its registrations
// would then be ignored and every jit_compile function using the ops would fail with "No
// registered 'TfeEmbeddingLookup' OpKernel for XLA_CPU_JIT devices". RegisterXlaKernel
// registers those compilation kernels itself in that case.
#ifndef TF_EMBEDDING_CC_XLA_REGISTRATION_H_
#define TF_EMBEDDING_CC_XLA_REGISTRATION_H_

#include <string>
#include <utility>
#include <vector>

#include "tensorflow/compiler/tf2xla/xla_op_registry.h"
#include "tensorflow/core/framework/types.pb.h"

namespace tf_embedding {

struct XlaKernelSpec {
  std::string op;
  // Inputs whose values the kernel reads at compile time (XLA recompiles for other values).
  std::vector<std::string> compile_time_constant_inputs = {};
  // Types allowed for a type (or list of types) attr.
  std::vector<std::pair<std::string, std::vector<tensorflow::DataType>>> type_constraints = {};
};

// Registers `factory`'s kernel of `spec.op` for the XLA CPU compilation device (XLA_CPU_JIT),
// the only one: the kernels compile to custom calls that XLA's CPU backend runs.
void RegisterXlaKernel(const XlaKernelSpec& spec, tensorflow::XlaOpRegistry::Factory factory);

// A factory for the kernel class Kernel.
template <typename Kernel>
tensorflow::OpKernel* CreateXlaKernel(tensorflow::OpKernelConstruction* ctx) {
  return new Kernel(ctx);
}

}  // namespace tf_embedding

#endif  // TF_EMBEDDING_CC_XLA_REGISTRATION_H_
