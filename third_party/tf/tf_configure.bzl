"""Repository rule exposing a pip-installed TensorFlow to Bazel (no downloads).

The Python comes from --repo_env=TF_PYTHON_BIN_PATH=/path/to/python (the
interpreter whose TensorFlow the library is built against), else from
`python3` on PATH. After upgrading TensorFlow, `bazel sync --configure` (or
`bazel shutdown`) makes Bazel see the new headers.
"""

_PYTHON_ENV = "TF_PYTHON_BIN_PATH"

# Same query as setup.py.
_QUERY = """
import tensorflow as tf
print(tf.sysconfig.get_include())
print(tf.sysconfig.get_lib())
print([f[3:] for f in tf.sysconfig.get_link_flags() if f.startswith("-l:")][0])
print(" ".join(f[2:] for f in tf.sysconfig.get_compile_flags() if f.startswith("-D")))
"""

# Top-level header directories an op kernel reaches (checked with g++ -M on
# op_kernel.h, resource_var.h, training_op_helpers.h, work_sharder.h). Every
# header globbed here is symlinked into every compile action's sandbox, so
# the full include tree (external/ alone is ~10k CUDA, LLVM, grpc headers)
# would cost seconds per action. A kernel that includes a header from
# another directory fails in the sandbox with "No such file": add it here.
_HEADER_DIRS = [
    "Eigen",
    "absl",
    "google",
    "ml_dtypes",
    "tensorflow",
    "tsl",
    "unsupported",
    "xla",
]

# XLA's headers (the XLA kernels in cc/xla) include two libraries that TensorFlow ships under
# include/external/ instead of on its include path (setup.py's XLA_EXTERNAL_INCLUDES).
_XLA_EXTERNAL_INCLUDES = ["highwayhash", "farmhash_archive/src"]

def _tf_configure_impl(rctx):
    python = rctx.os.environ.get(_PYTHON_ENV, "") or "python3"
    res = rctx.execute(
        [python, "-c", _QUERY],
        environment = {"TF_CPP_MIN_LOG_LEVEL": "3"},
        timeout = 300,
    )
    if res.return_code != 0:
        fail(("tf_configure: %s cannot import TensorFlow; pass the Python that has it " +
              "with --repo_env=%s=/path/to/python (tools/bazel_test.sh does).\n%s") %
             (python, _PYTHON_ENV, res.stderr))
    inc, lib, libname, defines = res.stdout.strip().split("\n")[-4:]

    # Symlinks, not copies: the output base stays under a megabyte.
    rctx.symlink(inc, "include")
    rctx.symlink(lib + "/" + libname, libname)
    # libtensorflow_cc holds the tf2xla and XLA builder symbols of the XLA kernels.
    cc_libname = libname.replace("libtensorflow_framework", "libtensorflow_cc")
    rctx.symlink(lib + "/" + cc_libname, cc_libname)

    rctx.file("BUILD", """\
package(default_visibility = ["//visibility:public"])

cc_library(
    name = "tf_header_lib",
    hdrs = glob({headers}),
    includes = ["include"],
    defines = {defines},
)

cc_import(
    name = "libtensorflow_framework",
    shared_library = "{libname}",
)

cc_library(
    name = "xla_external_headers",
    hdrs = glob({external_headers}),
    includes = {external_includes},
)

cc_import(
    name = "libtensorflow_cc",
    shared_library = "{cc_libname}",
)
""".format(
        headers = repr(["include/%s/**" % d for d in _HEADER_DIRS]),
        defines = repr(defines.split(" ") if defines else []),
        libname = libname,
        external_headers = repr(["include/external/%s/**/*.h" % d
                                 for d in _XLA_EXTERNAL_INCLUDES]),
        external_includes = repr(["include/external/" + d for d in _XLA_EXTERNAL_INCLUDES]),
        cc_libname = cc_libname,
    ))

tf_configure = repository_rule(
    implementation = _tf_configure_impl,
    environ = [_PYTHON_ENV],
    local = True,
)
