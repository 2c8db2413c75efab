"""The public namespace mirrors tf.tpu.experimental.embedding, name for name, and the extensions
docs/api_differences.md lists."""

import re
from pathlib import Path

import pytest
import tensorflow as tf

import tf_embedding

from helpers.paths import REPO_ROOT

pytestmark = pytest.mark.unit


API_DIFFERENCES = Path(REPO_ROOT) / "docs" / "api_differences.md"


def _stock_public_names() -> set[str]:
    return {name for name in dir(tf.tpu.experimental.embedding) if not name.startswith("_")}


def _documented_absent_names() -> set[str]:
    """Public names in docs/api_differences.md's "Deliberately absent" table (first column, a
    name alone in backticks)."""
    text = API_DIFFERENCES.read_text()
    section = text.split("## Deliberately absent", 1)[1].split("\n#", 1)[0]
    return set(re.findall(r"^\| `(\w+)` \|", section, flags=re.MULTILINE))


def test_every_stock_name_exists_or_is_documented_absent():
    absent = _documented_absent_names()
    missing = {name for name in _stock_public_names() - absent
               if not hasattr(tf_embedding, name)}
    assert not missing, f"stock names neither provided nor documented as absent: {missing}"


def test_documented_absent_names_are_really_absent_and_stock():
    absent = _documented_absent_names()
    assert absent, "docs/api_differences.md lists no deliberately absent names"
    assert absent <= _stock_public_names()
    assert not any(hasattr(tf_embedding, name) for name in absent)


def _documented_extensions() -> set[str]:
    """Names in docs/api_differences.md's "Extensions" table (first column)."""
    section = API_DIFFERENCES.read_text().split("## Extensions", 1)[1].split("\n#", 1)[0]
    return set(re.findall(r"^\| `(\w+)` \|", section, flags=re.MULTILINE))


def test_all_matches_the_provided_names():
    assert set(tf_embedding.__all__) == (
        _stock_public_names() - _documented_absent_names()) | _documented_extensions()
    for name in tf_embedding.__all__:
        assert getattr(tf_embedding, name) is not None
