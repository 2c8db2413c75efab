"""Builds tf_embedding and its op library, tf_embedding/_ops.so.

Metadata lives in pyproject.toml; this file only adds the op library build.
The library is compiled against the TensorFlow importable by the Python that
runs the build, so install with `pip install --no-build-isolation .` from the
environment that will use it (docs/build.md).
"""

import ast
import concurrent.futures
import glob
import hashlib
import json
import os
import re
import shlex
import shutil
import subprocess
import sys

from setuptools import Extension, setup
from setuptools.command.build_ext import build_ext
from setuptools.errors import CompileError, LinkError

ROOT = os.path.dirname(os.path.abspath(__file__))
OPS_EXTENSION = "tf_embedding._ops"
OPS_FILE = "_ops.so"
BUILD_INFO_FILE = "_build_info.py"
# Objects are kept here across builds (pip and editable builds use throwaway
# temp dirs), so a rebuild recompiles only what changed.
OBJECT_DIR = os.path.join(ROOT, "build", "ops")
# Each compiler process needs ~0.6 GiB for the TensorFlow headers; more with -j N.
DEFAULT_JOBS = 2
# XLA's headers (the XLA kernels in cc/xla) include two libraries that TensorFlow ships under
# include/external/ instead of on its include path.
XLA_EXTERNAL_INCLUDES = ("highwayhash", os.path.join("farmhash_archive", "src"))

# Same query as third_party/tf/tf_configure.bzl. Run in a child process so the
# build process itself never imports TensorFlow.
_TF_QUERY = """
import json
import tensorflow as tf
print(json.dumps({
    "version": tf.__version__,
    "include": tf.sysconfig.get_include(),
    "compile_flags": tf.sysconfig.get_compile_flags(),
    "link_flags": tf.sysconfig.get_link_flags(),
}))
"""


def shared_compile_flags():
    """COPTS of copts.bzl, the flags every C++ build of the library shares (this one, Bazel's
    and cc/core's tests), which say there why each is needed."""
    with open(os.path.join(ROOT, "copts.bzl")) as f:
        module = ast.parse(f.read())
    return next(ast.literal_eval(node.value) for node in module.body
                if isinstance(node, ast.Assign) and node.targets[0].id == "COPTS")


def ops_sources():
    """Every C++ translation unit under cc/ except unit tests (`*_test.cc`)."""
    return sorted(
        path
        for path in glob.glob(os.path.join("cc", "**", "*.cc"), root_dir=ROOT, recursive=True)
        if not path.endswith("_test.cc")
    )


def query_tensorflow():
    env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="3")
    result = subprocess.run(
        [sys.executable, "-c", _TF_QUERY], capture_output=True, text=True, env=env
    )
    if result.returncode != 0:
        raise CompileError(
            "tf_embedding compiles its op library against the installed TensorFlow, "
            f"but {sys.executable} cannot import it:\n{result.stderr.strip()}\n"
            "Install TensorFlow 2.21 first (pip install 'tensorflow-cpu==2.21.*') and "
            "build without isolation: pip install --no-build-isolation ."
        )
    return json.loads(result.stdout.strip().splitlines()[-1])


def system_includes(flags):
    """Turns -I into -isystem so -Wall reports our warnings, not TensorFlow's."""
    return ["-isystem" + flag[2:] if flag.startswith("-I") else flag for flag in flags]


def xla_includes(tf):
    return ["-isystem" + os.path.join(tf["include"], "external", path)
            for path in XLA_EXTERNAL_INCLUDES]


def link_flags(tf):
    """TensorFlow's link flags plus libtensorflow_cc, next to libtensorflow_framework: it holds
    the tf2xla and XLA builder symbols of the XLA kernels. TensorFlow's Python module loads it
    anyway, so the library costs nothing in a process that never compiles with XLA."""
    flags = list(tf["link_flags"])
    flags += [flag.replace("libtensorflow_framework", "libtensorflow_cc") for flag in flags
              if flag.startswith("-l:libtensorflow_framework")]
    return flags


def dependencies(depfile):
    """Files listed in a gcc -MMD depfile (everything after the target)."""
    with open(depfile) as f:
        text = f.read().replace("\\\n", " ")
    _, _, prerequisites = text.partition(": ")
    return [p.replace("\\ ", " ") for p in re.split(r"(?<!\\)\s+", prerequisites) if p]


