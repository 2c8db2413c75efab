#!/usr/bin/env bash
# Line coverage of the tf_embedding package by the tests (coverage.py), per package, and the
# library functions no test reaches:
#
#   tools/coverage_python.sh                       # the whole suite (tests/)
#   tools/coverage_python.sh tests/test_xla.py ... # a part of it: any pytest arguments
#
# Only the pytest process is measured: code that runs only in the subprocesses some tests
# start (the `tf-embedding` command's runs, cluster tasks, fresh-process scripts) counts as not
# reached. Data and the JSON report go to build/coverage_python/. Run it with the Python of the
# environment the tests use (PYTHON=..., default `python`); it needs the `coverage` package.
set -euo pipefail

root=$(cd "$(dirname "$0")/.." && pwd)
python=${PYTHON:-python}
out="$root/build/coverage_python"
mkdir -p "$out"
rm -f "$out/.coverage"
cd "$root"
if (($# == 0)); then set -- tests; fi
status=0
"$python" -m coverage run --data-file="$out/.coverage" --source=tf_embedding \
    -m pytest -q -p no:cacheprovider "$@" || status=$?
"$python" -m coverage json --data-file="$out/.coverage" -o "$out/coverage.json" -q
"$python" - "$out/coverage.json" <<'EOF'
import collections
import json
import sys

with open(sys.argv[1]) as f:
    report = json.load(f)
packages = collections.defaultdict(lambda: [0, 0])
unreached = []
for path, data in sorted(report["files"].items()):
    package = path.rsplit("/", 1)[0]
    summary = data["summary"]
    packages[package][0] += summary["covered_lines"]
    packages[package][1] += summary["num_statements"]
    for name, function in data.get("functions", {}).items():
        if name and function["summary"]["num_statements"] and not function["executed_lines"]:
            unreached.append(f"{path}: {name}")
print(f"\n{'package':36} {'statements':>18}")
for package, (covered, total) in sorted(packages.items()):
    print(f"{package:36} {covered:>6}/{total:<6} {100 * covered / max(total, 1):4.0f}%")
totals = report["totals"]
print(f"{'total':36} {totals['covered_lines']:>6}/{totals['num_statements']:<6} "
      f"{totals['percent_covered']:4.0f}%")
print(f"\nfunctions no test reached ({len(unreached)}):")
for line in unreached:
    print(f"  {line}")
EOF
exit $status
