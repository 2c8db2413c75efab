"""Compiler flags of every C++ target, setup.py's (README.md, "Build")."""

# -c opt (.bazelrc) adds -DNDEBUG. TensorFlow's headers need C++17; Bazel 4's toolchain
# defaults to -std=c++0x. -ffp-contract=off keeps every SIMD variant of a loop bit-identical
# (cc/core/simd_dispatch.h). -fno-loop-unroll-and-jam keeps the gradient sum of the sparse-apply
# kernels vectorised (setup.py).
COPTS = ["-std=c++17", "-O3", "-fno-math-errno", "-ffp-contract=off", "-fno-loop-unroll-and-jam"]
