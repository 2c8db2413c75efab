"""The project's shape rules, held by a test.

* Python, in the library (tf_embedding/) and in tools/: no module over 500 lines, no function
  over 60 (from its `def` line to its last).
* C++ (cc/): no .cc or .h file over 500 lines, no function body over 60 (from its opening
  brace's line to its closing brace's line), found by the brace-matching scan below.
* No import cycle between the library's modules.

There are no exceptions: code that breaks a rule is split (by job) until it meets it.
"""

import ast
import pathlib
import re
from typing import Sequence

import pytest

pytestmark = pytest.mark.unit

ROOT = pathlib.Path(__file__).resolve().parents[2]
LIBRARY = ROOT / "tf_embedding"
# The trees of Python code the length rules hold for.
PYTHON_TREES = ("tf_embedding", "tools")
MAX_MODULE_LINES = 500
MAX_FUNCTION_LINES = 60
MAX_CPP_LINES = 500
MAX_CPP_FUNCTION_LINES = 60


def _python_files(tree: str) -> list[pathlib.Path]:
    return sorted((ROOT / tree).rglob("*.py"))


def _modules() -> list[pathlib.Path]:
    return _python_files("tf_embedding")


def _module_name(path: pathlib.Path) -> str:
    parts = path.relative_to(ROOT).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _line_count(path: pathlib.Path) -> int:
    return len(path.read_text().splitlines())


def _cpp_files() -> list[pathlib.Path]:
    return [path for path in sorted((ROOT / "cc").rglob("*")) if path.suffix in (".cc", ".h")]


@pytest.mark.parametrize("tree", PYTHON_TREES)
def test_no_python_module_over_500_lines(tree):
    long = {str(path.relative_to(ROOT)): _line_count(path) for path in _python_files(tree)
            if _line_count(path) > MAX_MODULE_LINES}
    assert not long


def test_no_cpp_file_over_500_lines():
    long = {str(path.relative_to(ROOT)): _line_count(path) for path in _cpp_files()
            if _line_count(path) > MAX_CPP_LINES}
    assert not long


@pytest.mark.parametrize("tree", PYTHON_TREES)
def test_no_python_function_over_60_lines(tree):
    long = {}
    for path in _python_files(tree):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                lines = node.end_lineno - node.lineno + 1
                if lines > MAX_FUNCTION_LINES:
                    long[f"{path.relative_to(ROOT)}:{node.name}"] = lines
    assert not long


def test_no_cpp_function_over_60_lines():
    long = {}
    for path in _cpp_files():
        for name, first, last in cpp_functions(path.read_text()):
            if last - first + 1 > MAX_CPP_FUNCTION_LINES:
                long[f"{path.relative_to(ROOT)}:{first} {name}"] = last - first + 1
    assert not long


def test_the_cpp_scan_finds_the_functions_of_the_tree():
    """The scan sees the tree's functions: a few hundred, and these known ones (a free
    function, a member defined in its class and one outside it, a test, a lambda)."""
    found = {(path.name, name) for path in _cpp_files()
             for name, _, _ in cpp_functions(path.read_text())}
    assert len(found) > 300
    assert {("gradient_aggregation.cc", "GroupLookupsById"),
            ("csr_conversion.cc", "CsrBuilder::AddFeature"),
            ("decode_tsv_kernel.cc", "Compute"),
            ("dedup_test.cc", "TFE_TEST(NoIds)"),
            ("kernels.cc", "kRegistered (lambda)")} <= found


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


# ---------------------------------------------------------------------------------------------
# C++ function lengths, by a brace-matching scan (no C++ parser).
#
# 1. Comments, string and character literals (raw strings too) and preprocessor lines (with
#    their continuations) are blanked to spaces, newlines kept, so that no brace or quote in
#    them counts and every offset still names the same line.
# 2. At namespace and class level, each `{` is judged by its header, the text since the
#    previous `;`, `{` or `}` of that level (after access specifiers, `[[attributes]]` and
#    `template <...>`):
#    * `namespace ...`, `extern "C"`, `class`/`struct`/`union` without `(` or `=`: a scope,
#      scanned inside;
#    * in a constructor's initializer list (`) :` in the header), a brace right after a name
#      or `>` is a member's brace-initializer: skipped, the header goes on;
#    * a header with a `(` that ends in `)` (then `const`, `override`, `final`, `noexcept`,
#      `mutable`, `&` or a trailing `-> type` may follow), in an initializer list's closing `}`
#      or in a lambda's `]`: a function body;
#    * anything else (an initializer, an enum): skipped.
# 3. A function's length is its body's lines, from the `{` to its matching `}`; lambdas and
#    local classes inside it count as its own lines. Lambdas at namespace level (a
#    registration's `[] { ... }()`, an op's shape function) are functions of their own.

