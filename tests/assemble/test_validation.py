"""assemble_pack checks values like `packwise pack` does; PackedDataCollator strips padding like pack_dataset;
damaged packed shards and mixed devices are named (issue 15)."""

from __future__ import annotations

import shutil

import numpy as np
import pyarrow.parquet as pq
import pytest
import torch

from packwise.assemble import assemble_pack, collate_packs
from packwise.cli import main
from packwise.data import PackedParquetDataset
from packwise.files._write import load_packed
from packwise.hf import PackedDataCollator

BAD = [
    ("loss_mask 2", [{"input_ids": [1, 2, 3], "loss_mask": [0, 1, 2]}], ValueError,
     "sequence 0: loss_mask has 2 at position 2; a loss mask holds only 0/1"),
    ("negative id", [{"input_ids": [1, 2]}, {"input_ids": [3, -4]}], ValueError,
     "sequence 1: input_ids has -4 at position 1, outside token ids >= 0"),
    ("HF labels with loss_mask", [{"input_ids": [1, 2, 3], "labels": [1, 2, 3], "loss_mask": [1, 1, 1]}], ValueError,
     "sequence 0: carries labels and loss_mask, which declares a Megatron row"),
    ("bad label", [{"input_ids": [1, 2]}, {"input_ids": [3, 4], "labels": [-100, -7]}], ValueError,
     "sequence 1: labels has -7 at position 1, neither -100 (no loss) nor a token id"),
    ("ragged ids", [{"input_ids": [[1, 2], [3]]}], TypeError,
     "sequence 0: column 'input_ids' cannot become a tensor: it is ragged"),
    ("string ids", [{"input_ids": ["a", "b"]}], TypeError,
     "sequence 0: column 'input_ids' cannot become a tensor: it holds 'a'"),
    ("float ids", [{"input_ids": [1.0, 2.0]}], TypeError, "sequence 0: input_ids has dtype torch.float64"),
    ("float labels", [{"input_ids": [1, 2], "labels": [1.0, 2.0]}], TypeError,
     "sequence 0: labels has dtype torch.float64"),
    ("float positions", [{"input_ids": [1, 2], "position_ids": [0.0, 1.0]}], TypeError,
     "sequence 0: position_ids has dtype torch.float64"),
    ("uint64 beyond int64", [{"input_ids": np.array([1, 2**63 + 5], dtype=np.uint64)}], TypeError,
     "sequence 0: column 'input_ids' cannot become a tensor: it holds 9223372036854775813, beyond int64"),
    ("padded sequence", [{"input_ids": [1, 2, 0], "attention_mask": [1, 1, 0]}], ValueError,
     "sequence 0: attention_mask has 0 at position 2: padded sequences would be packed pads and all"),
]  # fmt: skip


@pytest.mark.parametrize(("case", "seqs", "exc", "message"), BAD, ids=[b[0] for b in BAD])
def test_assemble_pack_refuses(case, seqs, exc, message):
    with pytest.raises(exc) as info:
        assemble_pack(seqs)
    assert message in str(info.value)


def test_vocab_size_bounds_ids_and_labels():
    with pytest.raises(
        ValueError, match=r"sequence 0: input_ids has 100 at position 1, outside the vocabulary \[0, 100\)"
    ):
        assemble_pack([{"input_ids": [1, 100]}], vocab_size=100)
    with pytest.raises(ValueError, match=r"sequence 0: labels has 100 at position 1, .* in \[0, 100\)"):
        assemble_pack([{"input_ids": [1, 2], "labels": [1, 100]}], vocab_size=100)
    assert assemble_pack([{"input_ids": [1, 99]}], vocab_size=100).input_ids.tolist() == [1, 99]


def test_valid_masks_and_pads_pass():
    bools = assemble_pack([{"input_ids": [1, 2, 3], "loss_mask": [False, True, True]}])
    floats = assemble_pack([{"input_ids": torch.tensor([1, 2, 3]), "loss_mask": torch.tensor([0.0, 1.0, 0.0])}])
    assert bools.labels.tolist() == [-100, 2, 3] and floats.labels.tolist() == [-100, 2, -100]
    custom = assemble_pack([{"input_ids": [1, 2], "labels": [-1, 2]}], label_pad_id=-1)
    assert custom.labels.tolist() == [-1, 2]
    full = assemble_pack([{"input_ids": [1, 2], "attention_mask": [1, 1]}])
    assert full.columns["attention_mask"].tolist() == [1, 1]


def test_mixed_devices_are_named():
    meta = torch.tensor([1, 2, 3], device="meta")
    with pytest.raises(ValueError, match="sequence 1: its tensors are on meta but sequence 0's are on cpu"):
        assemble_pack([{"input_ids": torch.tensor([1, 2])}, {"input_ids": meta}])
    a, b = assemble_pack([{"input_ids": torch.tensor([1, 2])}]), assemble_pack([{"input_ids": meta}])
    with pytest.raises(ValueError, match="pack 1 is on meta but pack 0 is on cpu"):
        collate_packs([a, b])


