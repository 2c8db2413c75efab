#!/usr/bin/env bash
# Times cc/core's hot loops as committed at BASE (a git revision) against the work tree's, on
# the benchmark's ids, in one process (tools/core_ab/main.cc alternates them step by step):
#
#   tools/core_ab/run.sh BASE [zipf|uniform] [STEPS]      # defaults: zipf, 20 steps
#
# For one change to the lookup's combine, the gradient's grouping or the row update, where a whole
# benchmark run cannot resolve a few percent (docs/archive/benchmark_runs.md, "Results on the
# AVX-512 machine, sums without gains of 1 and updates without idle knobs"). Each copy of cc/core
# is compiled with the core tests' flags and its namespace renamed (tfe_base, tfe_work), so both
# link into one program; BASE must have the functions tools/core_ab/phases.cc calls. Needs .venv
# (for the ids) and about 4.5 GiB: the tables and accumulators of the benchmark's 8 tables.
set -euo pipefail
cd "$(dirname "$0")/../.."
if (($# < 1)); then
    echo "usage: $0 BASE [zipf|uniform] [STEPS]" >&2
    exit 2
fi
base=$1
distribution=${2:-zipf}
steps=${3:-20}
out=build/core_ab

rm -rf "$out/base" "$out/work"
mkdir -p "$out/base" "$out/work/cc"
git archive "$base" cc/core | tar -x -C "$out/base"
cp -r cc/core "$out/work/cc/"
read -r -a flags <<< "$(make -s -C cc/core print-cxxflags)"
for copy in base work; do
    dir=$out/$copy
    sed -i "s/\btf_embedding\b/tfe_$copy/g" "$dir"/cc/core/*.h "$dir"/cc/core/*.cc
    objects=()
    for source in "$dir"/cc/core/*.cc; do
        [[ $source == *_test.cc ]] && continue
        objects+=("${source%.cc}.o")
        # The copy's own headers come first on the include path, before the repository's
        # (the Makefile's flags name the repository root).
        g++ -I"$dir" "${flags[@]}" -c "$source" -o "${source%.cc}.o" &
    done
    g++ -I"$dir" -I. "${flags[@]}" -DCOPY="tfe_$copy" -c tools/core_ab/phases.cc \
        -o "$dir/phases.o" &
    wait
    ar rcs "$dir/libcopy.a" "$dir/phases.o" "${objects[@]}"
done
g++ "${flags[@]}" -I. tools/core_ab/main.cc "$out/base/libcopy.a" "$out/work/libcopy.a" \
    -o "$out/core_ab"

# The benchmark's default workload and ids (tools/benchmark.py), written once per distribution;
# prints the vocabulary and dimension for the program.
ids=$out/ids_$distribution.npy
read -r vocab dim < <(.venv/bin/python - "$distribution" "$ids" <<'PY'
import os
import sys
sys.path.insert(0, "tools")
import numpy as np
import benchmark
distribution, path = sys.argv[1:]
args = benchmark.parse_args([])
if not os.path.exists(path):
    workload = benchmark.workload_of(args)
    np.save(path, benchmark.make_ids(workload, distribution, args.batches, args.zipf_alpha))
print(args.vocab, args.dim)
PY
)
echo "base: $(git rev-parse --short "$base"); work: the work tree; ids: $distribution"
"$out/core_ab" "$ids" "$vocab" "$dim" "$steps"
