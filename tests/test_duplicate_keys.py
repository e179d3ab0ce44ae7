"""User JSON that names one key twice is refused naming the key and the file (Python's ``json`` silently keeps
the last value): data rows (both engines read them with ``parse_line``), tool-call arguments given as JSON
text, a saved dataset's ``state.json``, ``--runtime-env``, packwise's own ``metadata.json``; config files are
covered in tests/test_bad_input.py."""

from __future__ import annotations

import json
import re

import pytest

from packwise import pack_dataset
from packwise.cli._pack import _runtime_env
from packwise.files import SKIP_HINT, DuplicateKeyError, listed_data_files, loads_unique, read_metadata

TWICE = "duplicate key {!r} in one JSON object (JSON keeps only one of its values)"


def test_a_jsonl_row_with_a_key_twice_is_refused_or_skipped_and_counted(tmp_path):
    path = tmp_path / "rows.jsonl"
    path.write_text('{"input_ids": [1, 2]}\n{"input_ids": [1, 2], "input_ids": [3]}\n')
    with pytest.raises(ValueError) as e:
        pack_dataset(path, capacity=8)
    assert str(e.value) == f"{path} line 2: {TWICE.format('input_ids')}; {SKIP_HINT}"
    table, report = pack_dataset(path, capacity=8, skip_bad_rows=True)
    assert table.column("input_ids").to_pylist() == [[1, 2]]
    assert report.rows_skipped == 1
    assert report.skipped_examples == [f"{path} line 2: {TWICE.format('input_ids')}"]


def test_a_nested_key_twice_in_a_row_is_refused(tmp_path):
    path = tmp_path / "chat.jsonl"
    row = '{"messages": [{"role": "user", "content": "a", "content": "b"}]}'
    path.write_text(row + "\n")
    with pytest.raises(ValueError) as e:
        pack_dataset(path, capacity=64)
    assert str(e.value) == f"{path} line 1: {TWICE.format('content')}; {SKIP_HINT}"


def test_tool_call_arguments_with_a_key_twice_are_refused():
    chat = [
        {"role": "user", "content": "Weather?"},
        {"role": "assistant", "content": "", "tool_calls": [
            {"type": "function", "function": {"name": "w", "arguments": '{"city": "Paris", "city": "Rome"}'}}]},
    ]  # fmt: skip
    with pytest.raises(ValueError) as e:
        pack_dataset([{"messages": chat}], capacity=512)
    assert (
        "list row 0: field 'messages[1].tool_calls[0].function.arguments' is a JSON string with a "
        + TWICE.format("city")
    ) in str(e.value)


def test_state_json_with_a_key_twice_is_refused():
    state = '{"_data_files": [{"filename": "a.arrow", "filename": "b.arrow"}]}'
    with pytest.raises(ValueError) as e:
        listed_data_files("ds", state, [])
    assert str(e.value) == (
        f"input ds: state.json has a {TWICE.format('filename')}; save the dataset again with Dataset.save_to_disk"
    )


def test_runtime_env_with_a_key_twice_is_refused():
    with pytest.raises(ValueError) as e:
        _runtime_env('{"pip": ["a"], "pip": ["b"]}')
    assert str(e.value) == f"--runtime-env: not valid JSON ({TWICE.format('pip')})"


def test_packwise_own_metadata_with_a_key_twice_is_refused(tmp_path):
    (tmp_path / "metadata.json").write_text('{"format": 1, "format": 2}')
    with pytest.raises(ValueError) as e:
        read_metadata(tmp_path)
    assert str(e.value) == (
        f"{tmp_path / 'metadata.json'} is not a valid packwise file ({TWICE.format('format')}); restore it from a "
        "copy, or move the folder away and re-run packwise pack"
    )


@pytest.mark.parametrize(
    "raw",
    [b'{"a": [1, {"b": null}]}', '{"a": 1}'.encode("utf-16"), b'\xef\xbb\xbf{"x": "\xc3\xa9"}', "[1, 2.5, true]"],
)
def test_loads_unique_equals_json_loads_without_duplicates(raw):
    assert loads_unique(raw) == json.loads(raw)


def test_loads_unique_refuses_what_json_loads_refuses():
    for bad in ("\ufeff{}", "{", '{"a": 1,}'):
        with pytest.raises(json.JSONDecodeError):
            json.loads(bad)
        with pytest.raises(json.JSONDecodeError):
            loads_unique(bad)
    with pytest.raises(DuplicateKeyError) as e:
        loads_unique('[{"k": 1}, {"k": 2, "k": 3}]')
    assert e.value.key == "k" and isinstance(e.value, ValueError)


def test_nan_infinity_and_deep_tool_call_arguments_are_bad_rows_not_tracebacks():
    """Python's json reads NaN/Infinity (re-serialised into the chat they would be invalid JSON) and raises a
    bare RecursionError on deep nesting: both are bad rows naming the field, skippable and counted."""

    def chat(arguments):
        call = {"type": "function", "function": {"name": "f", "arguments": arguments}}
        return {
            "messages": [{"role": "user", "content": "q"}, {"role": "assistant", "content": "", "tool_calls": [call]}]
        }

    rows = [chat('{"a": NaN}'), chat("[" * 100_000 + "]" * 100_000), chat('{"a": 1}')]
    for row, why in zip(rows[:2], ["is a string but not valid JSON (NaN is not JSON (RFC 8259 has no NaN",
                                   "is a string but not valid JSON (nested more than about"]):  # fmt: skip
        with pytest.raises(ValueError, match=re.escape(f"messages[1].tool_calls[0].function.arguments' {why}")):
            pack_dataset([row], capacity=64)
    _, report = pack_dataset(rows, capacity=4096, skip_bad_rows=True)
    assert (report.rows_skipped, report.samples) == (2, 1)


def test_a_file_whose_only_row_is_bad_says_so_in_the_singular(tmp_path):
    """The row is valid JSON (a duplicate key): the message says 'valid row', not 'valid JSON'."""
    path = tmp_path / "one.jsonl"
    path.write_text('{"input_ids": [1], "input_ids": [2]}\n')
    with pytest.raises(ValueError, match=re.escape(f"input {path}: no line is a valid row (1 bad line, all skipped)")):
        pack_dataset(str(path), capacity=8, skip_bad_rows=True)
