"""The Ray engine against the local engine: same plan, same accounting, same bytes; bad rows named the same
way; no partial output on failure. One local Ray session (2 CPUs) for the whole module."""

from __future__ import annotations

import json
import os

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

ray = pytest.importorskip("ray")

from packwise.integrations.ray import _engine as ray_engine  # noqa: E402
from packwise.integrations.ray import pack_ray  # noqa: E402
from packwise.pipeline import pack_columns, write_packs  # noqa: E402
from packwise.pipeline._demo import chitchat_conversations  # noqa: E402


@pytest.fixture(scope="module", autouse=True)
def ray_session():
    os.environ.setdefault("RAY_AUTH_MODE", "disabled")
    ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False)
    yield
    ray.shutdown()


@pytest.fixture(scope="module")
def rows():
    return [{"messages": c} for c in chitchat_conversations()[:200]]


def local_output(data, out, packs_per_shard=10_000, **options):
    """What ``packwise pack`` writes (the CLI's own write path), for in-memory rows as well as paths."""
    packed, report = pack_columns(data, **options)
    write_packs(packed, report, out, packs_per_shard=packs_per_shard)
    return report


def metadata(report):
    return report.metadata()


def same_files(a, b, *, metadata=True, local_only=(".packwise.lock",)):
    """Byte-identical files, but for ``local_only`` ones (a local output's lock file is not data; a remote
    output has no lock and no manifest: pass ``local_only`` with the manifest for it)."""
    names = sorted(p.name for p in a.iterdir() if p.name not in local_only)
    assert names == sorted(p.name for p in b.iterdir() if p.name not in local_only)
    skip = () if metadata else ("metadata.json", ".packwise-manifest.json")  # the manifest hashes metadata.json
    for name in [n for n in names if n not in skip]:
        assert (a / name).read_bytes() == (b / name).read_bytes(), name
    if not metadata and ".packwise-manifest.json" in names:
        files = [json.loads((d / ".packwise-manifest.json").read_text())["files"] for d in (a, b)]
        assert {k: v for k, v in files[0].items() if k != "metadata.json"} == {
            k: v for k, v in files[1].items() if k != "metadata.json"
        }


CONFIGS = [
    ("list", {"capacity": 4096}),
    ("jsonl", {"capacity": 1024, "overflow": "split", "packs_per_shard": 7, "pack_count_multiple": 8}),
    (
        "parquet",
        {
            "capacity": 2048,
            "algorithm": "ffs",
            "seed": 3,
            "max_sequences_per_pack": 4,
            "alignment": 8,
        },  # no loss_on="all": these rows carry labels, which it would ignore (refused)
    ),
]


@pytest.mark.parametrize(("kind", "options"), CONFIGS, ids=[c[0] for c in CONFIGS])
def test_chitchat_same_packs_as_local_engine(kind, options, rows, qwen, tmp_path):
    data = rows
    if kind == "jsonl":
        data = tmp_path / "chats.jsonl"
        data.write_text("".join(json.dumps(r) + "\n" + ("\n" if i % 50 == 7 else "") for i, r in enumerate(rows)))
    elif kind == "parquet":
        data = tmp_path / "chats"
        data.mkdir()
        table = pa.Table.from_pylist(rows)
        pq.write_table(table.slice(0, 120), data / "a.parquet", row_group_size=50)
        pq.write_table(table.slice(120), data / "b.parquet")
    local = local_output(data, tmp_path / "local", tokenizer=qwen, **options)
    report = pack_ray(data, tmp_path / "ray", tokenizer="qwen2.5" if kind == "list" else qwen, **options)
    assert metadata(report) == metadata(local)  # plan_hash, every count, metrics, fingerprints
    assert (report.rows_read, report.samples, report.plan_hash) == (200, 200, local.plan_hash)
    same_files(tmp_path / "ray", tmp_path / "local")


