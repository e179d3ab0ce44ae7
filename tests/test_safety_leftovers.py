"""Issue 15 leftovers: literal special tokens are skippable bad rows, the Ray JSONL reader bounds lines as the
local one does, and clear messages for an output removed mid-run and an image path that is a directory."""

from __future__ import annotations

import json
import shutil

import pyarrow as pa
import pytest

from packwise.cli import main
from packwise.files import _lines, load_packed, read_input, write_packed
from packwise.pipeline import pack_dataset

CHAT = {"messages": [{"role": "user", "content": "Hi"}, {"role": "assistant", "content": "Yo"}]}
LITERAL = "which the tokenizer would encode as a real special token (a forged turn or end of text)"


def run(capsys, *argv) -> tuple[int, str]:
    capsys.readouterr()
    rc = main([*map(str, argv), "--no-report", "-q"])
    return rc, capsys.readouterr().err.strip()


def test_literal_special_tokens_are_skipped_and_counted_with_skip_bad_rows(write_jsonl, qwen):
    pc = write_jsonl([{"prompt": "2+2=", "completion": "4<|endoftext|>"}, {"prompt": "1+1=", "completion": "2"}])
    with pytest.raises(ValueError, match=rf"{pc} line 1: field 'completion' holds the literal special token "):
        pack_dataset(pc, capacity=64, tokenizer=qwen)
    table, report = pack_dataset(pc, capacity=64, tokenizer=qwen, skip_bad_rows=True)
    assert (report.rows_read, report.rows_skipped, table.num_rows) == (2, 1, 1)
    assert report.skipped_examples == [
        f"{pc} line 1: field 'completion' holds the literal special token <|endoftext|>, {LITERAL}; remove or "
        "escape it in the text; a turn boundary comes from the chat template, an end of text from EOS"
    ]
    forged = {"messages": [{"role": "user", "content": "Hi<|im_end|>"}, CHAT["messages"][1]]}
    pl = {"prompt": [{"role": "user", "content": "Hi<|im_start|>"}], "completion": [CHAT["messages"][1]]}
    chats = write_jsonl([CHAT, forged, CHAT], name="chats.jsonl")
    _, report = pack_dataset(chats, capacity=64, tokenizer=qwen, chat_template="chatml", skip_bad_rows=True)
    assert (report.rows_skipped, report.samples) == (1, 2)
    assert report.skipped_examples[0].startswith(f"{chats} line 2: field 'messages[0].content' holds the literal ")
    lists = write_jsonl([pl, {"prompt": [CHAT["messages"][0]], "completion": [CHAT["messages"][1]]}], name="pl.jsonl")
    _, report = pack_dataset(lists, capacity=64, tokenizer=qwen, chat_template="chatml", skip_bad_rows=True)
    assert (report.rows_skipped, report.samples) == (1, 1)
    assert "holds the literal special token <|im_start|>" in report.skipped_examples[0]


def test_literal_special_tokens_skipped_the_same_on_the_ray_engine(tmp_path, write_jsonl, capsys):
    pytest.importorskip("ray")
    rows = [
        {"prompt": f"{i}+{i}=", "completion": f"{2 * i}" + ("<|endoftext|>" if i % 5 == 3 else "")} for i in range(40)
    ]
    data = write_jsonl(rows)
    common = ["pack", data, "--tokenizer", "qwen2.5", "--capacity", "64", "--skip-bad-rows", "--json"]
    assert run(capsys, *common, "-o", tmp_path / "local")[0] == 0
    assert run(capsys, *common, "-o", tmp_path / "ray", "--engine", "ray", "--num-cpus", "2")[0] == 0
    from packwise.files import read_metadata

    local, ray = read_metadata(tmp_path / "local"), read_metadata(tmp_path / "ray")
    assert local["rows_skipped"] == ray["rows_skipped"] == 8
    assert local["skipped_examples"] == ray["skipped_examples"]
    assert [s["sha256"] for s in local["shards"]] == [s["sha256"] for s in ray["shards"]]


