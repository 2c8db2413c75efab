#!/bin/sh
echo "bazel coverage is not supported offline (third_party/remote_coverage_tools_shim)" >&2
exit 1
