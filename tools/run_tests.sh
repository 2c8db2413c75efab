#!/usr/bin/env bash
# Runs the tests in .venv, installing everything first if there is no .venv.
#
#   tools/run_tests.sh                  everything: tests/ under Keras 3, then the Keras
#                                       layers again under tf_keras
#   tools/run_tests.sh --fast           the same two parts without the slow and cluster tests
#   tools/run_tests.sh [--fast] ARGS    pytest ARGS, in one Keras 3 session
#
# The two parts run in parallel test processes (pytest-xdist, one per core). Both parts run
# even when the first fails; the last lines give each part's result, and the exit status is
# non-zero when either failed.
set -uo pipefail
cd "$(dirname "$0")/.."
if [[ ! -x .venv/bin/python ]]; then
    tools/install.sh || exit
fi
# Recompile C++ changed since the last build, so tests never run a stale
# op library (a few seconds when nothing changed).
.venv/bin/python setup.py -q build_ext --inplace || exit

# Each test module's tests stay in one process (--dist loadfile): several modules set up a
# training run or a cluster once for all their tests.
parallel=(-n auto --dist loadfile)
tier=()
if [[ ${1:-} == --fast ]]; then
    shift
    tier=(-m "not slow and not cluster")
fi
if (($#)); then
    exec .venv/bin/python -m pytest -q "${parallel[@]}" "${tier[@]}" "$@"
fi

.venv/bin/python -m pytest -q "${parallel[@]}" "${tier[@]}"
keras3=$?
# The Keras layers again under tf_keras (Keras 2), with TFRS's layer as an oracle: a process
# picks its Keras once, when TensorFlow is first imported.
TF_USE_LEGACY_KERAS=1 .venv/bin/python -m pytest -q "${parallel[@]}" "${tier[@]}" tests/keras \
    tests/feature_column tests/sharded/test_lookup_profile.py \
    tests/multi_worker/test_multi_worker_keras.py
tf_keras=$?

outcome() {
    if (($1 == 0)); then echo passed; else echo "FAILED (pytest exit status $1)"; fi
}
echo "tests under Keras 3: $(outcome $keras3)"
echo "tests under tf_keras: $(outcome $tf_keras)"
((keras3 == 0 && tf_keras == 0))