def test_ray_jsonl_pieces_bound_lines_like_the_local_reader(tmp_path, monkeypatch):
    """The Ray engine's JSONL reading (kind sniffing, byte ranges, pieces) uses the local reader's
    ``jsonl_lines``: the same 64 MiB bound, message, line numbers; depth is bounded by ``parse_line``."""
    from packwise.integrations import _ray_io

    ok = b'{"input_ids": [1, 2, 3, 4, 5, 6, 7, 8, 9]}'
    monkeypatch.setattr(_lines, "MAX_JSONL_LINE_BYTES", 42)
    f = tmp_path / "d.jsonl"
    long_line = b'{"input_ids": [' + b"1, " * 20 + b"1]}\n"
    f.write_bytes(ok + b"\n" + ok + b"\n" + long_line + ok + b"\n")
    with pytest.raises(ValueError) as local:
        read_input(f)
    size = f.stat().st_size
    with pytest.raises(ValueError) as piece:
        _ray_io._read_piece("jsonl", str(f), (0, size, 1), str(f), "tokens")
    assert (
        str(piece.value)
        == str(local.value)
        == (
            f"{f} line 3: longer than the 42 byte limit of one JSONL row; is this JSON lines (one object per line)? "
            "Split the file into rows, or pass Parquet"
        )
    )
    start = 2 * (len(ok) + 1)  # a piece starting at line 3 names the same line
    with pytest.raises(ValueError, match=rf"{f} line 3: longer than the 42 byte limit"):
        _ray_io._read_piece("jsonl", str(f), (start, size, 3), str(f), "tokens")
    f.write_bytes(long_line)
    with pytest.raises(ValueError, match=rf"{f} line 1: longer than the 42 byte limit"):
        _ray_io._jsonl_kind(f, True)  # even with --skip-bad-rows, as the local reader
    # cutting into ranges never holds a line in memory: a range ends after a newline
    f.write_bytes((ok + b"\n") * 10)
    ranges = _ray_io._jsonl_ranges(f, 50)
    assert ranges[0] == (0, 2 * (len(ok) + 1)) and ranges[-1][1] == f.stat().st_size
    piece = _ray_io._read_piece("jsonl", str(f), (*ranges[1], 3), str(f), "tokens")
    assert piece.line_numbers == [3, 4] and piece.rows == [json.loads(ok)] * 2
    deep = b'{"a": ' + b"[" * 100_000 + b"]" * 100_000 + b"}\n"
    f.write_bytes(ok + b"\n" + deep)
    monkeypatch.setattr(_lines, "MAX_JSONL_LINE_BYTES", 64 << 20)
    piece = _ray_io._read_piece("jsonl", str(f), (0, f.stat().st_size, 1), str(f), "tokens")
    assert piece.rows[1] is None and "line 2: malformed JSON (nested more than about" in piece.errors[0][1]


def test_an_output_removed_during_the_run_gets_a_clear_error(tmp_path):
    out = tmp_path / "out"

    def tables():
        yield pa.table({"input_ids": [[1, 2]]})
        shutil.rmtree(out)  # someone removes the output directory while packwise writes it
        yield pa.table({"input_ids": [[3]]})

    with pytest.raises(ValueError) as e:
        write_packed(out, tables(), 2, {"capacity": 2})
    message = str(e.value)
    assert message.startswith(f"output {out} was removed or replaced during the run (")
    assert message.endswith(
        "); nothing was written — run again, and leave the output directory alone while packwise writes it"
    )
    assert "No such file or directory" in message and not out.exists()


def test_an_output_removed_during_packwise_pack_is_a_clean_cli_error(tmp_path, write_jsonl, capsys, monkeypatch):
    from packwise.files import _write

    data = write_jsonl([{"input_ids": [1, 2, 3]}, {"input_ids": [4, 5]}])
    out = tmp_path / "out"
    real = _write.write_shard

    def remove_then_write(table, path, **kw):
        shutil.rmtree(out)
        return real(table, path, **kw)

    monkeypatch.setattr(_write, "write_shard", remove_then_write)
    rc, err = run(capsys, "pack", data, "-o", out, "--capacity", "8")
    assert rc == 1 and err.startswith(f"error: output {out} was removed or replaced during the run")
    assert "Traceback" not in err


def test_an_image_path_that_is_a_directory_is_named_as_one(tmp_path, capsys):
    from packwise.multimodal import load_image

    (tmp_path / "data" / "pics").mkdir(parents=True)
    row = {"messages": [{"role": "user", "content": [{"type": "image", "path": "pics"}]},
                        {"role": "assistant", "content": "ok"}]}  # fmt: skip
    data = tmp_path / "data" / "rows.jsonl"
    data.write_text(json.dumps(row) + "\n")
    rc, err = run(capsys, "pack", data, "-o", tmp_path / "o")
    assert (rc, err) == (
        1,
        f"error: {data} line 1: field 'messages[0].content[0].path' names image {tmp_path / 'data' / 'pics'}, which "
        "is a directory, not a file; name the file itself",
    )
    with pytest.raises(ValueError, match=r"row 3: image .*pics is a directory, not an image file; name the file"):
        load_image(tmp_path / "data" / "pics", where="row 3")


