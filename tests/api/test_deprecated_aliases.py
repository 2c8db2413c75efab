"""Public names that moved keep an alias at the old path: importing it warns with a
`DeprecationWarning` naming the new path, attributed to the importing code (so that Python's
default filters show it in a script), and gives the new module's objects themselves.

The modules moved from the package root to `tf_embedding/cluster/` in 0.2.0 (CHANGELOG.md);
README.md documented `tf_embedding.chief.run(main)` for chief programs before that.
"""

import importlib
import sys
import types

import pytest

import tf_embedding

pytestmark = pytest.mark.unit

# Old path -> new path, and a public and a private name of each.
MOVED = {
    "tf_embedding.chief": ("tf_embedding.cluster.chief", "run", "exit_chief"),
    "tf_embedding.local_cluster": ("tf_embedding.cluster.local_cluster", "loopback_cluster",
                                   "ServerProcess"),
    "tf_embedding.private_network": ("tf_embedding.cluster.private_network", "PrivateNetwork",
                                     "_READY"),
    "tf_embedding.interfaces": ("tf_embedding.cluster.network_interfaces", "up_interfaces",
                                "_IFF_UP"),
}


def _fresh_import(name: str) -> types.ModuleType:
    """Imports `name` as an `import` statement here would the first time (the warning comes
    once per process)."""
    sys.modules.pop(name, None)
    tf_embedding.__dict__.pop(name.rpartition(".")[2], None)
    __import__(name)
    return sys.modules[name]


@pytest.fixture(autouse=True)
def _forget_the_aliases():
    yield
    for name in MOVED:
        sys.modules.pop(name, None)
        tf_embedding.__dict__.pop(name.rpartition(".")[2], None)


@pytest.mark.parametrize("old", list(MOVED))
def test_importing_the_old_path_warns_naming_the_new_one(old):
    new = MOVED[old][0]
    with pytest.warns(DeprecationWarning) as record:
        _fresh_import(old)
    messages = [str(warning.message) for warning in record
                if issubclass(warning.category, DeprecationWarning)]
    assert messages == [f"{old} is deprecated: import {new} instead (moved in tf_embedding "
                        "0.2.0)"]
    # Attributed to the code that imported it, not to the import machinery.
    assert [w.filename for w in record if w.category is DeprecationWarning] == [__file__]


@pytest.mark.parametrize("old", list(MOVED))
def test_the_old_path_gives_the_new_modules_objects(old):
    new_name, public, private = MOVED[old]
    new = importlib.import_module(new_name)
    with pytest.warns(DeprecationWarning):
        alias = _fresh_import(old)
    assert getattr(alias, public) is getattr(new, public)
    assert getattr(alias, private) is getattr(new, private)
    names = {name for name in vars(new) if not name.startswith("_")}
    assert names <= set(vars(alias))
    for name in names:
        assert getattr(alias, name) is getattr(new, name), name


def test_from_import_of_the_documented_chief_runner():
    """README.md's `tf_embedding.chief.run(main)`, as a chief program wrote it."""
    from tf_embedding.cluster import chief  # pylint: disable=import-outside-toplevel
    sys.modules.pop("tf_embedding.chief", None)
    tf_embedding.__dict__.pop("chief", None)
    with pytest.warns(DeprecationWarning, match="import tf_embedding.cluster.chief instead"):
        from tf_embedding.chief import run  # pylint: disable=import-outside-toplevel
    assert run is chief.run
