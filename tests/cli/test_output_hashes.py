"""Content hashes (issue 15): the manifest records size + SHA-256 of every file packwise wrote, and
``--overwrite`` removes only unchanged files under packwise's names; ``metadata.json`` records each shard's
SHA-256 and the loaders refuse a shard changed after packwise wrote it — even into another valid shard."""

from __future__ import annotations

import hashlib
import json
import os
import shutil

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from packwise.cli import main
from packwise.data import PackedParquetDataset
from packwise.files import load_packed, read_metadata, write_packed
from packwise.files._manifest import is_packwise_name
from packwise.files._output import MANIFEST, OutputDir
from packwise.files._write import write_shard

ROWS = [{"input_ids": list(range(1, n + 1))} for n in (5, 3, 7, 2, 6, 1, 4, 4)]
REFUSAL_TAIL = (
    "--overwrite only replaces the files packwise wrote, unchanged (listed in .packwise-manifest.json) — move "
    "those away (or delete them yourself), or pass a new or empty directory"
)


@pytest.fixture
def data(write_jsonl):
    return write_jsonl(ROWS)


def pack(data, out, *extra) -> int:
    return main(["pack", str(data), "-o", str(out), "--capacity", "8", "--no-report", "-q", *extra])


def sha(path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def test_a_hand_edited_manifest_cannot_make_overwrite_delete_a_users_file(data, tmp_path, capsys):
    """Break test: a manifest edited to list the user's notes.txt let --overwrite delete it."""
    out = tmp_path / "out"
    assert pack(data, out) == 0
    (out / "notes.txt").write_text("mine")
    manifest = json.loads((out / MANIFEST).read_text())
    manifest["files"]["notes.txt"] = {"bytes": 4, "sha256": sha(out / "notes.txt")}  # even with the right hash
    (out / MANIFEST).write_text(json.dumps(manifest))
    before = {p.name: p.read_bytes() for p in out.iterdir()}
    capsys.readouterr()
    assert pack(data, out, "--overwrite") == 1
    assert capsys.readouterr().err.strip() == (
        f"error: output directory {out} holds files packwise did not write: notes.txt; {REFUSAL_TAIL}"
    )
    assert {p.name: p.read_bytes() for p in out.iterdir()} == before  # nothing deleted, not even the shards
    manifest["files"] = sorted(manifest["files"])  # the same in a names-only (v1) manifest
    manifest["format"] = "packwise-manifest-v1"
    (out / MANIFEST).write_text(json.dumps(manifest))
    assert pack(data, out, "--overwrite") == 1
    assert capsys.readouterr().err.strip() == (
        f"error: output directory {out} holds files packwise did not write: notes.txt; {REFUSAL_TAIL}"
    )
    assert (out / "notes.txt").read_text() == "mine"


def test_a_shard_changed_after_packwise_wrote_it_is_not_deleted(data, tmp_path, capsys):
    out = tmp_path / "out"
    assert pack(data, out, "--packs-per-shard", "2") == 0  # 2 shards
    shard = out / "packs-00001-of-00002.parquet"
    shutil.copyfile(out / "packs-00000-of-00002.parquet", shard)  # another valid shard of the same size class
    edited = shard.read_bytes()
    capsys.readouterr()
    assert pack(data, out, "--overwrite") == 1
    assert capsys.readouterr().err.strip() == (
        f"error: output directory {out} holds files packwise wrote that were changed since: {shard.name} (size or "
        f"SHA-256 differs from .packwise-manifest.json); {REFUSAL_TAIL}"
    )
    assert shard.read_bytes() == edited and (out / "packs-00000-of-00002.parquet").exists()
    (out / "metadata.json").write_text((out / "metadata.json").read_text() + " ")  # and a changed metadata.json
    (out / "extra.bin").write_bytes(b"x")
    assert pack(data, out, "--overwrite") == 1
    assert capsys.readouterr().err.strip() == (
        f"error: output directory {out} holds files packwise did not write: extra.bin; files packwise wrote that "
        f"were changed since: metadata.json, {shard.name} (size or SHA-256 differs from .packwise-manifest.json); "
        f"{REFUSAL_TAIL}"
    )
    for name in ("extra.bin", shard.name, "metadata.json"):
        (out / name).unlink()  # the user removes them: the rest is packwise's and unchanged
    assert pack(data, out, "--overwrite") == 0
    assert read_metadata(out)["packs"] == 4


def test_a_file_changed_during_the_run_stops_the_commit(tmp_path):
    out = tmp_path / "out"
    write_packed(out, [pa.table({"input_ids": [[1, 2]]})], 1, {"capacity": 2})
    with pytest.raises(ValueError) as e, OutputDir(out, overwrite=True) as dest:
        write_packed(dest, [pa.table({"input_ids": [[3]]})], 1, {"capacity": 2})
        (out / "metadata.json").write_text((out / "metadata.json").read_text() + "\n")  # edited mid-run
        dest.commit()
    assert str(e.value) == (
        f"output directory {out}: metadata.json, written by packwise, changed during the run and packwise did not "
        "write them; nothing was replaced — move them away (or delete them yourself) and run again"
    )
    assert load_packed(out).column("input_ids").to_pylist() == [[1, 2]]


def test_an_older_output_with_a_names_only_manifest_still_overwrites_safely(data, tmp_path, capsys):
    out = tmp_path / "out"
    assert pack(data, out) == 0
    names = sorted(p.name for p in out.iterdir() if p.name != MANIFEST)
    (out / MANIFEST).write_text(json.dumps({"files": names, "format": "packwise-manifest-v1"}, indent=2))
    meta = read_metadata(out)
    for s in meta["shards"]:  # and a metadata.json without shard hashes, as packwise wrote it before
        del s["sha256"], s["bytes"]
    (out / "metadata.json").write_text(json.dumps(meta, indent=2, sort_keys=True) + "\n")
    assert load_packed(out).num_rows == 4  # loads: nothing to check against
    assert len(PackedParquetDataset(out)) == 4
    assert pack(data, out, "--overwrite", "--capacity", "16") == 0  # name + content rule: replaced
    assert json.loads((out / MANIFEST).read_text())["format"] == "packwise-manifest-v2"
    assert read_metadata(out)["capacity"] == 16


def test_metadata_records_each_shards_bytes_and_sha256(data, tmp_path):
    out = tmp_path / "out"
    assert pack(data, out, "--packs-per-shard", "3") == 0
    shards = read_metadata(out)["shards"]
    assert [(s["file"], s["packs"]) for s in shards] == [
        ("packs-00000-of-00002.parquet", 3),
        ("packs-00001-of-00002.parquet", 1),
    ]
    for s in shards:
        f = out / s["file"]
        assert (s["bytes"], s["sha256"]) == (f.stat().st_size, sha(f))
        assert sorted(s) == ["bytes", "file", "packs", "sha256"]
    manifest = json.loads((out / MANIFEST).read_text())["files"]
    assert {n: manifest[n] for n in (s["file"] for s in shards)} == {
        s["file"]: {"bytes": s["bytes"], "sha256": s["sha256"]} for s in shards
    }


def test_write_shard_bytes_equal_pyarrows_own_writer(tmp_path):
    table = pa.table({"input_ids": [[1, 2, 3]] * 600, "labels": [[-100, 2, 3]] * 600})
    entry = write_shard(table, tmp_path / "packs-00000-of-00001.parquet")
    pq.write_table(table, tmp_path / "ref.parquet", row_group_size=256)
    assert (tmp_path / "packs-00000-of-00001.parquet").read_bytes() == (tmp_path / "ref.parquet").read_bytes()
    assert entry == {
        "file": "packs-00000-of-00001.parquet", "packs": 600, "bytes": (tmp_path / "ref.parquet").stat().st_size,
        "sha256": sha(tmp_path / "ref.parquet"),
    }  # fmt: skip


def swap_in_a_valid_shard(out) -> tuple[str, str]:
    """Shard 1 replaced by shard 0 (same number of packs): a valid Parquet file with the right row count."""
    a, b = out / "packs-00000-of-00002.parquet", out / "packs-00001-of-00002.parquet"
    want = sha(b)
    shutil.copyfile(a, b)
    return want, sha(b)


@pytest.mark.parametrize("loader", ["load_packed", "PackedParquetDataset"])
def test_a_shard_replaced_by_another_valid_shard_is_refused(loader, data, tmp_path):
    out = tmp_path / "out"
    assert pack(data, out, "--packs-per-shard", "2") == 0  # 2 shards of 2 packs
    load = load_packed if loader == "load_packed" else PackedParquetDataset
    want, got = swap_in_a_valid_shard(out)
    shard = out / "packs-00001-of-00002.parquet"
    size = shard.stat().st_size
    expected = read_metadata(out)["shards"][1]["bytes"]
    with pytest.raises(ValueError) as e:
        load(out)
    assert str(e.value) == (
        f"{shard}: its SHA-256 is {got} ({size} bytes) but metadata.json records {want} ({expected} bytes); the "
        "shard was changed after packwise wrote it — re-run packwise pack (or pass verify_checksums=False to read "
        "it anyway)"
    )
    kept = load(out, verify_checksums=False)  # the documented opt-out: the swapped shard is read as it is
    assert len(kept) if loader != "load_packed" else kept.num_rows == 4


def test_a_one_token_edit_into_a_valid_shard_is_refused(data, tmp_path):
    out = tmp_path / "out"
    assert pack(data, out, "--packs-per-shard", "2") == 0
    shard = out / "packs-00000-of-00002.parquet"
    table = pq.read_table(shard)
    ids = table.column("input_ids").to_pylist()
    ids[0][0] += 1  # one token changed; same shape, rows and columns
    pq.write_table(table.set_column(0, "input_ids", pa.array(ids, table.schema.field("input_ids").type)), shard)
    with pytest.raises(ValueError, match=r"packs-00000-of-00002\.parquet: its SHA-256 is [0-9a-f]{64} "):
        load_packed(out)
    with pytest.raises(ValueError, match=r"the shard was changed after packwise wrote it"):
        PackedParquetDataset(out)


def test_a_forged_shard_hash_in_metadata_is_refused(data, tmp_path):
    out = tmp_path / "out"
    assert pack(data, out) == 0
    meta = json.loads((out / "metadata.json").read_text())
    meta["shards"][0]["sha256"] = "not-a-hash"
    (out / "metadata.json").write_text(json.dumps(meta))
    with pytest.raises(ValueError, match=r"'shards' must list \{file, packs\[, bytes, sha256\]\} entries"):
        load_packed(out)


def test_every_file_packwise_writes_has_a_name_overwrite_accepts(data, tmp_path):
    from packwise.report._plots import PLOT_TITLES

    out = tmp_path / "out"
    assert main(["pack", str(data), "-o", str(out), "--capacity", "8", "-q", "--packs-per-shard", "1"]) == 0
    written = [p.name for p in out.iterdir() if not p.name.startswith(".")]
    assert all(is_packwise_name(n) for n in [*written, *PLOT_TITLES, "report.json", "report.md"]), written
    assert not any(is_packwise_name(n) for n in ("notes.txt", "packs-1-of-2.parquet", "model.bin", "report.txt"))
    assert sorted(json.loads((out / MANIFEST).read_text())["files"]) == sorted(written)
    assert os.path.exists(out / "report.json")


def test_packwise_report_never_overwrites_a_report_file_it_did_not_write(data, tmp_path, capsys):
    out = tmp_path / "out"
    assert pack(data, out) == 0
    assert main(["report", str(out), "-q", "--no-plots"]) == 0
    assert main(["report", str(out), "-q", "--no-plots"]) == 0  # its own files, unchanged: rewritten
    (out / "report.md").write_text("my notes\n")
    capsys.readouterr()
    assert main(["report", str(out), "-q", "--no-plots"]) == 1
    assert capsys.readouterr().err.strip() == (
        f"error: {out}: report.md was not written by packwise or changed since; packwise will not overwrite it — "
        "move it away (or delete it yourself) and run again"
    )
    assert (out / "report.md").read_text() == "my notes\n"


def test_float_ids_are_refused_even_without_checksums(data, tmp_path):
    out = tmp_path / "out"
    assert pack(data, out) == 0
    shard = sorted(out.glob("packs-*.parquet"))[0]
    t = pq.read_table(shard)
    i = t.column_names.index("input_ids")
    pq.write_table(t.set_column(i, "input_ids", t.column(i).cast(pa.list_(pa.float64()))), shard)
    why = f"{shard}: column 'input_ids' has type list<element: double>, expected a list of integers; the shard was"
    with pytest.raises(ValueError, match=why):
        load_packed(out, verify_checksums=False)
    with pytest.raises(ValueError, match=why):
        PackedParquetDataset(out, verify_checksums=False)


@pytest.mark.parametrize("loader", ["load_packed", "PackedParquetDataset"])
def test_hashes_stripped_from_metadata_then_a_shard_swapped_is_refused_by_the_manifest(loader, data, tmp_path):
    out = tmp_path / "out"
    assert pack(data, out, "--packs-per-shard", "2") == 0
    load = load_packed if loader == "load_packed" else PackedParquetDataset
    meta = json.loads((out / "metadata.json").read_text())
    for s in meta["shards"]:
        del s["sha256"], s["bytes"]
    (out / "metadata.json").write_text(json.dumps(meta))
    shard = out / "packs-00001-of-00002.parquet"
    expected = shard.stat().st_size
    want, got = swap_in_a_valid_shard(out)
    size = shard.stat().st_size
    with pytest.raises(ValueError) as e:
        load(out)
    assert str(e.value) == (
        f"{shard}: its SHA-256 is {got} ({size} bytes) but {MANIFEST} records {want} ({expected} bytes); the "
        "shard was changed after packwise wrote it — re-run packwise pack (or pass verify_checksums=False to read "
        "it anyway)"
    )
    kept = load(out, verify_checksums=False)
    assert len(kept) if loader != "load_packed" else kept.num_rows == 4
