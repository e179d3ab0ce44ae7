"""``packwise pack`` in-process: output layout, metadata, --json, atomic and reproducible writes."""

from __future__ import annotations

import json

import pyarrow.parquet as pq
import pytest

from packwise.cli import main
from packwise.files._write import load_packed, read_metadata

ROWS = [{"input_ids": list(range(1, n + 1))} for n in (5, 3, 7, 2, 6, 1)]


@pytest.fixture
def data(write_jsonl):
    return write_jsonl(ROWS)


def test_pack_writes_shards_and_metadata(data, tmp_path, capsys):
    out = tmp_path / "out"
    rc = main(["pack", str(data), "-o", str(out), "--capacity", "8", "--packs-per-shard", "2", "--json"])
    assert rc == 0
    report = json.loads(capsys.readouterr().out)
    # BFD at C=8 on 5,3,7,2,6,1: [7,1] [6,2] [5,3] -> 3 packs, 24 tokens, utilisation 1.0
    assert (report["packs"], report["tokens_packed"], report["metrics"]["utilisation"]) == (3, 24, 1.0)
    files = sorted(p.name for p in out.iterdir())
    assert files == [
        ".packwise-manifest.json", "metadata.json", "packs-00000-of-00002.parquet", "packs-00001-of-00002.parquet",
        "report-fill.png", "report-lengths.png", "report-speedup.png", "report-tokens.png",
        "report.json", "report.md",
    ]  # fmt: skip
    meta = read_metadata(out)
    assert meta["plan_hash"] == report["plan_hash"]
    assert meta["tokens_read"] == 24 and meta["capacity"] == 8 and "timings" not in meta
    table = load_packed(out)
    assert table.column("seq_lengths").to_pylist() == [[7, 1], [6, 2], [5, 3]]
    schema = pq.read_schema(out / "packs-00000-of-00002.parquet")
    for name, dtype in [
        ("input_ids", "int32"),
        ("labels", "int32"),
        ("seq_lengths", "int32"),
        ("source_index", "int64"),
    ]:
        assert schema.field(name).type.num_fields == 1 and str(schema.field(name).type.value_type) == dtype


def test_hf_datasets_reads_output(data, tmp_path):
    datasets = pytest.importorskip("datasets")
    out = tmp_path / "out"
    assert main(["pack", str(data), "-o", str(out), "--capacity", "8", "-q"]) == 0
    ds = datasets.load_dataset("parquet", data_files=str(out / "packs-*.parquet"), split="train")
    assert ds["seq_lengths"] == [[7, 1], [6, 2], [5, 3]]


def test_refuses_non_empty_output_unless_overwrite(data, tmp_path, capsys):
    out = tmp_path / "out"
    out.mkdir()
    (out / "keep.txt").write_text("x")
    # a file packwise did not write: --overwrite cannot help, so the refusal does not suggest it
    assert main(["pack", str(data), "-o", str(out), "--capacity", "8", "-q"]) == 1
    err = capsys.readouterr().err
    assert f"output directory {out} is not a packwise output: keep.txt; --overwrite only replaces" in err
    assert "pass --overwrite" not in err
    # --overwrite never replaces a directory that is not an earlier packwise output
    assert main(["pack", str(data), "-o", str(out), "--capacity", "8", "-q", "--overwrite"]) == 1
    assert "is not a packwise output" in capsys.readouterr().err
    assert (out / "keep.txt").exists()
    packed = tmp_path / "packed"
    assert main(["pack", str(data), "-o", str(packed), "--capacity", "8", "-q"]) == 0
    assert main(["pack", str(data), "-o", str(packed), "--capacity", "4", "-q", "--overwrite"]) == 0
    assert json.loads((packed / "metadata.json").read_text())["capacity"] == 4


def test_refuses_to_write_over_the_input(tmp_path, write_jsonl, capsys):
    data = write_jsonl([{"input_ids": [1, 2]}])
    assert main(["pack", str(data), "-o", str(tmp_path), "--overwrite", "-q"]) == 1
    assert "is or contains the input" in capsys.readouterr().err
    assert data.exists()


def test_errors_print_brackets_verbatim(tmp_path, capsys):
    """rich would read ``[ray]`` in a message as markup and drop it (``pip install 'packwise[ray]'``)."""
    missing = tmp_path / "chats[ray].jsonl"
    assert main(["pack", str(missing), "-o", str(tmp_path / "out")]) == 1
    assert capsys.readouterr().err.strip() == f"error: input {missing} does not exist"


def test_byte_identical_output(data, tmp_path):
    for name in ("a", "b"):
        assert main(["pack", str(data), "-o", str(tmp_path / name), "--capacity", "8", "-q"]) == 0
    for f in (tmp_path / "a").iterdir():
        assert f.read_bytes() == (tmp_path / "b" / f.name).read_bytes()


def test_failed_run_leaves_nothing(tmp_path, write_jsonl):
    path = write_jsonl([{"input_ids": [1] * 20}])
    out = tmp_path / "out"
    assert main(["pack", str(path), "-o", str(out), "--capacity", "8", "--overflow", "error", "-q"]) == 1
    assert list(tmp_path.glob(".out*")) == [] and not out.exists()