def test_pretokenized_dataset_with_bad_rows(tmp_path):
    ids = [[(7 * i + j) % 1000 + 1 for j in range(2 + (37 * i) % 90)] for i in range(300)]
    rows = [{"input_ids": x, "labels": [-100] + x[1:], "pos": list(range(len(x)))} for x in ids]  # >= 1 target
    rows[5]["input_ids"] = []  # empty -> skipped
    rows[170]["input_ids"] = [1, 999_999]  # outside qwen2.5's vocabulary -> skipped
    rows[40]["labels"] = [1]  # wrong length -> skipped
    rows[250]["labels"], rows[260]["input_ids"], rows[280]["input_ids"] = [1], [], [1, 999_999]  # 6 > 5 listed
    table = pa.Table.from_pylist(rows)
    path = tmp_path / "tok.parquet"
    pq.write_table(table, path)
    options = {"capacity": 64, "tokenizer": "qwen2.5", "skip_bad_rows": True, "packs_per_shard": 40}
    local = local_output(path, tmp_path / "local", **options)
    report = pack_ray(ray.data.from_arrow(table), tmp_path / "ray", **options)
    ours, theirs = metadata(report), metadata(local)
    assert (ours.pop("input"), theirs.pop("input")) == ("ray.data.Dataset", str(path))
    ours.pop("input_fingerprint"), theirs.pop("input_fingerprint")
    ours["skipped_examples"] = [m.replace("ray.data.Dataset", str(path)) for m in ours["skipped_examples"]]
    assert ours == theirs  # plan, accounting and the first 5 bad rows, in row order as the local engine lists them
    assert (report.rows_read, report.rows_skipped, report.samples) == (300, 6, 294)
    listed = [m.split(":")[0] for m in report.skipped_examples]
    assert listed == [f"ray.data.Dataset row {i}" for i in (5, 40, 170, 250, 260)]
    same_files(tmp_path / "ray", tmp_path / "local", metadata=False)  # metadata: only the input name differs
    pack_ray(table, tmp_path / "table", **options)  # a pyarrow.Table, as pack_columns takes it: all equal
    local_output(table, tmp_path / "table-local", **options)
    same_files(tmp_path / "table", tmp_path / "table-local")
    blocks = ray.data.from_arrow([table.slice(0, 100), table.slice(100, 7), table.slice(107)])
    again = pack_ray(blocks, tmp_path / "again", **options)
    assert (again.input_fingerprint, again.plan_hash) == (report.input_fingerprint, report.plan_hash)


def test_pieces_that_keep_nothing_and_a_column_that_starts_mid_input(tmp_path):
    """200 rows on 2 CPUs are 8 pieces of 25. Rows 0-24 (piece 0) are over capacity: with overflow='drop' that
    piece sends nothing. Rows 60+ carry a per-token column that rows 0-59 lack: the first good row decides
    (row 25, without it), so rows 60+ are bad rows in both engines, named and counted alike."""
    rows = [{"input_ids": list(range(1, (i % 7) + 3 + (40 if i < 25 else 0)))} for i in range(200)]
    for row in rows[60:]:
        row["extra"] = [0.5] * len(row["input_ids"])
    options = {"capacity": 32, "overflow": "drop"}
    with pytest.raises(ValueError) as local_error:
        pack_columns(rows, **options)
    with pytest.raises(ValueError) as ray_error:
        pack_ray(rows, tmp_path / "ray", **options)
    assert str(ray_error.value) == str(local_error.value)
    assert str(ray_error.value).startswith(
        "list row 60: field 'extra' is a per-token column here but not in the first good row (first good row: [], "
        "this row: ['extra']; every row needs the same per-token columns); fix the row or pass --skip-bad-rows"
    )
    local = local_output(rows, tmp_path / "local", packs_per_shard=5, skip_bad_rows=True, **options)
    report = pack_ray(rows, tmp_path / "ray", packs_per_shard=5, skip_bad_rows=True, **options)
    assert (report.rows_skipped, report.samples_dropped, report.sequences_packed) == (140, 25, 35)
    assert report.skipped_examples[0].endswith("every row needs the same per-token columns)")  # no --skip hint
    assert metadata(report) == metadata(local)
    same_files(tmp_path / "ray", tmp_path / "local")


