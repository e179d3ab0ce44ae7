"""Break-test findings in PackedParquetDataset: load-time padding never exceeds the recorded capacity, and a
non-integer index is refused by name."""

from __future__ import annotations

import pytest

from packwise.cli import main
from packwise.integrations.pytorch import PackedParquetDataset


def _packed(tmp_path, *extra):
    (tmp_path / "in.jsonl").write_text('{"input_ids": [1, 2, 3]}\n{"input_ids": [4, 5, 6]}\n{"input_ids": [7, 8]}\n')
    out = tmp_path / "out"
    assert main(["pack", str(tmp_path / "in.jsonl"), "-o", str(out), "--capacity", "8", "-q", *extra]) == 0
    return out


def test_load_alignment_over_the_recorded_capacity_is_refused(tmp_path):
    out = _packed(tmp_path)
    with pytest.raises(ValueError, match=r"alignment=4 makes pack 0 \(sequences \[3, 3, 2\]\) 12 tokens > the "
                                         r"recorded capacity 8: .* \(alignment 1\); load with alignment=1"):  # fmt: skip
        PackedParquetDataset(out, alignment=4)
    with pytest.raises(ValueError, match=r"pad_to=9 > the recorded capacity 8"):
        PackedParquetDataset(out, pad_to=9)
    assert PackedParquetDataset(out, pad_to=8)[0].total_tokens == 8


def test_load_alignment_coarser_than_the_written_one_is_refused(tmp_path):
    out = _packed(tmp_path, "--alignment", "4")
    with pytest.raises(ValueError, match=r"alignment=8 makes pack 0 \(sequences \[3, 3\]\) 16 tokens > the recorded "
                                         r"capacity 8: .* \(alignment 4\); load with alignment=4"):  # fmt: skip
        PackedParquetDataset(out, alignment=8)
    ds = PackedParquetDataset(out, alignment=4)
    assert [ds[i].total_tokens for i in range(len(ds))] == [8, 4]


def test_non_integer_index_is_refused_by_name(tmp_path):
    ds = PackedParquetDataset(_packed(tmp_path))
    with pytest.raises(TypeError, match=r"index must be an integer in \[-1, 1\) \(a pack\), got 'a' \(str\)"):
        ds["a"]
    with pytest.raises(TypeError, match=r"got True \(bool\)"):
        ds[True]
