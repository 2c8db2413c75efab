#!/usr/bin/env bash
# Builds the op library with AddressSanitizer and runs every fuzz test against it.
#
# setup.py compiles every cc/**/*.cc except unit tests (*_test.cc) with -fsanitize=address (its
# objects under build/ops/, apart from the regular build's) and links the library into $OUT_DIR
# (default /tmp/tf_embedding_asan), then tests/ops/test_fuzz_*.py run with g++'s libasan
# preloaded: the Python interpreter is not instrumented, so the ASan runtime has to be loaded
# before anything else. libstdc++ is preloaded right after it because Python does not link it,
# and ASan's C++-exception interceptor must find it at start-up (otherwise the first exception
# TensorFlow throws aborts with "CHECK failed ... real___cxa_throw"). Leak detection is off:
# Python and TensorFlow keep allocations alive until exit by design.
#
# --long (first argument) runs every property with 10,000 examples instead of each file's
# default (TF_EMBEDDING_FUZZ_EXAMPLES, tests/helpers/fuzz_settings.py) and prints hypothesis'
# statistics of each property (docs/reliability.md records such runs). Other arguments go to pytest.
# Environment: PYTHON (default .venv/bin/python if present, else python3), OUT_DIR, JOBS
# (parallel compiles, default 2).
set -euo pipefail
cd "$(dirname "$0")/.."

if [[ ${1:-} == --long ]]; then
    shift
    export TF_EMBEDDING_FUZZ_EXAMPLES=10000
    set -- --hypothesis-show-statistics "$@"
fi

python=${PYTHON:-}
if [[ -z $python ]]; then
    if [[ -x .venv/bin/python ]]; then python=.venv/bin/python; else python=python3; fi
fi
out_dir=${OUT_DIR:-/tmp/tf_embedding_asan}
jobs=${JOBS:-2}

# setup.py builds it, so it has the regular build's sources and flags; CXX adds the sanitizer
# to every compile and to the link (its objects are kept apart, keyed by the compiler command).
CXX="g++ -fsanitize=address -fno-omit-frame-pointer -g" "$python" setup.py -q build_ext \
    --parallel "$jobs" --build-lib "$out_dir" --build-temp "$out_dir/temp"
library="$out_dir/tf_embedding/_ops.so"

echo "running tests/ops/test_fuzz_*.py against $library"
LD_PRELOAD="$(g++ -print-file-name=libasan.so) $(g++ -print-file-name=libstdc++.so)" \
    ASAN_OPTIONS=detect_leaks=0 \
    TF_EMBEDDING_OPS_LIBRARY="$library" \
    TF_CPP_MIN_LOG_LEVEL=3 \
    "$python" -m pytest -q -p no:cacheprovider tests/ops/test_fuzz_*.py "$@"
