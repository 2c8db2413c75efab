#!/usr/bin/env bash
# Coverage-guided fuzzing of cc/core with libFuzzer, under AddressSanitizer and UBSan: every
# entry point that reads user data (tools/fuzz_core/*_fuzzer.cc: the CSR conversion with the
# direct sparse lookup, the lookup, gradient grouping with every optimizer update, the
# deduplication by shard, the dynamic tables' key index), each for SECONDS (default 30), or
# RUNS executions if set.
#
#   tools/fuzz_core.sh            # about 30 s per target, as CI runs it
#   RUNS=1000000 tools/fuzz_core.sh
#
# Needs clang with libFuzzer (Debian's clang-14; CXX picks another). Objects and the working
# corpora go to build/fuzz_core/; the seed corpora in tools/fuzz_core/corpus/ are only read.
# Prints each target's executions; a finding stops the script with the target's report, and
# libFuzzer writes the input that reproduces it (crash-*) into build/fuzz_core/.
set -euo pipefail
cd "$(dirname "$0")/.."

seconds=${1:-30}
runs=${RUNS:-}
cxx=${CXX:-clang++-14}
out=build/fuzz_core
mkdir -p "$out/objects"

# The shared flags of copts.bzl, less GCC's loop-jam switch, which clang lacks.
copts=$(sed -n 's/^COPTS = \[\(.*\)\]$/\1/p' copts.bzl | tr -d '",' |
        sed 's/-fno-loop-unroll-and-jam//')
flags=($copts -g -I. -fno-omit-frame-pointer -fno-sanitize-recover=all)
sanitizers=address,undefined

objects=()
for source in cc/core/*.cc; do
    [[ $source == *_test.cc ]] && continue
    object=$out/objects/$(basename "${source%.cc}").o
    if [[ ! -e $object || $source -nt $object || -n $(find cc/core -name '*.h' -newer "$object") ]]; then
        "$cxx" "${flags[@]}" -fsanitize=$sanitizers,fuzzer-no-link -c "$source" -o "$object"
    fi
    objects+=("$object")
done

for source in tools/fuzz_core/*_fuzzer.cc; do
    target=$(basename "${source%.cc}")
    "$cxx" "${flags[@]}" -fsanitize=$sanitizers,fuzzer "$source" "${objects[@]}" \
        -o "$out/$target"
    mkdir -p "$out/corpus/$target" "tools/fuzz_core/corpus/$target"
    limit=(-max_total_time="$seconds")
    [[ -n $runs ]] && limit=(-runs="$runs")
    if ! (cd "$out" && "./$target" "${limit[@]}" -print_final_stats=1 -max_len=512 \
            "corpus/$target" "../../tools/fuzz_core/corpus/$target" > "$target.log" 2>&1); then
        tail -40 "$out/$target.log"
        echo "fuzz_core: $target found a failure (input in $out/crash-*)" >&2
        exit 1
    fi
    executions=$(sed -n 's/^stat::number_of_executed_units: *//p' "$out/$target.log")
    echo "$target: $executions executions, no finding"
done
