"""The long tests that ``tests/conftest.py`` starts first still exist under their names (a renamed one would
silently lose its early start and pin a pytest-xdist worker at the end of ``make test``)."""

from __future__ import annotations

from pathlib import Path

from tests.conftest import _LONGEST

ROOT = Path(__file__).resolve().parents[1]


def test_every_longest_test_is_defined_where_its_node_id_says():
    assert _LONGEST[0] == "tests/test_mypy.py::test_mypy_reports_no_error"
    for node in _LONGEST:
        path, name = node.split("::")
        assert f"\ndef {name}(" in (ROOT / path).read_text(), f"{node} is not defined: update _LONGEST"
