#include "cc/xla/registration.h"

#include <vector>

#include "absl/strings/str_cat.h"
#include "tensorflow/core/framework/kernel_def_builder.h"
#include "tensorflow/core/framework/op_kernel.h"
#include "tensorflow/core/framework/types.h"

namespace tf_embedding {
namespace {

using ::tensorflow::XlaOpRegistry;

// The compilation devices of jit_compile on CPUs and GPUs (a TPU build would add its own). A
// function, not a global: the kernel files register from their own static initializers, which
// may run before this file's.
std::vector<absl::string_view> Devices() {
  return {tensorflow::DEVICE_CPU_XLA_JIT, tensorflow::DEVICE_GPU_XLA_JIT};
}

// Whether TensorFlow has already made kernels of the XLA registrations: NoOp has an XLA
// kernel in every TensorFlow build, so it has a CPU compilation kernel once they are made. (The
// description string, not the KernelList proto: this runs while the library is being loaded,
// and only TensorFlow's own code touches its protos here.)
bool CompilationKernelsExist() {
  const std::string kernels = tensorflow::KernelsRegisteredForOp("NoOp");
  return kernels.find(absl::StrCat("device='", tensorflow::DEVICE_CPU_XLA_JIT, "'")) !=
         std::string::npos;
}

// What XlaOpRegistry::RegisterCompilationKernels would register for `spec` on each compilation
// device this TensorFlow has.
void RegisterCompilationKernels(const XlaKernelSpec& spec,
                                XlaOpRegistry::Factory factory) {
  for (absl::string_view device : Devices()) {
    const std::string device_name(device);
    if (!XlaOpRegistry::IsBackendRegistered(device_name)) continue;
    tensorflow::KernelDefBuilder kernel(spec.op.c_str());
    kernel.Device(device_name.c_str());
    for (const auto& [attr, types] : spec.type_constraints) {
      kernel.TypeConstraint(attr.c_str(), types);
    }
    // Registrations last as long as the process, like REGISTER_KERNEL_BUILDER's; the
    // registrar takes the KernelDef.
    new tensorflow::kernel_factory::OpKernelRegistrar(kernel.Build(), "XlaJitOp", factory);
  }
}

}  // namespace

void RegisterXlaKernel(const XlaKernelSpec& spec, XlaOpRegistry::Factory factory) {
  const bool late = CompilationKernelsExist();
  tensorflow::XlaOpRegistrationBuilder builder =
      tensorflow::XlaOpRegistrationBuilder::Name(spec.op);
  builder.Device(Devices());
  for (const std::string& input : spec.compile_time_constant_inputs) {
    builder.CompileTimeConstantInput(input);
  }
  for (const auto& [attr, types] : spec.type_constraints) builder.TypeConstraint(attr, types);
  tensorflow::XlaOpRegistrar registrar(builder.Build(factory));
  if (late) RegisterCompilationKernels(spec, factory);
}

}  // namespace tf_embedding