def test_pretokenized_t_by_k_column_same_bytes_as_local(tmp_path):
    """A per-token column shaped [T, 2] (teacher top-k log-probs) goes through the pieces, the spill and the
    writers: the same files as the local engine, its shape in metadata.json."""
    rows = [
        {"input_ids": list(range(1, 3 + i % 9)), "topk": [[-0.5 * j, float(i)] for j in range(2 + i % 9)]}
        for i in range(60)
    ]
    local = local_output(rows, tmp_path / "local", packs_per_shard=5, capacity=16)
    report = pack_ray(rows, tmp_path / "ray", packs_per_shard=5, capacity=16)
    assert metadata(report) == metadata(local)
    assert report.token_columns == {"topk": {"dtype": "float64", "shape": [2]}}
    same_files(tmp_path / "ray", tmp_path / "local")


@pytest.mark.parametrize("types", [0, 1], ids=["zeros", "nonzero"])
def test_pretokenized_mm_token_type_ids_without_images(types, tmp_path):
    """A pre-tokenized ``mm_token_type_ids`` column is a per-token column like any other: no media columns on
    either engine (the local engine's ``samples.media is not None`` decides), and the packs load."""
    from packwise.assemble import collate_packs
    from packwise.data import PackedParquetDataset

    rows = [{"input_ids": list(range(1, 3 + i % 5)), "mm_token_type_ids": [types] * (2 + i % 5)} for i in range(40)]
    local = local_output(rows, tmp_path / "local", capacity=8)
    report = pack_ray(rows, tmp_path / "ray", capacity=8)
    assert metadata(report) == metadata(local) and report.multimodal is None
    same_files(tmp_path / "ray", tmp_path / "local")
    names = pq.read_schema(next((tmp_path / "ray").glob("*.parquet"))).names
    assert names == ["input_ids", "labels", "seq_lengths", "source_index", "mm_token_type_ids"]
    batch = collate_packs([PackedParquetDataset(tmp_path / "ray")[0]])
    assert set(batch["mm_token_type_ids"].flatten().tolist()) == {types}


