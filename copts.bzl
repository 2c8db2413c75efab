"""Compiler flags of every C++ build of the library: Bazel's targets, setup.py's build (which
reads COPTS from this file) and cc/core/Makefile's tests (likewise), so that all three compile the
same code (README.md, "Build")."""

# -c opt (.bazelrc) adds -DNDEBUG. TensorFlow's headers need C++17; Bazel 4's toolchain
# defaults to -std=c++0x. -fno-math-errno lets GCC vectorise sqrt in the optimizer rules (no
# result changes: nothing reads errno). -ffp-contract=off keeps a * b + c two roundings in the
# loops compiled per ISA, so every SIMD variant of a loop gives the same bits
# (cc/core/simd_dispatch.h). -fno-loop-unroll-and-jam: GCC 12 jammed the sparse-apply kernels'
# gradient sum (two terms per iteration) into a scalar loop over the row (docs/archive/
# benchmark_runs.md, "Results on the AVX-512 machine, the build without loop jamming").
# Keep COPTS one line of string literals: the Makefile reads it with sed.
COPTS = ["-std=c++17", "-O3", "-fno-math-errno", "-ffp-contract=off", "-fno-loop-unroll-and-jam"]
