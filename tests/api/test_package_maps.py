"""Each package's `__init__.py` docstring is its map (DESIGN.md, "Layout"), and the package root
holds the public API only.

The rule: a module `name.py` or a subpackage `name/` of a package is named in the package's map
when a code span (text between backticks) of its `__init__.py` docstring is `name`, `name.py` or
`name/`, or begins with `name.` or `name/` (a name inside it: `base._Optimizer`), or is or begins
with its dotted path (`tf_embedding.sharded.layout`). A plain word does not count: "the Keras
layer" says nothing about `layer.py`. Every module counts, private ones and `__main__.py` too.
"""

import ast
import pathlib
import re

import pytest

pytestmark = pytest.mark.unit

ROOT = pathlib.Path(__file__).resolve().parents[2]
LIBRARY = ROOT / "tf_embedding"

# What stays at the root besides `__init__.py`: the modules of the public names and what they
# share (configs, their argument checks, ops, serving, the replicated class), the op library's
# loader, the two commands (`python -m tf_embedding`, `python -m tf_embedding.server`) and the
# packages.
ROOT_MODULES = {
    "__main__.py", "_loader.py", "argument_checks.py", "combiners.py", "config.py",
    "dynamic_index_ops.py", "dynamic_vocabulary.py", "embedding_base.py", "for_serving.py",
    "keyed_lookup.py", "ops.py", "pooled_lookup.py", "replicated.py", "serialization.py",
    "server.py", "serving_keys.py", "sharding_plan.py",
}
# Written by the build next to the op library (setup.py), not kept in the tree.
GENERATED = {"_build_info.py"}
ROOT_PACKAGES = {
    "cluster", "feature_column", "feature_inputs", "job", "keras", "keras_rs", "optimizers",
    "sharded", "tpu",
}
# Deprecated aliases, not API: the modules that moved to `cluster/` in 0.2.0 keep their old path,
# which warns on import and gives the new module's objects (tests/api/test_deprecated_aliases.py),
# until a later release removes them (CHANGELOG.md).
DEPRECATED_ALIASES = {"chief.py", "interfaces.py", "local_cluster.py", "private_network.py"}


def _packages() -> list[pathlib.Path]:
    return sorted(path.parent for path in LIBRARY.rglob("__init__.py"))


def _members(package: pathlib.Path) -> list[pathlib.Path]:
    """The modules (other than `__init__.py` and the build's) and subpackages of `package`."""
    return sorted(path for path in package.iterdir()
                  if (path.suffix == ".py" and path.name not in ("__init__.py", *GENERATED))
                  or (path.is_dir() and (path / "__init__.py").exists()))


def _dotted(path: pathlib.Path) -> str:
    return ".".join(path.relative_to(ROOT).with_suffix("").parts)


def _named(member: pathlib.Path, spans: list[str]) -> bool:
    name = member.stem if member.suffix == ".py" else member.name
    dotted = _dotted(member)
    return any(span in (name, f"{name}.py", f"{name}/", dotted)
               or span.startswith((f"{name}.", f"{name}/", f"{dotted}."))
               for span in spans)


def _unnamed(package: pathlib.Path) -> list[str]:
    docstring = ast.get_docstring(ast.parse((package / "__init__.py").read_text())) or ""
    spans = re.findall(r"`([^`\n]+)`", docstring)
    return [member.name for member in _members(package) if not _named(member, spans)]


@pytest.mark.parametrize("package", _packages(),
                         ids=lambda path: str(path.relative_to(ROOT)))
def test_every_module_is_named_in_its_packages_map(package):
    assert not _unnamed(package), (
        f"name each of these in {package.relative_to(ROOT)}/__init__.py's docstring, as a code "
        f"span, with its job")


def test_the_package_root_holds_only_the_public_api():
    members = _members(LIBRARY)
    assert {path.name for path in members if path.is_file()} == ROOT_MODULES | DEPRECATED_ALIASES
    assert {path.name for path in members if path.is_dir()} == ROOT_PACKAGES


def test_the_task_command_at_the_root_only_runs_the_cluster_server():
    """`python -m tf_embedding.server` (the command of every ps and worker task) stays; its code
    lives in `tf_embedding.cluster.server`."""
    tree = ast.parse((LIBRARY / "server.py").read_text())
    assert not [node for node in ast.walk(tree)
                if isinstance(node, (ast.FunctionDef, ast.ClassDef, ast.Assign))]
    imported = {alias.name if isinstance(node, ast.Import) else node.module
                for node in ast.walk(tree) if isinstance(node, (ast.Import, ast.ImportFrom))
                for alias in node.names}
    assert imported == {"sys", "tf_embedding.cluster.server"}


@pytest.mark.parametrize("spans, named", [
    (["group"], True), (["group.py"], True), (["group.Group"], True),
    (["tf_embedding.sharded.multi_worker.group"], True), (["grouping"], False),
    (["row_group"], False), ([], False),
])
def test_the_rule(spans, named):
    member = LIBRARY / "sharded" / "multi_worker" / "group.py"
    assert _named(member, spans) is named