def test_relative_input_after_chdir(tmp_path, monkeypatch):
    """Ray's workers keep the working directory of ``ray.init``: relative input (and output) paths are resolved
    on the driver, and the input keeps its name as given (``metadata.json`` equals the local engine's)."""
    rows = [{"input_ids": list(range(1, 3 + i % 9))} for i in range(60)]
    (tmp_path / "in.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    (tmp_path / "in").mkdir()
    pq.write_table(pa.Table.from_pylist(rows), tmp_path / "in" / "a.parquet")
    monkeypatch.chdir(tmp_path)
    for name in ("in.jsonl", "in"):
        local = local_output(name, tmp_path / f"{name}-local", capacity=32)
        report = pack_ray(name, f"{name}-ray", capacity=32)
        assert report.input == name and metadata(report) == metadata(local)
        same_files(tmp_path / f"{name}-ray", tmp_path / f"{name}-local")


GOOD = {"messages": [{"role": "user", "content": "Hi"}, {"role": "assistant", "content": "Hello"}]}


@pytest.mark.parametrize(
    ("bad_lines", "message"),
    [
        ({3: '{"messages": ['}, "line 4: malformed JSON (Expecting value: line 2 column 1 (char 15))"),
        (
            {2: json.dumps({"messages": [{"role": "user", "content": 5}]}), 1500: json.dumps({"messages": []})},
            "line 3: field 'messages[0].content' is int, expected a string",
        ),
    ],
    ids=["malformed_json", "bad_field"],
)
def test_bad_row_named_like_local_engine(bad_lines, message, qwen, tmp_path):
    lines = [json.dumps(GOOD)] * 2000  # ~200 KB: 3 JSONL pieces
    for i, line in bad_lines.items():
        lines[i] = line
    path = tmp_path / "data.jsonl"
    path.write_text("\n".join(lines) + "\n")
    with pytest.raises(ValueError) as local_error:
        pack_columns(path, capacity=64, tokenizer=qwen)
    with pytest.raises(ValueError) as ray_error:
        pack_ray(path, tmp_path / "out", capacity=64)
    assert str(ray_error.value) == str(local_error.value)
    assert str(ray_error.value).startswith(f"{path} {message}")
    assert str(ray_error.value).endswith("pass --skip-bad-rows (skip_bad_rows=True) to skip and count it")
    assert list(tmp_path.iterdir()) == [path]
    local = local_output(path, tmp_path / "local", capacity=64, tokenizer=qwen, skip_bad_rows=True)
    report = pack_ray(path, tmp_path / "ray", capacity=64, skip_bad_rows=True)
    assert metadata(report) == metadata(local)
    assert (report.rows_read, report.rows_skipped, report.samples) == (2000, len(bad_lines), 2000 - len(bad_lines))
    assert report.skipped_examples[0].startswith(f"{path} {message}")
    same_files(tmp_path / "ray", tmp_path / "local")


def test_failed_run_leaves_no_partial_output(rows, tmp_path, monkeypatch):
    out = tmp_path / "out"
    pack_ray(rows[:20], out, capacity=4096)
    before = {p.name: p.read_bytes() for p in out.iterdir()}
    real = ray_engine._write_group

    def write_then_fail(meta, *parts):
        real(meta, *parts)  # the shard file exists in the temporary directory
        raise OSError("disk full")

    monkeypatch.setattr(ray_engine, "_write_group", write_then_fail)
    with pytest.raises(ray.exceptions.RayTaskError, match="disk full"):
        pack_ray(rows, out, capacity=512, overwrite=True, packs_per_shard=10)
    monkeypatch.undo()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["out"]  # no temporary directory left
    assert {p.name: p.read_bytes() for p in out.iterdir()} == before  # the old output is untouched
    with pytest.raises(ValueError) as local_error:
        pack_columns(rows[:8], capacity=64, overflow="error")
    with pytest.raises(ValueError) as ray_error:
        pack_ray(rows[:8], tmp_path / "new", capacity=64, overflow="error")
    assert str(ray_error.value) == str(local_error.value)
    assert "tokens > capacity 64; pass --overflow truncate|split|drop" in str(ray_error.value)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["out"]


def test_options_checked_before_work(tmp_path):
    with pytest.raises(ValueError, match="unknown overflow policy 'cut'"):
        pack_ray([GOOD], tmp_path / "o", overflow="cut")
    with pytest.raises(ValueError, match="capacity must be an integer >= 1"):
        pack_ray([GOOD], tmp_path / "o", capacity=0)
    with pytest.raises(ValueError, match="num_cpus must be an integer >= 1, got 0"):
        pack_ray([GOOD], tmp_path / "o", num_cpus=0)
    with pytest.raises(
        TypeError, match=r"pack_ray takes a JSONL/Parquet/HF-dataset path or URI, a ray.data.Dataset, .* got dict"
    ):
        pack_ray({"messages": []}, tmp_path / "o")
    with pytest.raises(TypeError, match="runtime_env must be a dict"):
        pack_ray([GOOD], tmp_path / "o", runtime_env="pip")
    with pytest.raises(TypeError, match=r"filesystem must be a pyarrow\.fs\.FileSystem"):
        pack_ray([GOOD], tmp_path / "o", filesystem="s3")
    assert list(tmp_path.iterdir()) == []


@pytest.mark.slow  # the first image loads the HF image processor (torch) in the driver and in a worker: ~10 s
def test_images_same_packs_as_local_engine(tmp_path):
    """Rows with images only in the last of 2 JSONL pieces: media columns and counts as the local engine's."""
    skimage_data = pytest.importorskip("skimage.data")
    from PIL import Image

    from packwise.multimodal import VisionSpec

    Image.fromarray(skimage_data.coffee()).save(tmp_path / "coffee.png")
    image = {"role": "user", "content": [{"type": "image", "path": "coffee.png"}, {"type": "text", "text": "What?"}]}
    rows = [
        {"messages": [{"role": "user", "content": f"hi {i}"}, GOOD["messages"][1]]} for i in range(700)
    ]  # ~75 KB: 2 pieces
    rows[-1]["messages"][0] = image
    path = tmp_path / "mm.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    options = {"capacity": 40, "vision": VisionSpec(max_pixels=112 * 112)}
    local = local_output(path, tmp_path / "local", tokenizer="qwen2.5", **options)
    report = pack_ray(path, tmp_path / "ray", **options)
    assert metadata(report) == metadata(local)
    assert report.multimodal["images_packed"] == 1
    same_files(tmp_path / "ray", tmp_path / "local")


def test_cli_engine_ray_writes_the_local_engines_files(rows, tmp_path, capsys):
    from packwise.cli import main

    data = tmp_path / "chats.jsonl"
    data.write_text("".join(json.dumps(r) + "\n" for r in rows[:80]))
    common = ["pack", str(data), "--capacity", "1024", "--packs-per-shard", "5", "--no-report", "--json"]
    assert main([*common, "-o", str(tmp_path / "local")]) == 0
    local = json.loads(capsys.readouterr().out)
    assert main([*common, "-o", str(tmp_path / "ray"), "--engine", "ray"]) == 0
    remote = json.loads(capsys.readouterr().out)
    assert remote["plan_hash"] == local["plan_hash"] and remote["tokens_packed"] == local["tokens_packed"]
    assert remote["packs"] == local["packs"] > 5  # several shards
    same_files(tmp_path / "ray", tmp_path / "local")
    import hashlib

    from packwise.files import read_metadata

    shards = read_metadata(tmp_path / "ray")["shards"]  # both engines record each shard's bytes and SHA-256
    assert len(shards) > 1 and all(
        (s["bytes"], s["sha256"])
        == (len(b := (tmp_path / "ray" / s["file"]).read_bytes()), hashlib.sha256(b).hexdigest())
        for s in shards
    )


def test_pack_dataset_takes_a_packing_config(rows, tmp_path):
    from packwise import PackingConfig
    from packwise.integrations.ray import pack_dataset

    cfg = PackingConfig(capacity=2048, algorithm="ffd", loss_on="all")
    report = pack_dataset(rows[:50], tmp_path / "ray", cfg, capacity=1024)  # overrides replace config fields
    local = local_output(rows[:50], tmp_path / "local", capacity=1024, algorithm="ffd", loss_on="all")
    assert (report.capacity, report.algorithm, report.plan_hash) == (1024, local.algorithm, local.plan_hash)
    with pytest.raises(TypeError, match="pass a PackingConfig, a path to one, or None"):
        pack_dataset(rows[:5], tmp_path / "x", {"capacity": 8})


def test_cli_ray_options_need_engine_ray(tmp_path, capsys):
    from packwise.cli import main

    assert main(["pack", "-o", str(tmp_path / "o"), "--num-cpus", "2"]) == 1
    assert "--ray-address, --num-cpus and --runtime-env apply to --engine ray" in capsys.readouterr().err
    assert main(["pack", "s3://bkt/in.jsonl", "-o", str(tmp_path / "o")]) == 1
    assert "s3://bkt/in.jsonl: URIs (s3://... or any pyarrow filesystem) need --engine ray" in capsys.readouterr().err
    assert main(["pack", "-o", "gs://bkt/out/"]) == 1
    assert "gs://bkt/out/: URIs" in capsys.readouterr().err
    for env, message in [
        ("{'pip': 1}", "--runtime-env: not valid JSON"),
        ("[1, 2]", "--runtime-env: must be a JSON object (Ray's runtime_env), got list"),  # as a file holding it
        ("42", "--runtime-env: must be a JSON object (Ray's runtime_env), got int"),
        ("nope.json", "--runtime-env nope.json: neither JSON text (starting with '{') nor a JSON file"),
        ('{"pip": ["x"]', "--runtime-env: not valid JSON"),
    ]:
        assert main(["pack", "-o", str(tmp_path / "o"), "--engine", "ray", "--runtime-env", env]) == 1
        assert message in capsys.readouterr().err
    (tmp_path / "env.json").write_text("[1]")
    assert (
        main(["pack", "-o", str(tmp_path / "o"), "--engine", "ray", "--runtime-env", str(tmp_path / "env.json")]) == 1
    )
    assert f"--runtime-env {tmp_path / 'env.json'}: must be a JSON object (Ray's runtime_env), got list" in (
        capsys.readouterr().err
    )
    assert main(["pack", "-o", str(tmp_path / "o"), "--engine", "spark"]) == 2  # a usage error: the choices
    assert "Invalid value for '--engine': Value error, 'spark' is not one of 'local', 'ray'." in capsys.readouterr().err


def test_saved_hf_dataset_directory(tmp_path):
    datasets = pytest.importorskip("datasets")
    rows = [{"input_ids": [(3 * i + j) % 500 + 1 for j in range(1 + (13 * i) % 40)]} for i in range(300)]
    path = tmp_path / "saved"
    datasets.Dataset.from_list(rows).save_to_disk(str(path), num_shards=2)
    options = {"capacity": 64, "packs_per_shard": 30}
    local = local_output(path, tmp_path / "local", **options)
    report = pack_ray(path, tmp_path / "ray", **options)
    assert (report.input, report.plan_hash, report.rows_read) == (str(path), local.plan_hash, 300)
    same_files(tmp_path / "ray", tmp_path / "local")


def test_driver_plans_from_histograms_only(rows, qwen, tmp_path, monkeypatch):
    """BFD with alignment, a sequence cap and a pack-count target: the driver plans from the pieces' length
    histograms (plan_packs, which needs every length, is never called) and the output is the local engine's."""
    from packwise.integrations.ray import _driver as _ray_driver

    def no_lengths(*args, **kwargs):
        raise AssertionError("the driver planned from per-row lengths")

    monkeypatch.setattr(_ray_driver, "plan", no_lengths)
    options = {"capacity": 1024, "alignment": 8, "max_sequences_per_pack": 3, "min_packs": 150}
    options |= {"overflow": "split", "packs_per_shard": 20}
    report = pack_ray(rows, tmp_path / "ray", tokenizer="qwen2.5", **options)
    local = local_output(rows, tmp_path / "local", tokenizer=qwen, **options)
    assert report.packs == local.packs >= 150
    assert metadata(report) == metadata(local)  # plan_hash, metrics (fills from real pack lengths), counts
    same_files(tmp_path / "ray", tmp_path / "local")


def test_second_pass_reads_the_spill_not_the_input(rows, qwen, tmp_path, monkeypatch):
    """Pass 2 reads pass 1's spill, never the input (the input is replaced by other rows once pass 1 is
    done): one place task per piece, rows handed to the writers through the spill folder, which is gone
    from the output; the files are still the local engine's."""
    import uuid

    path = tmp_path / "rows.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    options = {"capacity": 512, "overflow": "split", "packs_per_shard": 10}
    local = local_output(path, tmp_path / "local", tokenizer=qwen, **options)
    marks, real, assemble = tmp_path / "marks", ray_engine._place, ray_engine._assemble
    marks.mkdir()

    def counted(*args):  # runs on a worker (same machine): one file per pass-2 task
        (marks / uuid.uuid4().hex).touch()
        return real(*args)

    def input_changed(ray, plan, stats, spill, *args):  # the driver, after pass 1 and the plan
        spilled = sorted(p.name for p in (tmp_path / "ray").glob(".packwise-staging*/.packwise-spill/*"))
        assert spilled[:2] == ["piece-0000000.npy", "piece-0000000.pkl"] and len(spilled) == 2 * len(stats)
        path.write_text("".join(json.dumps({"messages": rows[0]["messages"][:2]}) + "\n" for _ in rows))
        return assemble(ray, plan, stats, spill, *args)

    monkeypatch.setattr(ray_engine, "_place", counted)
    monkeypatch.setattr(ray_engine, "_assemble", input_changed)
    report = pack_ray(path, tmp_path / "ray", tokenizer="qwen2.5", **options)
    assert metadata(report) == metadata(local)
    same_files(tmp_path / "ray", tmp_path / "local")  # the spill folder is gone
    assert len(list(marks.iterdir())) == 8  # 8 pieces (200 rows on 2 CPUs), each placed once


@pytest.mark.parametrize("on", ["path", "pyarrow"])
def test_spill_round_trip(on, tmp_path):
    """A piece's samples and lengths, and pass 2's per-group parts (in piece order), come back from the
    spill as written, on a local path or a pyarrow filesystem (the remote code path); the folder is
    removed with everything in it."""
    import pyarrow.fs as pafs

    from packwise.integrations import _ray_spill
    from packwise.integrations.ray._fs import Loc
    from packwise.pipeline import Samples

    samples = Samples(
        np.arange(5, dtype=np.int32), np.array([-100, 1, 2, -100, 4], np.int32), np.array([0, 2, 5]),
        np.array([3, 7]), {"mm_token_type_ids": np.zeros(5, np.int8)},
    )  # fmt: skip
    samples.media = [[("a.png", (1, 2, 2))], []]
    tmp = tmp_path if on == "path" else Loc(pafs.LocalFileSystem(), str(tmp_path), "remote")
    root = _ray_spill.spill_root(tmp)
    written = _ray_spill.write_piece(root, 4, samples, samples.lengths)
    spill = tmp_path / (_ray_spill.SPILL_DIR if on == "path" else _ray_spill.REMOTE_SPILL_DIR)
    assert written == sum(p.stat().st_size for p in spill.iterdir())
    back = _ray_spill.read_piece(root, 4)
    assert back.media == samples.media and back.columns.keys() == samples.columns.keys()
    for name in ("ids", "labels", "offsets", "source"):
        np.testing.assert_array_equal(getattr(back, name), getattr(samples, name))
    assert _ray_spill.read_lengths(root, 4).tolist() == [2, 3]
    _ray_spill.group_folders(root, 2)
    for i in (11, 3, 7):
        _ray_spill.write_part(root, 1, i, ("part", i))
    assert _ray_spill.read_parts(root, 1) == [("part", 3), ("part", 7), ("part", 11)]
    assert _ray_spill.read_parts(root, 0) == []
    _ray_spill.drop_piece(root, 4)
    assert sorted(p.name for p in spill.iterdir() if p.is_file()) == ["piece-0000004.npy"]
    _ray_spill.remove(root)
    assert list(tmp_path.iterdir()) == []


def test_pieces_tokenized_by_different_tokenizers_are_refused(rows, tmp_path, monkeypatch):
    """Every piece reports its own tokenizer fingerprint (real Ray workers); a run whose pieces disagree — nodes
    that load different tokenizer files — raises naming both, and writes nothing."""
    from packwise.text import load_tokenizer, tokenizer_fingerprint

    seen = []
    real = ray_engine.tokenize_pieces

    def one_node_differs(*args, **kwargs):
        stats, jobs = real(*args, **kwargs)
        seen.extend(s.tokenizer for s in stats)
        if len(stats) > 1:
            stats[-1].tokenizer = ("other", "0123456789abcdef")
        return stats, jobs

    monkeypatch.setattr(ray_engine, "tokenize_pieces", one_node_differs)
    with pytest.raises(ValueError) as err:
        pack_ray(rows, tmp_path / "ray", capacity=1024)
    want = tokenizer_fingerprint(load_tokenizer("qwen2.5"))
    assert len(seen) > 1 and set(seen) == {("qwen2.5", want)}  # every piece's own, all the same here
    assert f"piece 0 was tokenized by qwen2.5 (fingerprint {want}) but piece {len(seen) - 1} by other" in str(err.value)
    assert "the Ray workers loaded different tokenizers" in str(err.value)
    assert not (tmp_path / "ray").exists()


def test_check_tokenizers_names_the_first_disagreeing_piece():
    from packwise.integrations.ray._driver import _check_tokenizers
    from packwise.integrations.ray._workers import PieceStats

    same = [PieceStats(tokenizer=("t", "a" * 16)), PieceStats(), PieceStats(tokenizer=("t", "a" * 16))]
    _check_tokenizers(same, "in.jsonl")  # pieces without a tokenizer (nothing read) do not count
    differ = [*same, PieceStats(tokenizer=("t", "b" * 16))]
    with pytest.raises(
        ValueError, match=r"^in.jsonl: piece 0 was tokenized by t \(fingerprint a{16}\) but piece 3 by t"
    ):
        _check_tokenizers(differ, "in.jsonl")
