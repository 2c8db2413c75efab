"""The documentation's shape rules (DESIGN.md, "Layout"): every user page under docs/ (the
archive aside) at most MAX_PAGE_LINES lines, a page split by topic where its subject needs more,
runs and their history in docs/archive/; and docs/internals.md's "Python layout" naming every
module of the library by its path under tf_embedding/ (as each package's docstring names its
own: tests/api/test_package_maps.py)."""

import pathlib
import re

import pytest

pytestmark = pytest.mark.unit

ROOT = pathlib.Path(__file__).resolve().parents[2]
DOCS = ROOT / "docs"
LIBRARY = ROOT / "tf_embedding"
# "At most ~300 lines each": a table row or a code block may tip a page a few lines over.
MAX_PAGE_LINES = 310
# Written by the build next to the op library (setup.py), not kept in the tree.
GENERATED = {"_build_info.py"}


def test_no_user_page_over_the_budget():
    long = {page.name: lines for page in sorted(DOCS.glob("*.md"))
            if (lines := len(page.read_text().splitlines())) > MAX_PAGE_LINES}
    assert not long, f"split these pages by topic, or move their runs to docs/archive/: {long}"


def _layout_section() -> str:
    text = (DOCS / "internals.md").read_text()
    start = text.index("## Python layout")
    end = text.find("\n## ", start + 1)
    return text[start:end if end >= 0 else len(text)]


def test_internals_names_every_module():
    named = set(re.findall(r"`([A-Za-z0-9_/]+\.py)`", _layout_section()))
    modules = {str(path.relative_to(LIBRARY)) for path in LIBRARY.rglob("*.py")
               if path.name not in GENERATED and "__pycache__" not in path.parts}
    missing = sorted(modules - named)
    stale = sorted(named - modules - GENERATED)
    assert not missing, f"name these in docs/internals.md's Python layout: {missing}"
    assert not stale, f"docs/internals.md's Python layout names modules that do not exist: {stale}"
