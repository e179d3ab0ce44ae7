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
