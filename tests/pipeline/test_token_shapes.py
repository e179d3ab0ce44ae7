"""Per-token columns shaped [T, k] (teacher top-k log-probs, router replay) are carried, not refused: through
the overflow cut, the plan, Parquet, ``load_packed``, ``PackedParquetDataset``, ``collate_packs`` and the HF
``PackedDataCollator``; rows of another per-token shape are refused naming the column and both shapes."""

from __future__ import annotations

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
import torch

from packwise import pack_dataset
from packwise.assemble import assemble_batch, collate_packs
from packwise.files import load_packed, read_metadata
from packwise.pipeline import pack_columns, write_packs
from packwise.pipeline.steps import PieceCounts

# row 0: 7 tokens (truncated to capacity 6: its first 6 rows stay); rows 1 and 2 share a pack
ROWS = [
    {"input_ids": [1, 2, 3, 4, 5, 6, 7], "t": [[10, 11], [12, 13], [14, 15], [16, 17], [18, 19], [20, 21], [22, 23]]},
    {"input_ids": [7, 8, 9], "t": [[0.5, 1.5], [2.5, 3.5], [4.5, 5.5]]},
    {"input_ids": [3, 4], "t": [[-1, -2], [-3, -4]]},
]
PACK0 = [[10, 11], [12, 13], [14, 15], [16, 17], [18, 19], [20, 21]]
PACK1 = [[0.5, 1.5], [2.5, 3.5], [4.5, 5.5], [-1, -2], [-3, -4]]


def test_a_t_by_2_column_through_parquet_load_packed_the_dataset_and_collate_packs(tmp_path):
    from packwise.integrations.pytorch import PackedParquetDataset

    packed, report = pack_columns(ROWS, capacity=6)
    write_packs(packed, report, tmp_path / "out")
    table = load_packed(tmp_path / "out")
    assert table.schema.field("t").type == pa.list_(pa.list_(pa.float64(), 2))
    assert table.column("source_index").to_pylist() == [[0], [1, 2]]
    assert table.column("t").to_pylist() == [PACK0, PACK1]  # truncation kept row 0's first 6 rows
    assert read_metadata(tmp_path / "out")["token_columns"] == {"t": {"dtype": "float64", "shape": [2]}}
    assert (report.tokens_truncated, report.samples_truncated) == (1, 1)

    ds = PackedParquetDataset(tmp_path / "out")
    assert ds[1].columns["t"].tolist() == PACK1 and ds[1].columns["t"].dtype == torch.float64
    batch = collate_packs([ds[0], ds[1]], pad_to_multiple_of=4, pad_values={"t": -7.0})  # 11 tokens -> 12
    assert batch["t"].shape == (1, 12, 2)
    assert batch["t"][0].tolist() == PACK0 + PACK1 + [[-7, -7]]  # each document's values at its tokens
    assert collate_packs([ds[0], ds[1]], pad_to_multiple_of=4)["t"][0, 11].tolist() == [0, 0]  # default pad 0


def test_assemble_batch_and_the_hf_collator_carry_t_by_2_with_padding_rows_zero():
    from packwise.hf import PackedDataCollator

    docs = [{"input_ids": [1, 2, 3], "t": [[1, 2], [3, 4], [5, 6]]}, {"input_ids": [4, 5], "t": [[7, 8], [9, 10]]}]
    batch = assemble_batch([docs], pad_to_multiple_of=4)
    assert batch["t"][0].tolist() == [[1, 2], [3, 4], [5, 6], [7, 8], [9, 10], [0, 0], [0, 0], [0, 0]]
    out = PackedDataCollator(pad_to_multiple_of=4)(docs)  # in-memory rows, one document each
    assert out["t"].shape == (1, 8, 2) and out["t"][0].tolist() == batch["t"][0].tolist()
    assert out["cu_seq_lens_q"].tolist()[:3] == [0, 3, 5]
    row = {"input_ids": [1, 2, 3, 4, 5], "seq_lengths": [3, 2], "t": [[1, 2], [3, 4], [5, 6], [7, 8], [9, 10]]}
    packed_row = PackedDataCollator()([row])  # a packed row: split per document along the token axis
    assert packed_row["t"][0].tolist() == [[1, 2], [3, 4], [5, 6], [7, 8], [9, 10]]


def test_split_cuts_the_token_axis_and_parquet_inputs_of_both_list_kinds_are_carried(tmp_path):
    table, _ = pack_dataset([{"input_ids": [1, 2, 3, 4, 5], "t": [[i, -i] for i in range(5)]}], capacity=3,
                            overflow="split")  # fmt: skip
    assert table.column("t").to_pylist() == [[[0, 0], [1, -1], [2, -2]], [[3, -3], [4, -4]]]
    for kind in (pa.list_(pa.list_(pa.float32())), pa.list_(pa.list_(pa.float32(), 2))):
        path = tmp_path / "in.parquet"
        pq.write_table(pa.table({"input_ids": [[1, 2, 3], [4, 5]], "t": pa.array([PACK1[:3], PACK1[3:]], kind)}), path)
        table, report = pack_dataset(path, capacity=8)
        assert table.column("t").to_pylist() == [PACK1] and report.token_columns["t"] == {"dtype": "float32",
                                                                                             "shape": [2]}  # fmt: skip


def test_rows_of_another_per_token_shape_are_refused_naming_the_column_and_both_shapes(tmp_path):
    rows = [{"input_ids": [1, 2], "t": [[1, 2], [3, 4]]}, {"input_ids": [3, 4], "t": [[1, 2, 3], [4, 5, 6]]}]
    with pytest.raises(
        ValueError, match=r"row 1: field 't' has per-token shape \[3\] but the first good row's is \[2\]"
    ):
        pack_dataset(rows, capacity=8)
    table, report = pack_dataset(rows, capacity=8, skip_bad_rows=True)
    assert (report.rows_skipped, table.column("t").to_pylist()) == (1, [[[1, 2], [3, 4]]])
    ragged = [{"input_ids": [1, 2], "t": [[1, 2], [3]]}]
    with pytest.raises(ValueError, match=r"row 0: field 't' is ragged: its per-token lists differ in length"):
        pack_dataset(ragged, capacity=8)
    path = tmp_path / "in.parquet"
    pq.write_table(pa.table({"input_ids": [[1, 2], [3, 4]], "t": [[[1.0, 2.0], [3.0, 4.0]], [[1.0], [2.0]]]}), path)
    with pytest.raises(ValueError, match=r"row 1: field 't' has per-token shape \[1\] at token 0 but .* here \[2\]"):
        pack_dataset(path, capacity=8)
    with pytest.raises(
        ValueError, match=r"'t' has shape \[2\] per token in one part of the input and \[3\] in another"
    ):
        PieceCounts(token_columns=(("t", "<f8", (2,)),)) + PieceCounts(token_columns=(("t", "<f8", (3,)),))
