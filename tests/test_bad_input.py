"""Bad-input catalogue: each malformed case gets an error naming file, row/line, field, value and the fix,
or — with skip_bad_rows — a count in the report, and the token accounting still balances."""

from __future__ import annotations

import json
import re

import pytest

from packwise.cli import main
from packwise.files import read_metadata
from packwise.pipeline import pack_dataset

GOOD = {"messages": [{"role": "user", "content": "Hi"}, {"role": "assistant", "content": "Hello"}]}

CASES = [
    # (id, rows or raw lines, expected fragments)
    ("malformed_json", ['{"messages": [', json.dumps(GOOD)], ["data.jsonl line 1: malformed JSON", "--skip-bad-rows"]),
    ("missing_messages", [json.dumps(GOOD), json.dumps({"messages": None})], ["line 2: field 'messages' is missing"]),
    ("empty_messages", [json.dumps(GOOD), json.dumps({"messages": []})], ["line 2: field 'messages' is empty"]),
    (
        "mixed_kinds",
        [json.dumps(GOOD), json.dumps({"input_ids": [1, 2]})],
        ["line 2: field 'messages' is missing but the row has 'input_ids': one input kind per dataset"],
    ),
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
    ("float_ids", {"input_ids": [1, 2.5]}, "field 'input_ids' contains 2.5; expected a flat list of integers"),
    ("null_id", {"input_ids": [None]}, "field 'input_ids' holds a null token id"),
    ("labels_length", {"input_ids": [1, 2], "labels": [1]}, "field 'labels' has 1 values but input_ids has 2"),
    ("loss_mask_length", {"input_ids": [1, 2], "loss_mask": [1, 1, 1]}, "field 'loss_mask' has 3 values but input_ids has 2"),
    ("column_length", {"input_ids": [1, 2], "extra": [1, 2, 3]}, "field 'extra' has 3 values but input_ids has 2"),
    ("empty_ids", {"input_ids": []}, "field 'input_ids' is empty"),
    ("reserved_column", {"input_ids": [1, 2], "seq_lengths": [1, 1]}, "field 'seq_lengths' is a column packwise writes"),
    ("bad_label", {"input_ids": [1, 2], "labels": [1, -7]}, "field 'labels' has -7 at position 1, neither -100 (no loss) nor a token id"),
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
        if case == "reserved_column":
            pytest.skip("a Parquet column exists in every row: a file-level error (test_reserved_parquet_column)")
        names = dict.fromkeys([*good, *row])
        pq.write_table(pa.table({k: [good.get(k), row.get(k)] for k in names}), path)
        where = "data.parquet row 1"
    with pytest.raises(ValueError) as info:
        pack_dataset(path, capacity=8, tokenizer=qwen)
    assert where in str(info.value) and fragment in str(info.value)
    _, report = pack_dataset(path, capacity=8, tokenizer=qwen, skip_bad_rows=True)
    assert (report.rows_skipped, report.tokens_packed) == (1, 3)


@pytest.mark.parametrize("fmt", ["jsonl", "parquet"])
def test_ids_and_labels_beyond_int32_are_bad_rows_not_wrapped(fmt, write_jsonl, tmp_path):
    rows = [{"input_ids": [5, 6, 7]}, {"input_ids": [1, 2147483648]}, {"input_ids": [1, 2], "labels": [1, 2**33]}]
    if fmt == "jsonl":
        path = write_jsonl(rows)
    else:
        import pyarrow as pa
        import pyarrow.parquet as pq

        path = tmp_path / "data.parquet"
        pq.write_table(
            pa.table({"input_ids": [r["input_ids"] for r in rows], "labels": [r.get("labels") for r in rows]}), path
        )
    with pytest.raises(ValueError, match="has token id 2147483648 at position 1 outside int32 token ids"):
        pack_dataset(path, capacity=8)
    _, report = pack_dataset(path, capacity=8, skip_bad_rows=True)
    assert (report.rows_skipped, report.tokens_packed) == (2, 3)
    assert "has 8589934592 at position 1, neither -100" in report.skipped_examples[1]


def test_reserved_parquet_column(tmp_path):
    import pyarrow as pa
    import pyarrow.parquet as pq

    path = tmp_path / "packed.parquet"
    pq.write_table(pa.table({"input_ids": [[1, 2]], "seq_lengths": [[2]]}), path)
    with pytest.raises(
        ValueError, match=r"field 'seq_lengths' is a column packwise writes \(is this already packed data"
    ):
        pack_dataset(path, capacity=8)


def test_labels_and_loss_mask_together_are_ambiguous(write_jsonl):
    path = write_jsonl([{"input_ids": [1, 2], "labels": [1, 2], "loss_mask": [1, 1]}])
    with pytest.raises(ValueError, match="field 'loss_mask' is given together with 'labels'; keep one of them"):
        pack_dataset(path, capacity=8)


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
    with pytest.raises(ValueError, match=r"broken': its file .*broken/tokenizer_config\.json is corrupt"):
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


# --- planner, assembler, stream and CLI entries of the catalogue ---------------------------------------------------
import os  # noqa: E402
import signal  # noqa: E402
import subprocess  # noqa: E402
import sys  # noqa: E402
import time  # noqa: E402

import torch  # noqa: E402
from hypothesis import HealthCheck, given, settings  # noqa: E402
from hypothesis import strategies as st  # noqa: E402

from packwise.assemble import assemble_pack  # noqa: E402
from packwise.plan import plan_packs  # noqa: E402
from packwise.stream import PackingStream  # noqa: E402

LAYER_CASES = [
    (
        "planner: length over capacity",
        lambda: plan_packs([5, 9000], capacity=8192),
        ValueError,
        "sequence 1 has 9000 tokens > capacity 8192; truncate or split it",
    ),
    (
        "planner: None in lengths",
        lambda: plan_packs([5, None], capacity=8),
        TypeError,
        "lengths must be integers in int64, got lengths[1] = None (NoneType)",
    ),
    (
        "planner: capacity as float",
        lambda: plan_packs([5], capacity=8.0),
        ValueError,
        "capacity must be an integer >= 1 (tokens per pack), got 8.0",
    ),
    (
        "assembler: non-numeric column",
        lambda: assemble_pack([{"input_ids": [1, 2], "x": __import__("numpy").array([object(), object()])}]),
        TypeError,
        "sequence 0: column 'x' cannot become a tensor",
    ),
    (
        "assembler: empty sequence",
        lambda: assemble_pack([{"input_ids": [1]}, {"input_ids": []}]),
        ValueError,
        "sequence 1 is empty (0 tokens)",
    ),
    (
        "stream: sample without input_ids",
        lambda: list(PackingStream([{"text": "hi"}], capacity=8, buffer_size=2)),
        ValueError,
        "sample 0 has no input_ids (dict); pass length_fn=",
    ),
    (
        "stream: buffer_size 0",
        lambda: PackingStream([], capacity=8, buffer_size=0),
        ValueError,
        "buffer_size must be an integer >= 1 (samples per window), got 0",
    ),
]


@pytest.mark.parametrize(("case", "call", "exc", "message"), LAYER_CASES, ids=[c[0] for c in LAYER_CASES])
def test_layer_catalogue(case, call, exc, message):
    with pytest.raises(exc) as info:
        call()
    assert message in str(info.value)


CLI_CASES = [
    (["pack", "--no-such-flag"], 2, "No such option: --no-such-flag"),
    (["pack", "--capacity", "abc"], 2, "Invalid value for '--capacity'"),
    (["pack", "{tmp}/missing.jsonl", "-o", "{tmp}/o"], 1, "missing.jsonl does not exist"),
    (["pack", "{data}", "-o", "{tmp}/o", "--packs-per-shard", "0"], 1, "--packs-per-shard must be >= 1, got 0"),
    (  # a closed choice (the Literal) is a usage error naming the value and every choice
        ["pack", "{data}", "-o", "{tmp}/o", "--format", "csv"],
        2,
        "Invalid value for '--format': Value error, 'csv' is not one of 'jsonl', 'parquet', 'hf'.",
    ),
    (["pack", "{data}", "-o", "{tmp}/o", "--algorithm", "nope"], 1, "unknown packing algorithm 'nope'"),
    (
        ["pack", "{data}", "-o", "{tmp}/o", "--overflow", "squash"],
        2,
        "Invalid value for '--overflow': Value error, 'squash' is not one of 'truncate', 'split', 'drop', 'error'.",
    ),
    (
        ["pack", "{data}", "-o", "{tmp}/o", "--config", "{tmp}/missing.yaml"],
        1,
        "config file {tmp}/missing.yaml does not exist",
    ),
    (["inspect", "{tmp}/nothing"], 1, "{tmp}/nothing is not a directory; pass the output directory of `packwise pack`"),
]


@pytest.mark.parametrize(("argv", "code", "message"), CLI_CASES, ids=[" ".join(c[0][:3]) for c in CLI_CASES])
def test_cli_catalogue(argv, code, message, tmp_path, write_jsonl, capsys):
    data = write_jsonl([{"input_ids": [1, 2, 3]}])
    fmt = {"tmp": str(tmp_path), "data": str(data)}
    assert main([a.format(**fmt) for a in argv]) == code
    captured = capsys.readouterr()
    assert message.format(**fmt) in captured.err + captured.out
    assert not (tmp_path / "o").exists()


json_values = st.recursive(
    st.none() | st.booleans() | st.integers(-5, 200_000) | st.floats(allow_nan=True) | st.text(max_size=8),
    lambda inner: (
        st.lists(inner, max_size=4)
        | st.dictionaries(
            st.sampled_from(
                ["messages", "role", "content", "input_ids", "labels", "loss_mask", "prompt", "completion", "x"]
            ),
            inner,
            max_size=4,
        )
    ),
    max_leaves=20,
)


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(blob=st.binary(max_size=300))
def test_fuzz_jsonl_random_bytes(blob, tmp_path, qwen):
    path = tmp_path / "fuzz.jsonl"
    path.write_bytes(blob)
    _only_clean_errors(lambda: pack_dataset(path, capacity=16, tokenizer=qwen, skip_bad_rows=True))


@settings(max_examples=80, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(rows=st.lists(json_values, min_size=1, max_size=4))
def test_fuzz_jsonl_random_json_shapes(rows, tmp_path, qwen):
    path = tmp_path / "fuzz.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    for skip in (False, True):
        _only_clean_errors(lambda skip=skip: pack_dataset(path, capacity=16, tokenizer=qwen, skip_bad_rows=skip))


@settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(blob=st.binary(max_size=300))
def test_fuzz_parquet_random_bytes(blob, tmp_path):
    path = tmp_path / "fuzz.parquet"
    path.write_bytes(blob)
    with pytest.raises(ValueError, match=r"cannot be read as parquet|is empty"):
        pack_dataset(path, capacity=16)


def _only_clean_errors(call):
    try:
        _, report = call()
    except ValueError as e:  # bad input must be a ValueError with a message, never a crash
        assert str(e)
        return
    # accounting always balances (report.check() also ran inside pack_dataset)
    assert report.tokens_read == report.tokens_packed + report.tokens_truncated + report.tokens_dropped
    assert report.rows_read == report.rows_skipped + report.samples


KILLER = """
import sys, time, pyarrow.parquet as pq
real = pq.write_table
def slow(table, where, **kw):
    real(table, where, **kw)
    print("wrote", where, flush=True)
    time.sleep(60)
pq.write_table = slow
from packwise.cli import main
sys.exit(main(sys.argv[1:]))
"""


def test_killed_write_leaves_no_partial_dataset(tmp_path, write_jsonl):
    data = write_jsonl([{"input_ids": list(range(1, n + 1))} for n in (5, 3, 7, 2)])
    out = tmp_path / "out"
    proc = subprocess.Popen(
        [sys.executable, "-c", KILLER, "pack", str(data), "-o", str(out), "--capacity", "8", "--packs-per-shard", "1", "-q"],
        stdout=subprocess.PIPE, text=True,
    )  # fmt: skip
    line = proc.stdout.readline()  # the first shard is on disk, the write is in progress
    assert "wrote" in line
    os.kill(proc.pid, signal.SIGKILL)
    proc.wait(timeout=30)
    time.sleep(0.1)
    with pytest.raises(ValueError, match="is not a packwise packed dataset"):  # no dataset visible at the path
        read_metadata(out)
    assert sorted(p.name.split("-")[:2] for p in out.iterdir()) == [[".packwise", "staging"], [".packwise.lock"]]
    assert main(["pack", str(data), "-o", str(out), "--capacity", "8", "-q", "--no-report"]) == 0  # no --overwrite
    assert read_metadata(out)["packs"] == 3
    assert sorted(p.name for p in out.iterdir()) == [
        ".packwise-manifest.json",
        "metadata.json",
        "packs-00000-of-00001.parquet",
    ]


def test_same_input_same_bytes_and_plan_hash(tmp_path, write_jsonl, qwen):
    data = write_jsonl(
        [GOOD, {"messages": [{"role": "user", "content": "Hey"}, {"role": "assistant", "content": "Yo"}]}]
    )
    hashes = []
    for name in ("a", "b"):
        assert main(["pack", str(data), "-o", str(tmp_path / name), "--capacity", "64", "-q"]) == 0
        hashes.append(json.loads((tmp_path / name / "metadata.json").read_text())["plan_hash"])
    assert hashes[0] == hashes[1]
    for f in (tmp_path / "a").iterdir():
        assert f.read_bytes() == (tmp_path / "b" / f.name).read_bytes(), f.name
    assert torch.__version__  # torch import kept for the assembler cases


# -- config files: duplicate keys, unknown options, a directory ------------------------------------------------
def test_config_duplicate_keys_are_refused_naming_key_and_line(tmp_path):
    from packwise.config import PackingConfig

    (tmp_path / "c.yaml").write_text("seed: 1\ncapacity: 64\ncapacity: 128\n")
    with pytest.raises(ValueError, match=r"c\.yaml line 3: duplicate key 'capacity' \(first on line 2\)"):
        PackingConfig.from_file(tmp_path / "c.yaml")
    (tmp_path / "n.yaml").write_text("multimodal:\n  min_pixels: 4\n  min_pixels: 8\n")
    with pytest.raises(ValueError, match=r"n\.yaml line 3: duplicate key 'min_pixels'"):
        PackingConfig.from_file(tmp_path / "n.yaml")
    (tmp_path / "c.json").write_text('{"capacity": 64, "capacity": 128}')
    with pytest.raises(ValueError, match=r"c\.json: duplicate key 'capacity'"):
        PackingConfig.from_file(tmp_path / "c.json")


def test_config_errors_name_the_file_and_the_closest_option(tmp_path, capsys):
    from packwise.config import PackingConfig

    (tmp_path / "c.yaml").write_text("capasity: 64\nmultimodal:\n  min_pixel: 3\n")
    with pytest.raises(ValueError) as e:
        PackingConfig.from_file(tmp_path / "c.yaml")
    assert str(e.value) == (
        f"config file {tmp_path / 'c.yaml'}: invalid configuration: unknown option 'multimodal.min_pixel'; did you "
        "mean 'min_pixels'?; unknown option 'capasity'; did you mean 'capacity'?"
    )
    (tmp_path / "d.yaml").mkdir()
    assert main(["config", "show", str(tmp_path / "d.yaml")]) == 1
    assert capsys.readouterr().err.strip() == (
        f"error: config file {tmp_path / 'd.yaml'} is a directory; pass a .yaml, .toml or .json file"
    )


# -- load_packed checks every row of every shard -------------------------------------------------------------
@pytest.mark.parametrize(
    ("column", "value", "message"),
    [
        ("seq_lengths", [[4], [2, 1]], "row 1: column 'seq_lengths' sums to 3 but input_ids has 4 tokens"),
        ("labels", [[1, 2, 3, 4], [5, 6, 7]], "row 1: column 'labels' has 3 entries but input_ids has 4"),
        ("seq_lengths", [[4], [4, 0]], "row 1: column 'seq_lengths' holds a length below 1"),
        ("source_index", [[0], [1]], "row 1: column 'source_index' has 1 entries but seq_lengths has 2 sequences"),
    ],
)
def test_load_packed_refuses_rows_that_do_not_hold_together(column, value, message, write_jsonl, tmp_path):
    import pyarrow as pa
    import pyarrow.parquet as pq

    from packwise.files import load_packed

    data = write_jsonl([{"input_ids": [1, 2, 3, 4]}, {"input_ids": [5, 6]}, {"input_ids": [7, 8]}])
    out = tmp_path / "out"
    assert main(["pack", str(data), "-o", str(out), "--capacity", "4", "--no-report", "-q"]) == 0
    shard = out / "packs-00000-of-00001.parquet"
    t = pq.read_table(shard)
    assert t.column("seq_lengths").to_pylist() == [[4], [2, 2]]
    assert load_packed(out).num_rows == 2
    t = t.set_column(t.schema.get_field_index(column), column, pa.array(value, t.schema.field(column).type))
    pq.write_table(t, shard)
    with pytest.raises(ValueError, match=r"its SHA-256 is .* the shard was changed after packwise wrote it"):
        load_packed(out)
    with pytest.raises(ValueError) as e:
        load_packed(out, verify_checksums=False)  # the row checks behind the hash check
    assert str(e.value) == f"{shard} {message}; the shard was modified — re-run packwise pack"


def test_skipped_rows_are_listed_in_row_order(tmp_path):
    ok = {"messages": [{"role": "user", "content": "hi"}, {"role": "assistant", "content": "yo"}]}
    bot = {"messages": [{"role": "bot", "content": "hi"}, {"role": "assistant", "content": "yo"}]}
    path = tmp_path / "rows.jsonl"
    path.write_text("\n".join([json.dumps(ok), json.dumps(bot), "{not json", json.dumps(ok)]) + "\n")
    _, report = pack_dataset(path, capacity=64, skip_bad_rows=True)
    assert [m.split(":")[0] for m in report.skipped_examples] == [f"{path} line 2", f"{path} line 3"]
    assert (report.rows_read, report.rows_skipped, report.sequences_packed) == (4, 2, 2)


@pytest.mark.parametrize(
    ("lengths", "error", "message"),
    [
        ([3, 2**70], ValueError, "sequence 1 has length 1180591620717411303424, larger than any capacity"),
        ([3, -(2**70)], TypeError, "lengths must be integers in int64, got lengths[1] = -1180591620717411303424"),
        ([3, None], TypeError, "lengths must be integers in int64, got lengths[1] = None (NoneType)"),
        ([3, 2.5, 2**70], TypeError, "lengths must be integers in int64, got lengths[1] = 2.5 (float)"),
    ],
)
def test_python_ints_beyond_int64_and_odd_objects_are_named(lengths, error, message):
    from packwise.plan import plan_packs

    with pytest.raises(error, match=re.escape(message)):
        plan_packs(lengths, capacity=10)
