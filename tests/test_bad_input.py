"""Bad-input catalogue: each malformed case gets an error naming file, row/line, field, value and the fix,
or — with skip_bad_rows — a count in the report, and the token accounting still balances."""

from __future__ import annotations

import json

import pytest

from packwise.cli import main
from packwise.pipeline import pack_dataset

GOOD = {"messages": [{"role": "user", "content": "Hi"}, {"role": "assistant", "content": "Hello"}]}

CASES = [
    # (id, rows or raw lines, expected fragments)
    ("malformed_json", ['{"messages": [', json.dumps(GOOD)], ["data.jsonl line 1: malformed JSON", "--skip-bad-rows"]),
    ("missing_messages", [json.dumps(GOOD), json.dumps({"messages": None})], ["line 2: field 'messages' is missing"]),
    ("empty_messages", [json.dumps(GOOD), json.dumps({"messages": []})], ["line 2: field 'messages' is empty"]),
    (
        "unknown_role",
        [json.dumps(GOOD), json.dumps({"messages": [{"role": "bot", "content": "x"}]})],
        ["line 2: field 'messages[0].role' = 'bot' is not one of system, user, assistant, tool"],
    ),
    (
        "non_string_content",
        [json.dumps(GOOD), json.dumps({"messages": [{"role": "user", "content": 5}]})],
        ["line 2: field 'messages[0].content' is int, expected a string"],
    ),
    (
        "message_not_object",
        [json.dumps(GOOD), json.dumps({"messages": ["hi"]})],
        ["line 2: field 'messages[0]' is a str, expected an object"],
    ),
]


@pytest.mark.parametrize(("case", "lines", "fragments"), CASES, ids=[c[0] for c in CASES])
def test_reader_and_tokenizer_rows(case, lines, fragments, write_jsonl, qwen):
    path = write_jsonl(None, raw_lines=lines)
    with pytest.raises(ValueError) as info:
        pack_dataset(path, capacity=64, tokenizer=qwen)
    for fragment in fragments:
        assert fragment in str(info.value)
    table, report = pack_dataset(path, capacity=64, tokenizer=qwen, skip_bad_rows=True)
    assert (report.rows_read, report.rows_skipped, report.samples) == (2, 1, 1)
    assert report.tokens_read == report.tokens_packed == 12
    assert fragments[0] in report.skipped_examples[0]


TOKEN_CASES = [
    ("id_out_of_vocab", {"input_ids": [1, 151665]}, "field 'input_ids' has token id 151665 at position 1 outside the vocabulary [0, 151665)"),
    ("negative_id", {"input_ids": [1, -3]}, "has token id -3 at position 1"),
    ("float_ids", {"input_ids": [1, 2.5]}, "field 'input_ids' contains 2.5; expected integers"),
    ("labels_length", {"input_ids": [1, 2], "labels": [1]}, "field 'labels' has 1 values but input_ids has 2"),
    ("loss_mask_length", {"input_ids": [1, 2], "loss_mask": [1, 1, 1]}, "field 'loss_mask' has 3 values but input_ids has 2"),
    ("column_length", {"input_ids": [1, 2], "extra": [1, 2, 3]}, "field 'extra' has 3 values but input_ids has 2"),
    ("empty_ids", {"input_ids": []}, "field 'input_ids' is empty"),
]  # fmt: skip


@pytest.mark.parametrize(("case", "row", "fragment"), TOKEN_CASES, ids=[c[0] for c in TOKEN_CASES])
@pytest.mark.parametrize("fmt", ["jsonl", "parquet"])
def test_pretokenized_rows(case, row, fragment, fmt, write_jsonl, tmp_path, qwen):
    good = {"input_ids": [5, 6, 7]} | ({"extra": [1, 1, 1]} if "extra" in row else {})
    if fmt == "jsonl":
        path = write_jsonl([good, row])
        where = "data.jsonl line 2"
    else:
        if case == "float_ids":
            pytest.skip("Parquet columns are typed: a float in an int list cannot be written")
        import pyarrow as pa
        import pyarrow.parquet as pq

        path = tmp_path / "data.parquet"
        names = dict.fromkeys([*good, *row])
        pq.write_table(pa.table({k: [good.get(k), row.get(k)] for k in names}), path)
        where = "data.parquet row 1"
    with pytest.raises(ValueError) as info:
        pack_dataset(path, capacity=8, tokenizer=qwen)
    assert where in str(info.value) and fragment in str(info.value)
    _, report = pack_dataset(path, capacity=8, tokenizer=qwen, skip_bad_rows=True)
    assert (report.rows_skipped, report.tokens_packed) == (1, 3)


def test_empty_file(write_jsonl):
    path = write_jsonl(None, raw_lines=[])
    with pytest.raises(ValueError, match=r"data.jsonl is empty \(no rows\)"):
        pack_dataset(path, capacity=8)


def test_nonexistent_path(tmp_path):
    with pytest.raises(ValueError, match=r"input .*nope.jsonl does not exist"):
        pack_dataset(tmp_path / "nope.jsonl", capacity=8)


def test_tokenizer_cannot_be_loaded(write_jsonl, tmp_path):
    path = write_jsonl([GOOD])
    with pytest.raises(ValueError, match="no such directory; pass a local Hugging Face tokenizer directory"):
        pack_dataset(path, capacity=8, tokenizer=str(tmp_path / "missing-tokenizer"))
    (tmp_path / "broken").mkdir()
    (tmp_path / "broken" / "tokenizer_config.json").write_text("{not json")
    with pytest.raises(ValueError, match="broken' cannot be loaded"):
        pack_dataset(path, capacity=8, tokenizer=str(tmp_path / "broken"))


def test_unknown_schema(write_jsonl):
    path = write_jsonl([{"text": "hello"}])
    with pytest.raises(ValueError, match="no 'messages', 'prompt' \\+ 'completion' or 'input_ids' field"):
        pack_dataset(path, capacity=8)


def test_cli_reports_error_and_exit_code(write_jsonl, tmp_path, capsys):
    path = write_jsonl(None, raw_lines=['{"messages": ['])
    assert main(["pack", str(path), "-o", str(tmp_path / "out")]) == 1
    assert "line 1: malformed JSON" in capsys.readouterr().err
    assert not (tmp_path / "out").exists()
