"""The project's shape rules, held by a test: no library module over 500 lines, no C++ file over
500, no library function over 60 lines, and no import cycle between the library's modules."""

import ast
import pathlib

import pytest

pytestmark = pytest.mark.unit

ROOT = pathlib.Path(__file__).resolve().parents[2]
LIBRARY = ROOT / "tf_embedding"
MAX_MODULE_LINES = 500
MAX_FUNCTION_LINES = 60
MAX_CPP_LINES = 500


def _modules() -> list[pathlib.Path]:
    return sorted(LIBRARY.rglob("*.py"))


def _module_name(path: pathlib.Path) -> str:
    parts = path.relative_to(ROOT).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _line_count(path: pathlib.Path) -> int:
    return len(path.read_text().splitlines())


def test_no_library_module_over_500_lines():
    long = {str(path.relative_to(ROOT)): _line_count(path) for path in _modules()
            if _line_count(path) > MAX_MODULE_LINES}
    assert not long


def test_no_cpp_file_over_500_lines():
    long = {}
    for path in sorted((ROOT / "cc").rglob("*")):
        name = str(path.relative_to(ROOT))
        if path.suffix in (".cc", ".h"):
            if _line_count(path) > MAX_CPP_LINES:
                long[name] = _line_count(path)
    assert not long


def test_no_library_function_over_60_lines():
    long = {}
    for path in _modules():
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                lines = node.end_lineno - node.lineno + 1
                if lines > MAX_FUNCTION_LINES:
                    long[f"{path.relative_to(ROOT)}:{node.name}"] = lines
    assert not long


def _imports(path: pathlib.Path, modules: set[str]) -> set[str]:
    """The library modules `path` imports (anywhere in it, also inside functions): for
    `from package import name`, the submodule `package.name` if there is one, else the package."""
    found = set()
    package = _module_name(path)
    if path.name != "__init__.py":
        package = package.rpartition(".")[0]
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = package.split(".")[:len(package.split(".")) - node.level + 1]
                base = ".".join(anchor + ([base] if base else []))
            for alias in node.names:
                submodule = f"{base}.{alias.name}"
                found.add(submodule if submodule in modules else base)
    return {name for name in found if name in modules}


def _cycle(graph: dict[str, set[str]]) -> list[str] | None:
    """One import cycle of `graph`, or None."""
    state: dict[str, int] = {}  # 1: on the current path, 2: done
    path: list[str] = []

    def visit(module: str) -> list[str] | None:
        state[module] = 1
        path.append(module)
        for imported in sorted(graph[module]):
            if state.get(imported) == 1:
                return path[path.index(imported):] + [imported]
            if imported not in state and (cycle := visit(imported)):
                return cycle
        path.pop()
        state[module] = 2
        return None

    for module in sorted(graph):
        if module not in state and (cycle := visit(module)):
            return cycle
    return None


def test_no_import_cycle_between_library_modules():
    paths = {_module_name(path): path for path in _modules()}
    modules = set(paths)
    # A package's __init__ is not counted as imported by its own submodules' `from package
    # import submodule` (that names the submodule), nor does importing a submodule count as
    # importing its parent package.
    graph = {name: _imports(path, modules) - {name} for name, path in paths.items()}
    assert _cycle(graph) is None


@pytest.mark.parametrize("graph, expected", [
    ({"a": {"b"}, "b": {"a"}}, ["a", "b", "a"]),
    ({"a": {"b"}, "b": {"c"}, "c": set()}, None),
])
def test_the_cycle_finder_finds_cycles(graph, expected):
    assert _cycle(graph) == expected
