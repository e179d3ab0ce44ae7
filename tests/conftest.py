"""Shared fixtures: the qwen2.5 tokenizer (built once per session) and small helpers."""

from __future__ import annotations

import json

import pytest


@pytest.fixture(scope="session")
def qwen():
    from packwise.text import load_tokenizer

    return load_tokenizer("qwen2.5")


@pytest.fixture
def write_jsonl(tmp_path):
    def write(rows, name="data.jsonl", raw_lines=None):
        path = tmp_path / name
        lines = raw_lines if raw_lines is not None else [json.dumps(r) for r in rows]
        path.write_text("".join(line + "\n" for line in lines))
        return path

    return write


#: Tests that start Ray run on one pytest-xdist worker, one after another (``make test`` runs ``-n auto
#: --dist loadgroup``): ``ray.init()`` without an address joins the newest cluster this machine started, so a
#: local session beside the two-node cluster test could join that cluster instead of starting its own.
_RAY_FILES = ("tests/integrations/test_ray.py", "tests/integrations/test_ray_cluster.py")
_RAY_TESTS = {"test_literal_special_tokens_skipped_the_same_on_the_ray_engine"}


#: The longest tests start first, in this order (wall seconds under ``-n 2`` on the shared 2-core machine,
#: 2026-12-02: mypy cold 244, SmolLM2 235, the default data through both tokenizer paths 171, SmolLM2 training
#: 98). The rest of the ``slow``-marked tests follow, then everything else (a stable sort keeps the order within).
_LONGEST = (
    "tests/test_mypy.py::test_mypy_reports_no_error",
    "tests/isolation/test_real_model.py::test_smollm2_packed_equals_alone",
    "tests/text/test_fast_path.py::test_default_data_tokens_and_masks_match_the_transformers_path",
    "tests/training/test_train_example.py::test_real_smollm2_two_steps",
    "tests/text/test_tokenizer_reload.py::test_a_changed_tokenizer_folder_is_loaded_again",
)


def _start_rank(item) -> int:
    """The index in ``_LONGEST``, then ``len(_LONGEST)`` for other ``slow``-marked tests, one more for the rest."""
    name = item.nodeid.split("[")[0]
    if name in _LONGEST:
        return _LONGEST.index(name)
    return len(_LONGEST) + (0 if item.get_closest_marker("slow") else 1)


def pytest_collection_modifyitems(config, items):
    for item in items:
        path = str(item.path).replace("\\", "/")
        if path.endswith(_RAY_FILES) or item.name in _RAY_TESTS:
            item.add_marker(pytest.mark.xdist_group("ray"))
    # Long tests start first: pytest-xdist hands tests to workers in collection order (``--dist loadgroup``
    # puts the Ray group, its one multi-test unit, ahead of all), so a long test collected last would keep
    # one worker busy after the others finished. Same tests, only the order changes.
    items.sort(key=_start_rank)