def test_collator_strips_left_and_right_padding():
    batch = PackedDataCollator()(
        [
            {"input_ids": [0, 0, 5, 6, 7], "attention_mask": [0, 0, 1, 1, 1], "labels": [-100, -100, 5, 6, 7]},
            {"input_ids": [8, 9, 0], "attention_mask": [1, 1, 0]},
        ]
    )
    assert batch["input_ids"].tolist() == [[5, 6, 7, 8, 9]]
    assert batch["labels"].tolist() == [[-100, 6, 7, -100, 9]]
    assert batch["position_ids"].tolist() == [[0, 1, 2, 0, 1]]
    assert batch["cu_seq_lens_q"].tolist() == [0, 3, 5]


@pytest.mark.parametrize(
    ("feature", "exc", "message"),
    [
        ({"input_ids": [1, 2, 3], "attention_mask": [1, 0, 1]}, ValueError,
         "feature 0: field 'attention_mask' has a 0 at position 1 between real tokens (0..2)"),
        ({"input_ids": [1, 2], "attention_mask": [0, 0]}, ValueError, "field 'attention_mask' is all zeros"),
        ({"input_ids": [1, 2], "attention_mask": [1, 2]}, ValueError, "field 'attention_mask' must hold only 0/1"),
        ({"input_ids": [1, 2, 0], "attention_mask": [1, 1, 0], "seq_lengths": [1, 2]}, ValueError,
         "feature 0 is a packed row (seq_lengths) with padding in its attention_mask"),
        ({"input_ids": ["hello", "world"]}, TypeError, "feature 0: input_ids holds 'hello'"),
        ({"input_ids": [[1, 2], [3]]}, TypeError, "feature 0: input_ids is ragged"),
        ({"input_ids": [1.5, 2.0]}, TypeError, "feature 0: input_ids has dtype float64; token ids are integers"),
        ({"input_ids": None}, ValueError, "feature 0 has no 'input_ids' or it is None"),
    ],
)  # fmt: skip
def test_collator_refuses(feature, exc, message):
    with pytest.raises(exc) as info:
        PackedDataCollator()([feature])
    assert message in str(info.value)


@pytest.fixture(scope="module")
def packed(tmp_path_factory):
    d = tmp_path_factory.mktemp("packed")
    (d / "in.jsonl").write_text('{"input_ids": [1, 2, 3]}\n{"input_ids": [4, 5]}\n')
    assert main(["pack", str(d / "in.jsonl"), "-o", str(d / "out"), "--capacity", "8", "-q", "--no-report"]) == 0
    return d / "out"


def _damaged(packed, tmp_path, how):
    out = tmp_path / how
    shutil.copytree(packed, out)
    shard = next(out.glob("packs-*.parquet"))
    data = shard.read_bytes()
    if how == "truncated":
        shard.write_bytes(data[: len(data) // 2])
    elif how == "empty":
        shard.write_bytes(b"")
    else:
        pq.write_table(pq.read_table(shard).drop(["labels"]), shard)
    return out, shard


@pytest.mark.parametrize(
    ("how", "message"),
    [
        ("truncated", "cannot be read as Parquet (.*magic bytes.*); the shard is truncated or damaged"),
        ("empty", "cannot be read as Parquet (.*0 bytes.*); the shard is truncated or damaged"),
        ("no_labels", "has no 'labels' column"),
    ],
)
def test_damaged_shards_are_named(packed, tmp_path, how, message):
    out, shard = _damaged(packed, tmp_path, how)
    for load in (PackedParquetDataset, load_packed):
        with pytest.raises(ValueError, match="the shard was changed after packwise wrote it") as info:
            load(out)  # its SHA-256 is not the recorded one
        assert str(info.value).startswith(f"{shard}: its SHA-256 is ")
        with pytest.raises(ValueError, match=message) as info:
            load(out, verify_checksums=False)  # without the hash check, the shard's own damage is named
        assert str(info.value).startswith(str(shard))
    assert np.array_equal(PackedParquetDataset(packed)[0].input_ids.numpy(), [1, 2, 3, 4, 5])


def test_trl_masks_are_loss_masks_in_assemble_pack():
    """TRL's completion_mask / assistant_masks are loss masks in assemble_pack too (as pack_dataset reads them);
    with labels or loss_mask they are ambiguous."""
    row = {"input_ids": [11, 12, 13, 14], "completion_mask": [0, 0, 1, 1]}
    assert assemble_pack([row]).labels.tolist() == [-100, -100, 13, 14]
    both = {"input_ids": [11, 12, 13, 14], "completion_mask": [0, 1, 1, 1], "assistant_masks": [0, 0, 1, 1]}
    assert assemble_pack([both]).labels.tolist() == [-100, -100, 13, 14]
    assert "completion_mask" not in assemble_pack([row]).columns  # not carried as an inert per-token column
    with pytest.raises(
        ValueError, match=r"sequence 0: carries completion_mask \(TRL's loss mask\) together with labels"
    ):
        assemble_pack([{**row, "labels": [11, 12, 13, 14]}])
