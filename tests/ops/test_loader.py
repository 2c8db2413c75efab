"""The op library loader: build-info check, $TF_EMBEDDING_OPS_LIBRARY, load errors."""

import os
import types

import pytest
import tensorflow as tf

from tf_embedding import _loader

pytestmark = pytest.mark.unit


# The library this run is testing: Bazel's when tools/bazel_test.sh set the
# variable, else the one built into the package.
BUILT_LIBRARY = _loader.library_path()


def write_build_info(directory, version):
    (directory / "_build_info.py").write_text(f"TF_VERSION = {version!r}\n")


@pytest.fixture
def package_dir(tmp_path, monkeypatch):
    """A stand-in package directory, with a fresh, not yet loaded, loader state."""
    monkeypatch.setattr(_loader, "_PACKAGE_DIR", str(tmp_path))
    monkeypatch.setattr(_loader, "_library", None)
    monkeypatch.delenv("TF_EMBEDDING_OPS_LIBRARY", raising=False)
    return tmp_path


def test_other_tensorflow_series_is_refused_before_loading(package_dir):
    write_build_info(package_dir, "2.20.1")
    # A library that would fail to load if the loader got that far.
    (package_dir / "_ops.so").write_bytes(b"not a shared object")
    with pytest.raises(ImportError) as raised:
        _loader.load_ops()
    message = str(raised.value)
    assert "built for TensorFlow 2.20.1" in message
    assert f"TensorFlow {tf.__version__} is installed" in message
    assert "pip install --no-build-isolation" in message
    assert "cannot load" not in message


def test_other_patch_release_is_accepted(package_dir):
    major, minor = tf.__version__.split(".")[:2]
    write_build_info(package_dir, f"{major}.{minor}.99")
    os.symlink(BUILT_LIBRARY, package_dir / "_ops.so")
    assert isinstance(_loader.load_ops(), types.ModuleType)


def test_missing_build_info_says_how_to_build(package_dir):
    with pytest.raises(ImportError, match="has not been built.*pip install --no-build-isolation"):
        _loader.load_ops()


def test_missing_library_says_how_to_rebuild(package_dir):
    write_build_info(package_dir, tf.__version__)
    with pytest.raises(ImportError) as raised:
        _loader.load_ops()
    message = str(raised.value)
    assert str(package_dir / "_ops.so") in message
    assert "pip install --no-build-isolation --force-reinstall" in message
    assert isinstance(raised.value.__cause__, tf.errors.NotFoundError)


def test_env_override_is_loaded_without_build_info_check(package_dir, monkeypatch):
    write_build_info(package_dir, "1.0.0")
    monkeypatch.setenv("TF_EMBEDDING_OPS_LIBRARY", BUILT_LIBRARY)
    assert _loader.library_path() == BUILT_LIBRARY
    assert isinstance(_loader.load_ops(), types.ModuleType)


def test_env_override_load_failure_names_the_variable(package_dir, monkeypatch):
    missing = str(package_dir / "elsewhere" / "_ops.so")
    monkeypatch.setenv("TF_EMBEDDING_OPS_LIBRARY", missing)
    with pytest.raises(ImportError) as raised:
        _loader.load_ops()
    message = str(raised.value)
    assert f"$TF_EMBEDDING_OPS_LIBRARY={missing}" in message
    assert "unset TF_EMBEDDING_OPS_LIBRARY" in message
    assert "built for TensorFlow" not in message


def test_library_is_loaded_once(package_dir, monkeypatch):
    monkeypatch.setenv("TF_EMBEDDING_OPS_LIBRARY", BUILT_LIBRARY)
    first = _loader.load_ops()
    monkeypatch.setenv("TF_EMBEDDING_OPS_LIBRARY", str(package_dir / "gone.so"))
    assert _loader.load_ops() is first