def up_to_date(obj, depfile):
    if not (os.path.exists(obj) and os.path.exists(depfile)):
        return False
    built = os.path.getmtime(obj)
    for path in dependencies(depfile):
        path = os.path.join(ROOT, path)
        if not os.path.exists(path) or os.path.getmtime(path) > built:
            return False
    return True


class BuildOps(build_ext):
    """Compiles cc/ into one op library instead of a Python extension module."""

    def get_ext_filename(self, fullname):
        # tf.load_op_library takes any path; a fixed name lets the loader,
        # Bazel and .gitignore agree on it regardless of the Python ABI tag.
        # setuptools passes the dotted name here, distutils the last part.
        filename = super().get_ext_filename(fullname)
        if fullname in (OPS_EXTENSION, OPS_EXTENSION.rpartition(".")[2]):
            return os.path.join(os.path.dirname(filename), OPS_FILE)
        return filename

    def run(self):
        inplace = self.inplace
        super().run()
        # setuptools copies only the library into the source tree for
        # `build_ext --inplace` and editable installs; the loader needs both.
        if inplace:
            self.copy_file(
                self._build_info_path, os.path.join(ROOT, "tf_embedding", BUILD_INFO_FILE)
            )

    def build_extension(self, ext):
        if ext.name != OPS_EXTENSION:
            return super().build_extension(ext)
        if not ext.sources:
            raise CompileError("no C++ sources under cc/: nothing to build")
        tf = query_tensorflow()
        cxx = shlex.split(os.environ.get("CXX", "c++"))
        launcher = [ccache] if (ccache := shutil.which("ccache")) else []
        compile_flags = [
            *shared_compile_flags(), "-fPIC", "-DNDEBUG", "-Wall", "-I.",
            *system_includes(tf["compile_flags"]), *xla_includes(tf),
        ]
        # One object directory per compiler, flag set and TensorFlow, so a
        # changed flag or an upgraded TensorFlow never reuses stale objects.
        key = hashlib.sha256(
            json.dumps([cxx, compile_flags, tf["version"]]).encode()
        ).hexdigest()[:12]
        object_dir = os.path.join(OBJECT_DIR, key)

        def compile_one(source):
            obj = os.path.join(object_dir, os.path.splitext(source)[0] + ".o")
            depfile = obj[:-2] + ".d"
            if not self.force and up_to_date(obj, depfile):
                return obj, None
            os.makedirs(os.path.dirname(obj), exist_ok=True)
            command = [
                *launcher, *cxx, *compile_flags, "-MMD", "-MF", depfile,
                "-c", source, "-o", obj,
            ]
            result = subprocess.run(
                command, cwd=ROOT, capture_output=True, text=True
            )
            return obj, result

        jobs = self.parallel or DEFAULT_JOBS
        failed = []
        objects = []
        with concurrent.futures.ThreadPoolExecutor(max_workers=jobs) as pool:
            for source, (obj, result) in zip(
                ext.sources, pool.map(compile_one, ext.sources)
            ):
                objects.append(obj)
                if result is None:
                    continue
                print(f"compiled {source}", flush=True)
                output = (result.stdout + result.stderr).strip()
                if output:
                    print(output, file=sys.stderr, flush=True)
                if result.returncode != 0:
                    failed.append(source)
        if failed:
            raise CompileError(f"failed to compile {', '.join(failed)}")

        library = self.get_ext_fullpath(ext.name)
        os.makedirs(os.path.dirname(library), exist_ok=True)
        link = [*cxx, "-shared", "-o", library, *objects, *link_flags(tf)]
        result = subprocess.run(link, cwd=ROOT, capture_output=True, text=True)
        if result.returncode != 0:
            raise LinkError(f"linking {library} failed:\n{result.stdout}{result.stderr}")

        self._build_info_path = os.path.join(os.path.dirname(library), BUILD_INFO_FILE)
        with open(self._build_info_path, "w") as f:
            f.write(
                '"""Written by setup.py: the TensorFlow the op library was built against."""\n'
                "\n"
                f"TF_VERSION = {tf['version']!r}\n"
            )


setup(
    ext_modules=[Extension(OPS_EXTENSION, sources=ops_sources())],
    cmdclass={"build_ext": BuildOps},
)
