"""A per-token input column named like a key packwise produces (``cu_seqlens``, ...) is refused on read, not
when the packed output is loaded (pack_dataset, both read paths) and not silently replaced (PackedDataCollator)."""

from __future__ import annotations

import pyarrow as pa
import pytest

import packwise
from packwise.assemble._batch import PRODUCED as ASSEMBLE_PRODUCED
from packwise.constants import PRODUCED
from packwise.hf import PackedDataCollator


def test_one_definition():
    assert ASSEMBLE_PRODUCED is PRODUCED


@pytest.mark.parametrize("name", ["cu_seqlens", "labels_shifted", "max_seqlen_padded"])
@pytest.mark.parametrize("packwise_keys", [True, False])
def test_collator_refuses_produced_name(name, packwise_keys):
    with pytest.raises(ValueError, match=f"feature 0: column '{name}' is a name packwise produces; rename the column"):
        PackedDataCollator(return_packwise_keys=packwise_keys)([{"input_ids": [1, 2, 3], name: [7, 7, 7]}])


def test_collator_refuses_a_non_column_value_by_name_unless_dropped():
    row = {"input_ids": [1, 2, 3], "layout": "thd"}  # a string is not a column: no place in the batch (#28 item 1)
    with pytest.raises(ValueError, match=r"column 'layout' holds str 'thd', not one value per token"):
        PackedDataCollator()([row])
    collate = PackedDataCollator(drop_columns=("layout",))
    assert collate([row])["input_ids"].tolist() == [[1, 2, 3]] and collate.dropped_columns == {"layout": 1}


@pytest.mark.parametrize(
    "data, where",
    [
        ([{"input_ids": [1, 2, 3], "cu_seqlens": [1, 1, 1]}], "list row 0"),
        (pa.table({"input_ids": [[1, 2, 3]], "cu_seqlens": [[1, 1, 1]]}), "Table"),
    ],
)
def test_pack_dataset_refuses_produced_name(data, where):
    with pytest.raises(ValueError, match=f"{where}: field 'cu_seqlens' is a name packwise produces; rename the column"):
        packwise.pack_dataset(data, capacity=8)


def test_skip_bad_rows_counts_the_row():
    rows = [{"input_ids": [1, 2, 3], "cu_seqlens": [1, 1, 1]}, {"input_ids": [1, 2]}]
    table, report = packwise.pack_dataset(rows, capacity=8, skip_bad_rows=True)
    assert (report.rows_read, report.rows_skipped, report.samples) == (2, 1, 1)
    assert report.skipped_examples == ["list row 0: field 'cu_seqlens' is a name packwise produces; rename the column"]
    assert table.column_names == ["input_ids", "labels", "seq_lengths", "source_index"]