_CPP_PREFIX = re.compile(r"\s*(?:(?:public|private|protected)\s*:(?!:)|\[\[[^\]]*\]\])")
_CPP_TEMPLATE = re.compile(r"\s*template\s*<")
_CPP_SCOPE = re.compile(r"\s*(?:namespace|extern)\b[^(=]*$")
_CPP_CLASS = re.compile(r"\s*(?:class|struct|union)\b[^(=]*$")
_CPP_INITIALIZER_LIST = re.compile(r"\)\s*(?:noexcept\s*)?:(?!:)")
_CPP_SIGNATURE_END = re.compile(
    r"(?:\)\s*(?:(?:const|override|final|noexcept|mutable|&&?)\s*)*(?:->[^;]*)?"
    r"|\]\s*(?:mutable\s*)?)$")
_CPP_NAME = re.compile(r"(operator\s*(?:\(\)|\[\]|[^\s\w(]+)|~?[A-Za-z_]\w*(?:::~?[A-Za-z_]\w*)*)"
                       r"\s*\(")
_CPP_NOT_NAMES = ("__attribute__", "alignas", "decltype", "__declspec", "noexcept")


def _blank_cpp(text: str) -> str:
    """`text` with comments, literals and preprocessor lines as spaces (newlines kept)."""
    out, i, n, line_start = [], 0, len(text), True
    while i < n:
        c = text[i]
        if c == "\n":
            out.append(c)
            i, line_start = i + 1, True
            continue
        if line_start and c == "#":
            end = i
            while end < n and text[end] != "\n":
                end += 2 if text.startswith("\\\n", end) else 1
        elif text.startswith("//", i):
            end = text.find("\n", i)
            end = n if end < 0 else end
        elif text.startswith("/*", i):
            end = text.index("*/", i + 2) + 2
        elif c == "R" and text.startswith('"', i + 1) and not (text[i - 1:i].isalnum()
                                                               or text[i - 1:i] == "_"):
            delimiter = text[i + 2:text.index("(", i)]
            end = text.index(f"){delimiter}\"", i) + len(delimiter) + 2
        elif c in "\"'" and not (c == "'" and text[i - 1:i].isalnum()):  # not 1'000
            end = i + 1
            while text[end] != c:
                end += 2 if text[end] == "\\" else 1
            end += 1
        else:
            out.append(c)
            i, line_start = i + 1, line_start and c.isspace()
            continue
        out.append(re.sub(r"[^\n]", " ", text[i:end]))
        i, line_start = end, False
    return "".join(out)


def _matching_brace(text: str, start: int) -> int:
    depth = 0
    for i in range(start, len(text)):
        depth += {"{": 1, "}": -1}.get(text[i], 0)
        if depth == 0:
            return i
    raise ValueError(f"unbalanced brace at offset {start}")


def _plain_header(header: str) -> str:
    """A header without its access specifiers, attributes and `template <...>`."""
    while True:
        if match := _CPP_PREFIX.match(header):
            header = header[match.end():]
        elif match := _CPP_TEMPLATE.match(header):
            depth, i = 0, match.end() - 1
            for i in range(match.end() - 1, len(header)):
                depth += {"<": 1, ">": -1}.get(header[i], 0)
                if depth == 0:
                    break
            header = header[i + 1:]
        else:
            return header


def _without_groups(text: str, keywords: Sequence[str]) -> str:
    """`text` with each `keyword(...)` (balanced parentheses) blanked."""
    for keyword in keywords:
        while (start := text.find(keyword + "(")) >= 0 or (start := text.find(keyword + " (")) >= 0:
            depth, end = 0, text.index("(", start)
            for end in range(end, len(text)):
                depth += {"(": 1, ")": -1}.get(text[end], 0)
                if depth == 0:
                    break
            text = text[:start] + " " * (end + 1 - start) + text[end + 1:]
    return text


