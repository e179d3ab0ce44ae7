"""TRL's tokenized loss masks (``completion_mask``, ``assistant_masks``) are the loss mask, never inert columns.

TRL 1.16 builds ``labels`` from them (a target where every mask is 1) and drops them; ``pack_dataset``,
``packwise pack`` and ``PackedDataCollator`` read them the same way, and refuse them next to ``labels`` or
``loss_mask`` (which tokens are targets would be ambiguous).
"""

from __future__ import annotations

import json

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from packwise import pack_dataset
from packwise.files._read import BadRow
from packwise.hf import PackedDataCollator

ROWS = [
    {"input_ids": [11, 12, 13, 14], "completion_mask": [0, 0, 1, 1]},
    {"input_ids": [21, 22, 23], "completion_mask": [0, 1, 1]},
]
# one pack [11..14, 21..23]; prompt tokens and each document's first label are -100
LABELS = [-100, -100, 13, 14, -100, 22, 23]


def _rows(name: str) -> list[dict]:
    return [{"input_ids": r["input_ids"], name: r["completion_mask"]} for r in ROWS]


@pytest.mark.parametrize("name", ["completion_mask", "assistant_masks"])
def test_pack_dataset_rows_train_on_the_completion_only(name):
    table, report = pack_dataset(_rows(name), capacity=16)
    assert table.column("labels").to_pylist() == [LABELS]
    assert name not in table.column_names  # consumed, like loss_mask
    assert (report.loss_tokens_read, report.loss_tokens_packed) == (4, 4)  # 13, 14, 22, 23


@pytest.mark.parametrize("name", ["completion_mask", "assistant_masks"])
def test_pack_dataset_columns_train_on_the_completion_only(name):
    rows = _rows(name)
    table, report = pack_dataset(pa.Table.from_pylist(rows), capacity=16)
    assert table.column("labels").to_pylist() == [LABELS]
    assert name not in table.column_names
    assert report.loss_tokens_read == 4


def test_both_trl_masks_mean_a_target_in_both():
    rows = [{**r, "assistant_masks": a} for r, a in zip(ROWS, ([1, 1, 1, 0], [1, 1, 1]))]
    want = [[-100, -100, 13, -100, -100, 22, 23]]  # 14: completion but not assistant
    assert pack_dataset(rows, capacity=16)[0].column("labels").to_pylist() == want
    assert pack_dataset(pa.Table.from_pylist(rows), capacity=16)[0].column("labels").to_pylist() == want
    assert PackedDataCollator()(rows)["labels"].tolist() == want


@pytest.mark.parametrize("other", ["labels", "loss_mask"])
def test_trl_mask_with_labels_or_loss_mask_is_refused(other):
    rows = [{**r, other: [1] * len(r["input_ids"])} for r in ROWS]
    with pytest.raises(BadRow, match=rf"'completion_mask' is given together with '{other}'.*ambiguous.*keep one"):
        pack_dataset(rows, capacity=16)
    with pytest.raises(ValueError, match=rf"column 'completion_mask' is given together with '{other}'.*ambiguous"):
        pack_dataset(pa.Table.from_pylist(rows), capacity=16)
    with pytest.raises(ValueError, match=rf"feature 0 has 'completion_mask' and '{other}'.*ambiguous"):
        PackedDataCollator()(rows)


def test_trl_mask_values_other_than_0_1_are_bad_rows():
    rows = [{"input_ids": [1, 2], "completion_mask": [0, 2]}]
    with pytest.raises(BadRow, match="row 0: field 'completion_mask' must hold only 0/1"):
        pack_dataset(rows, capacity=8)
    with pytest.raises(BadRow, match="row 0: field 'completion_mask' must hold only 0/1"):
        pack_dataset(pa.Table.from_pylist(rows), capacity=8)
    with pytest.raises(ValueError, match="feature 0: completion_mask must hold only 0/1"):
        PackedDataCollator()(rows)
    with pytest.raises(ValueError, match="feature 0: completion_mask has 3 values but input_ids has 2"):
        PackedDataCollator()([{"input_ids": [1, 2], "completion_mask": [0, 1, 1]}])


@pytest.mark.parametrize("name", ["completion_mask", "assistant_masks"])
def test_collator_trains_on_the_completion_only(name):
    import torch

    rows = _rows(name)
    assert PackedDataCollator()(rows)["labels"].tolist() == [LABELS]
    as_tensors = [{k: torch.tensor(v) for k, v in r.items()} for r in rows]
    assert PackedDataCollator()(as_tensors)["labels"].tolist() == [LABELS]
    padded = [{**r, "attention_mask": [0] + [1] * len(r["input_ids"])} for r in rows]
    for r in padded:  # left padding: the mask is stripped with the tokens
        r["input_ids"], r[name] = [0, *r["input_ids"]], [0, *r[name]]
    assert PackedDataCollator()(padded)["labels"].tolist() == [LABELS]


def test_cli_pack_jsonl_and_parquet_read_the_mask(tmp_path, capsys):
    from packwise.cli import main
    from packwise.files._write import load_packed

    jsonl = tmp_path / "rows.jsonl"
    jsonl.write_text("".join(json.dumps(r) + "\n" for r in ROWS))
    parquet = tmp_path / "rows.parquet"
    pq.write_table(pa.Table.from_pylist(ROWS), parquet)
    for src in (jsonl, parquet):
        out = tmp_path / f"out-{src.suffix[1:]}"
        assert main(["pack", str(src), "-o", str(out), "--capacity", "16", "--json"]) == 0
        assert json.loads(capsys.readouterr().out)["loss_tokens_read"] == 4
        packed = load_packed(out)
        assert packed.column("labels").to_pylist() == [LABELS] and "completion_mask" not in packed.column_names
