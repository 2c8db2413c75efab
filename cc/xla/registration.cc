#include "cc/xla/registration.h"

#include <string>

#include "absl/strings/str_cat.h"
#include "tensorflow/core/framework/kernel_def_builder.h"
#include "tensorflow/core/framework/op_kernel.h"
#include "tensorflow/core/framework/types.h"

namespace tf_embedding {
namespace {

using ::tensorflow::XlaOpRegistry;

// The only compilation device the kernels are registered for: XLA's CPU backend, which runs
// their custom calls (custom_calls.h). On any other device (XLA_GPU_JIT, a TPU's) the ops have
// no XLA kernel, so TensorFlow fails a compiled function that uses them when it compiles it,
// naming the op and the device, and its auto-clustering leaves them out (docs/xla.md). A
// function, not a global: the kernel files register from their own static initializers, which
// may run before this file's.
std::string Device() { return tensorflow::DEVICE_CPU_XLA_JIT; }

// Whether TensorFlow has already made kernels of the XLA registrations: NoOp has an XLA
// kernel in every TensorFlow build, so it has a CPU compilation kernel once they are made. (The
// description string, not the KernelList proto: this runs while the library is being loaded,
// and only TensorFlow's own code touches its protos here.)
bool CompilationKernelsExist() {
  const std::string kernels = tensorflow::KernelsRegisteredForOp("NoOp");
  return kernels.find(absl::StrCat("device='", Device(), "'")) != std::string::npos;
}

// What XlaOpRegistry::RegisterCompilationKernels would register for `spec` (called once it has
// run, so the CPU backend is registered).
void RegisterCompilationKernel(const XlaKernelSpec& spec, XlaOpRegistry::Factory factory) {
  const std::string device = Device();
  tensorflow::KernelDefBuilder kernel(spec.op.c_str());
  kernel.Device(device.c_str());
  for (const auto& [attr, types] : spec.type_constraints) {
    kernel.TypeConstraint(attr.c_str(), types);
  }
  // Registrations last as long as the process, like REGISTER_KERNEL_BUILDER's; the registrar
  // takes the KernelDef.
  new tensorflow::kernel_factory::OpKernelRegistrar(kernel.Build(), "XlaJitOp", factory);
}

}  // namespace

void RegisterXlaKernel(const XlaKernelSpec& spec, XlaOpRegistry::Factory factory) {
  const bool late = CompilationKernelsExist();
  tensorflow::XlaOpRegistrationBuilder builder =
      tensorflow::XlaOpRegistrationBuilder::Name(spec.op);
  builder.Device(Device());
  for (const std::string& input : spec.compile_time_constant_inputs) {
    builder.CompileTimeConstantInput(input);
  }
  for (const auto& [attr, types] : spec.type_constraints) builder.TypeConstraint(attr, types);
  tensorflow::XlaOpRegistrar registrar(builder.Build(factory));
  if (late) RegisterCompilationKernel(spec, factory);
}

}  // namespace tf_embedding