def _cpp_name(header: str, original: str) -> str:
    """A readable name for the function `header` opens (`original`: the same text, literals
    kept): its name, a macro's call (`TFE_TEST(name)`), or the variable a lambda initializes;
    ` (lambda)` added for a lambda."""
    plain = _plain_header(header)
    original = original[len(header) - len(plain):]
    blanked = _without_groups(plain, _CPP_NOT_NAMES)
    match = _CPP_NAME.search(blanked)
    if match is None:
        words = re.findall(r"\w+", blanked.split("=")[0])
        name = words[-1] if words else "?"
    else:
        name = match.group(1)
        if re.fullmatch(r"[A-Z][A-Z0-9]*_[A-Z0-9_]*", name):  # a macro
            close = _matching_paren(blanked, match.end() - 1)
            name += re.sub(r"\s+", " ", original[match.end() - 1:close + 1])
    lambda_ = re.search(r"\](\s*\([^()]*\))?[^()\]]*$", plain)
    return name + (" (lambda)" if lambda_ else "")


def _matching_paren(text: str, start: int) -> int:
    depth = 0
    for i in range(start, len(text)):
        depth += {"(": 1, ")": -1}.get(text[i], 0)
        if depth == 0:
            return i
    return len(text) - 1


def cpp_functions(source: str) -> list[tuple[str, int, int]]:
    """(name, first line, last line) of the body of each function `source` defines."""
    text = _blank_cpp(source)
    found = []

    def scan(start: int, end: int) -> None:
        i = header_start = start
        while i < end:
            if text[i] in ";}":
                header_start = i + 1
            elif text[i] == "{":
                header = text[header_start:i]
                plain, before = _plain_header(header), header.rstrip()[-1:]
                close = _matching_brace(text, i)
                if _CPP_SCOPE.match(plain) or _CPP_CLASS.match(plain):
                    scan(i + 1, close)
                    header_start = close + 1
                elif _CPP_INITIALIZER_LIST.search(header) and (before.isalnum() or before in "_>"):
                    pass  # a member's brace-initializer: the header goes on
                elif ("(" in header and _CPP_SIGNATURE_END.search(header.rstrip())) or (
                        before == "}" and _CPP_INITIALIZER_LIST.search(header)) or (
                        re.search(r"\]\s*(?:mutable\s*)?$", header)):
                    found.append((_cpp_name(header, source[header_start:i]),
                                  text.count("\n", 0, i) + 1, text.count("\n", 0, close) + 1))
                    header_start = close + 1
                i = close
            i += 1

    scan(0, len(text))
    return found


@pytest.mark.parametrize("source, expected", [
    # A function in a namespace; the body's lines, brace to brace.
    ("namespace a {\nint F(int x)\n{\n  return x;\n}\n}  // namespace a\n", [("F", 3, 5)]),
    # A class's members: a constructor whose initializer list brace-initializes a member, an
    # inline const override; access specifiers; a nested struct's member.
    ("class C : public B {\n public:\n  C(int x) : a_(x), b_{x} {\n    Run();\n  }\n"
     "  int Get() const override { return a_; }\n private:\n  struct S {\n"
     "    void Set() {}\n  };\n  int a_, b_;\n};\n",
     [("C", 3, 5), ("Get", 6, 6), ("Set", 9, 9)]),
    # Braces in comments, literals and macros count for nothing.
    ("#define M(x) \\\n  { x }\n// } {\n/* { */ const char* s = \"}\";\nchar c = '{';\n"
     "void G() {\n  const char* r = R\"doc({ })doc\";\n}\n", [("G", 6, 8)]),
    # Initializers and enums are no functions; a lambda run at namespace level is one.
    ("enum class E { kA, kB };\nconst int kArray[] = {1, 2};\n"
     "[[maybe_unused]] const bool kRegistered = [] {\n  return true;\n}();\n",
     [("kRegistered (lambda)", 3, 5)]),
    # A template with a trailing return type; a test macro; an attribute before the name.
    ("template <typename T>\nauto H(T t) -> int {\n  return 0;\n}\nTFE_TEST(Sorts) {\n}\n"
     "__attribute__((target(\"avx2\"))) void Run(int n) {\n}\n",
     [("H", 2, 4), ("TFE_TEST(Sorts)", 5, 6), ("Run", 7, 8)]),
])
def test_the_cpp_scan_finds_function_bodies(source, expected):
    assert cpp_functions(source) == expected