def test_the_data_safety_table_names_only_tests_that_exist():
    """docs/data-safety.md maps every issue-15 finding to tests: each name must be a test in its file."""
    import re
    from pathlib import Path

    root = Path(__file__).parents[1]
    doc = (root / "docs" / "data-safety.md").read_text()
    short = dict(re.findall(r"`(\w\w)` = `(tests/[\w/]+\.py)`", doc))
    refs = re.findall(r"(\b[A-Z]{2}|tests/[\w/]+\.py)::(test_\w+)", doc)
    assert len(short) == 7 and len(refs) > 60
    missing = [
        f"{f}::{t}"
        for f, t in refs
        if not re.search(rf"^(async )?def {t}\(", (root / short.get(f, f)).read_text(), re.M)
    ]
    assert missing == []


DEEP = "[" * 200_000 + "]" * 200_000


@pytest.mark.parametrize("name", [".packwise-manifest.json", "metadata.json", ".packwise-commit"])
def test_deeply_nested_packwise_files_are_named_not_a_recursion_error(tmp_path, write_jsonl, capsys, name):
    src = write_jsonl([{"input_ids": [1, 2]}, {"input_ids": [3]}])
    out = tmp_path / "out"
    assert run(capsys, "pack", src, "-o", out, "--capacity", 4)[0] == 0
    (out / name).write_text(DEEP)
    before = sorted(p.name for p in out.iterdir())
    why = rf"{out / name} is not a valid packwise file \(not JSON: nested more than about \d+ levels of \[ or \{{ deep\); restore it"
    rc, err = run(capsys, "pack", src, "-o", out, "--capacity", 4, "--overwrite")
    assert rc != 0 and "Traceback" not in err  # metadata.json: refused as a packwise file that changed since
    assert name == "metadata.json" or "is not a valid packwise file" in err
    assert sorted(p.name for p in out.iterdir()) == before  # nothing deleted
    if name == ".packwise-manifest.json":
        return  # only the writer reads the manifest
    with pytest.raises(ValueError, match=why):
        load_packed(out)
    for cmd in ("report", "inspect"):
        capsys.readouterr()
        rc, err = main([cmd, str(out)]), capsys.readouterr().err
        assert rc != 0 and "is not a valid packwise file" in err and "Traceback" not in err, (cmd, err)
    assert sorted(p.name for p in out.iterdir()) == before


def test_json_booleans_as_token_ids_are_bad_rows_like_floats(write_jsonl):
    src = write_jsonl([{"input_ids": [True, 2]}, {"input_ids": [3, 4]}, {"input_ids": [3, 4], "labels": [1, False]}])
    with pytest.raises(ValueError, match=rf"{src} line 1: field 'input_ids' contains True; expected a flat list of"):
        pack_dataset(src, capacity=8)
    table, report = pack_dataset(src, capacity=8, skip_bad_rows=True)
    assert (report.rows_read, report.rows_skipped, table.column("input_ids").to_pylist()) == (3, 2, [[3, 4]])
    assert report.skipped_examples == [
        f"{src} line 1: field 'input_ids' contains True; expected a flat list of integers",
        f"{src} line 3: field 'labels' contains False; expected a flat list of integers",
    ]


def test_a_lone_surrogate_is_a_named_skippable_bad_row(tmp_path, qwen):
    src = tmp_path / "data.jsonl"
    src.write_text('{"prompt": "a\\ud800b", "completion": "x"}\n{"prompt": "1+1=", "completion": "2"}\n')
    why = f"{src} line 1: field 'prompt' is not valid Unicode text: lone surrogate at char 1"
    with pytest.raises(ValueError, match=why):
        pack_dataset(src, capacity=64, tokenizer=qwen)
    table, report = pack_dataset(src, capacity=64, tokenizer=qwen, skip_bad_rows=True)
    assert (report.rows_read, report.rows_skipped, table.num_rows) == (2, 1, 1)
    assert report.skipped_examples[0].startswith(why)


def test_an_empty_chat_template_is_named_empty(write_jsonl, capsys):
    from packwise.text import load_chat_template

    for empty in ("", "  "):
        with pytest.raises(ValueError, match=rf"chat template {empty!r} is empty; pass a template file, 'chatml'"):
            load_chat_template(empty)
    src = write_jsonl([CHAT])
    rc, err = run(capsys, "pack", src, "-o", src.parent / "out", "--capacity", 64, "--chat-template", "")
    assert rc != 0 and "chat template '' is empty" in err, err
