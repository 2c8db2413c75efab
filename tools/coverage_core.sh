#!/usr/bin/env bash
# Line and function coverage of cc/core by its unit tests (what `make -C cc/core test` runs):
#
#   tools/coverage_core.sh            # table of every cc/core file, then the totals
#
# Builds the tests with gcc's --coverage at -O0 (the other flags as cc/core/Makefile gives them)
# into build/core_coverage/, runs them (also with TF_EMBEDDING_SIMD=avx2 and baseline), and reads
# gcov's JSON reports. A line or function counts as covered when any test program ran it (a
# header is compiled into several). gcov knows only the code a program compiles: a template or
# inline function that no test instantiates is not in the figures at all.
#
#   tools/coverage_core.sh --uncovered   # also the functions and lines no test runs, by file
set -euo pipefail

root=$(cd "$(dirname "$0")/.." && pwd)
build="$root/build/core_coverage"
rm -rf "$build"
mkdir -p "$build"
flags="$(make -s -C "$root/cc/core" print-cxxflags) -O0 --coverage"
if ! make -s -C "$root/cc/core" -j2 test BUILD_DIR="$build" CXXFLAGS="$flags" \
    LDFLAGS=--coverage >"$build/tests.log" 2>&1; then
  cat "$build/tests.log"
  echo "coverage_core: the cc/core tests failed" >&2
  exit 1
fi
# Again with each narrower vector ISA the dispatchers may pick (cc/core/simd_dispatch.h), so that
# the variants the machine's widest ISA would leave out are run too where the CPU has them.
for isa in avx2 baseline; do
  for test in "$build"/*_test; do
    TF_EMBEDDING_SIMD=$isa "$test" >>"$build/tests.log" 2>&1
  done
done
cd "$build"
# Every object's notes file, with its counts where a test program ran it: a file that no test
# program links (only the op library uses it) is reported as not run, not left out.
gcov --json-format --stdout --object-directory "$build" "$build"/*.gcno 2>/dev/null \
  >"$build/gcov.jsonl"
python3 - "$root" "$build/gcov.jsonl" "$@" <<'EOF'
import json
import os
import sys

root, report, *options = sys.argv[1:]
# file -> {line: ran}; file -> {start line: [name, ran]}: a template's instantiations share
# their start line and are one function.
lines, functions = {}, {}
with open(report) as f:
    for document in f:
        for entry in json.loads(document)["files"]:
            path = os.path.relpath(os.path.join(root, "cc/core", entry["file"]), root) \
                if not os.path.isabs(entry["file"]) else os.path.relpath(entry["file"], root)
            name = os.path.basename(path)
            if (not path.startswith("cc/core/") or name.endswith("_test.cc")
                    or name == "testing.h"):
                continue
            file_lines = lines.setdefault(path, {})
            for line in entry["lines"]:
                number = line["line_number"]
                file_lines[number] = file_lines.get(number, False) or line["count"] > 0
            file_functions = functions.setdefault(path, {})
            for function in entry["functions"]:
                name = function["demangled_name"].replace("(anonymous namespace)::", "")
                name = name.split("(")[0]
                record = file_functions.setdefault(function["start_line"], [name, False])
                record[1] = record[1] or function["execution_count"] > 0


def share(flags):
    flags = list(flags)
    return sum(flags), len(flags)


print(f"{'file':34} {'lines':>17} {'functions':>15}")
totals = [0, 0, 0, 0]
for path in sorted(lines):
    covered_lines, all_lines = share(lines[path].values())
    if all_lines == 0:  # declarations only
        continue
    covered_functions, all_functions = share(ran for _, ran in functions[path].values())
    for i, value in enumerate((covered_lines, all_lines, covered_functions, all_functions)):
        totals[i] += value
    print(f"{path:34} {covered_lines:>5}/{all_lines:<5} {100 * covered_lines / all_lines:4.0f}%"
          f" {covered_functions:>5}/{all_functions:<5}"
          f" {100 * covered_functions / max(all_functions, 1):4.0f}%")
print(f"{'total':34} {totals[0]:>5}/{totals[1]:<5} {100 * totals[0] / totals[1]:4.0f}%"
      f" {totals[2]:>5}/{totals[3]:<5} {100 * totals[2] / totals[3]:4.0f}%")
if "--uncovered" in options:
    for path in sorted(functions):
        uncovered = [f"{line}: {name}" for line, (name, ran) in sorted(functions[path].items())
                     if not ran]
        missed = [str(line) for line, ran in sorted(lines[path].items()) if not ran]
        if missed:
            print(f"\n{path}: lines {' '.join(missed)}")
            for function in uncovered:
                print(f"  function {function}")
EOF
