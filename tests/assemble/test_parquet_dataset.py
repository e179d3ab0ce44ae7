"""PackedParquetDataset reads `packwise pack` output; works with DataLoader workers and collate_packs."""

from __future__ import annotations

import torch
from torch.utils.data import DataLoader

from packwise.assemble import collate_packs
from packwise.cli import main
from packwise.data import PackedParquetDataset

X = -100


def _packed(tmp_path, write_jsonl, capacity=8):
    rows = [
        {"input_ids": list(range(1, n + 1)), "mirror": [-t for t in range(1, n + 1)]} for n in (5, 3, 7, 2, 6, 1, 4, 4)
    ]
    assert (
        main(
            [
                "pack",
                str(write_jsonl(rows)),
                "-o",
                str(tmp_path / "out"),
                "--capacity",
                str(capacity),
                "--packs-per-shard",
                "2",
                "-q",
            ]
        )
        == 0
    )
    return tmp_path / "out"


def test_items_are_packed_sequences(tmp_path, write_jsonl):
    ds = PackedParquetDataset(_packed(tmp_path, write_jsonl))
    # BFD at C=8 on 5,3,7,2,6,1,4,4: [7,1] [6,2] [5,3] [4,4]
    assert len(ds) == 4
    p = ds[0]
    assert p.input_ids.tolist() == [1, 2, 3, 4, 5, 6, 7, 1]
    assert p.labels.tolist() == [X, 2, 3, 4, 5, 6, 7, X]
    assert p.position_ids.tolist() == [0, 1, 2, 3, 4, 5, 6, 0]
    assert p.cu_seqlens.tolist() == [0, 7, 8] and p.metadata == {"source_index": [2, 5]}
    assert torch.equal(p.columns["mirror"], -p.input_ids)
    assert ds[-1].metadata == {"source_index": [6, 7]}


def test_dataloader_with_workers(tmp_path, write_jsonl):
    ds = PackedParquetDataset(_packed(tmp_path, write_jsonl), pad_to=8)
    for workers in (0, 2):
        batches = list(DataLoader(ds, batch_size=2, num_workers=workers, collate_fn=collate_packs))
        assert [b["input_ids"].shape for b in batches] == [(1, 16), (1, 16)]
        assert all(torch.equal(b["mirror"], -b["input_ids"]) for b in batches)
        sources = sorted(s for b in batches for pack in b["metadata"]["source_index"] for s in pack)
        assert sources == list(range(8))


def test_alignment_at_load_time(tmp_path, write_jsonl):
    ds = PackedParquetDataset(_packed(tmp_path, write_jsonl, capacity=64), alignment=4)
    assert ds[0].cu_seqlens_padded.tolist() == [0, 8, 16, 24, 28, 32, 36, 40, 44]  # 7 6 5 4 4 3 2 1, each to 4
    # (at capacity 8, alignment=4 would make the pack 5 + 3 12 tokens: refused, tests/assemble/test_parquet_break_fixc)


def test_modified_directories_are_refused(tmp_path, write_jsonl):
    import json

    import pyarrow as pa
    import pyarrow.parquet as pq
    import pytest

    out = _packed(tmp_path, write_jsonl)
    shard = out / "packs-00000-of-00002.parquet"
    table = pq.read_table(shard)
    # seq_lengths that do not cover the tokens
    broken = table.set_column(
        table.column_names.index("seq_lengths"), "seq_lengths", pa.array([[1, 1], [1, 1]], pa.list_(pa.int32()))
    )
    pq.write_table(broken, shard)
    with pytest.raises(ValueError, match=r"packs-00000-of-00002\.parquet: its SHA-256 is "):
        PackedParquetDataset(out)  # changed since packwise wrote it; the checks below read it anyway
    with pytest.raises(ValueError, match="pack 0: seq_lengths sum to 2 but the pack holds 8 tokens"):
        PackedParquetDataset(out, verify_checksums=False)[0]
    # a shard whose pack count disagrees with metadata.json
    pq.write_table(table.slice(0, 1), shard)
    with pytest.raises(ValueError, match=r"holds 1 packs but metadata\.json says 2"):
        PackedParquetDataset(out, verify_checksums=False)
    # a missing labels column
    pq.write_table(table.drop_columns(["labels"]), shard)
    with pytest.raises(ValueError, match="has no 'labels' column"):
        PackedParquetDataset(out, verify_checksums=False)
    meta = json.loads((out / "metadata.json").read_text())
    del meta["shards"]
    (out / "metadata.json").write_text(json.dumps(meta))
    with pytest.raises(ValueError, match="'shards' must list"):
        PackedParquetDataset(out)
