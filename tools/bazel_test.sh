#!/usr/bin/env bash
# Builds the op library with Bazel and runs the op tests against it.
#
#   tools/bazel_test.sh [python]
#
# python: the interpreter whose TensorFlow Bazel builds against and that runs
# pytest (default: python3 on PATH). Extra pytest arguments go in $PYTEST_ARGS.
set -euo pipefail

# The op tests: the ones that exercise the library directly.
OP_TESTS_GLOB='tests/ops/test_*ops*.py'

python=${1:-python3}
if [[ $python != */* ]]; then
    python=$(command -v "$python")
fi
# Absolute (before the cd below), but not symlink-resolved: a venv's python is
# a symlink to the base interpreter, which lacks the venv's packages.
python="$(cd "$(dirname "$python")" && pwd)/$(basename "$python")"
cd "$(dirname "$0")/.."

bazel build --repo_env=TF_PYTHON_BIN_PATH="$python" //:tf_embedding_ops
library="$(bazel info --repo_env=TF_PYTHON_BIN_PATH="$python" bazel-bin)/_ops.so"
export TF_EMBEDDING_OPS_LIBRARY=$library

shopt -s nullglob
# shellcheck disable=SC2206  # the glob is meant to expand here
op_tests=($OP_TESTS_GLOB)
shopt -u nullglob
if ((${#op_tests[@]} == 0)); then
    echo "no op tests ($OP_TESTS_GLOB); checking that $library loads" >&2
    exec "$python" -c "from tf_embedding import _loader; _loader.load_ops(); print('loaded')"
fi
# shellcheck disable=SC2086  # PYTEST_ARGS is a list of words
exec "$python" -m pytest -q ${PYTEST_ARGS:-} "${op_tests[@]}"
