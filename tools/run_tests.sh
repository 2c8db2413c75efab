#!/usr/bin/env bash
# Runs the tests in .venv, installing everything first if there is no .venv.
# Arguments go to pytest; without any, it runs everything under tests/ (Keras 3), then the
# Keras layer's tests under tf_keras.
set -euo pipefail
cd "$(dirname "$0")/.."
if [[ ! -x .venv/bin/python ]]; then
    tools/install.sh
fi
# Recompile C++ changed since the last build, so tests never run a stale
# op library (a few seconds when nothing changed).
.venv/bin/python setup.py -q build_ext --inplace
if (($#)); then
    exec .venv/bin/python -m pytest -q "$@"
fi
.venv/bin/python -m pytest -q
# The Keras layers again under tf_keras (Keras 2), with TFRS's layer as an oracle: a process
# picks its Keras once, when TensorFlow is first imported.
TF_USE_LEGACY_KERAS=1 exec .venv/bin/python -m pytest -q tests/keras tests/feature_column \
    tests/sharded/test_lookup_profile.py
