#!/usr/bin/env bash
# Creates .venv (unless it exists) and installs TensorFlow, the test tools,
# matplotlib (for the tf-embedding command) and tf_embedding itself, editable,
# with its op library compiled against that TensorFlow. PYTHON picks the
# interpreter for a new .venv (default python3).
set -euo pipefail
cd "$(dirname "$0")/.."

if [[ ! -x .venv/bin/python ]]; then
    "${PYTHON:-python3}" -m venv .venv
fi
pip=(.venv/bin/python -m pip install --disable-pip-version-check --quiet)

# setuptools>=64 builds editable installs (PEP 660); without build isolation
# pip uses the venv's own build tools.
"${pip[@]}" 'setuptools>=64' wheel
# matplotlib and tensorboard: the `tf-embedding stats` histogram and the viewer of `train`'s
# summaries (the `job` extra).
"${pip[@]}" 'tensorflow-cpu==2.21.*' numpy pytest pytest-xdist hypothesis matplotlib \
    'tensorboard==2.21.*'
# tf_keras names `tensorflow` as its dependency, and pip would install that
# second, 570 MB copy of TensorFlow over tensorflow-cpu's files.
"${pip[@]}" --no-deps 'tf_keras>=2.21,<2.22'
# TensorFlow Recommenders' Keras layer is the tests' oracle for tf_embedding.keras; its
# dependencies (tensorflow, tf_keras) are the ones above.
"${pip[@]}" --no-deps 'tensorflow-recommenders==0.7.7'
# keras-rs (the `keras-rs` extra, Python 3.11+) for tf_embedding.keras_rs and its tests; its
# dependencies (keras, ml-dtypes) come with TensorFlow, and --no-deps keeps pip off them.
if .venv/bin/python -c 'import sys; sys.exit(sys.version_info < (3, 11))'; then
    "${pip[@]}" --no-deps 'keras-rs==0.4.0'
fi
# --no-build-isolation: compile against the TensorFlow installed above, not a
# fresh copy in a throwaway build environment.
"${pip[@]}" --no-build-isolation -e .
