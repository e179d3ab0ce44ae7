"""The numpy seam (``plan._flat``): flat per-token columns + ``cu_seqlens``. Every executor of a plan builds on it
and gives what the per-sequence path gives, bit for bit; the boundary-label rule lives in ``mask_boundaries``."""

from __future__ import annotations

import dataclasses
import re
import subprocess
import sys

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from packwise.assemble import PackedSequence, assemble_pack
from packwise.cli import main
from packwise.data import PackedParquetDataset
from packwise.plan._flat import gather_index, mask_boundaries, segment_layout

X = -100


def _same(a: PackedSequence, b: PackedSequence) -> None:
    for f in dataclasses.fields(PackedSequence):
        x, y = getattr(a, f.name), getattr(b, f.name)
        if f.name == "_segments":
            assert all(np.array_equal(p, q) for p, q in zip(a.segments(), b.segments()))
        elif isinstance(x, torch.Tensor):
            assert x.dtype == y.dtype and torch.equal(x, y), f.name
        elif isinstance(x, dict):
            assert x.keys() == y.keys(), f.name
            for k in x:
                v, w = x[k], y[k]
                assert torch.equal(v, w) and v.dtype == w.dtype if isinstance(v, torch.Tensor) else v == w, (f.name, k)
        else:
            assert x == y, f.name


@st.composite
def flat_rows(draw):
    lengths = draw(st.lists(st.integers(1, 9), min_size=1, max_size=6))
    total = sum(lengths)
    ids = np.array(draw(st.lists(st.integers(0, 50), min_size=total, max_size=total)), dtype=np.int64)
    keep = np.array(draw(st.lists(st.booleans(), min_size=total, max_size=total)))
    labels = np.where(keep, ids, X)
    extra = np.array(draw(st.lists(st.integers(-3, 3), min_size=total, max_size=total)), dtype=np.int32)
    alignment = draw(st.sampled_from([1, 2, 4]))
    aligned = sum(-(-n // alignment) * alignment for n in lengths)
    pad_to = draw(st.one_of(st.none(), st.integers(aligned, aligned + 5)))
    return lengths, {"input_ids": ids, "labels": labels, "extra": extra}, alignment, pad_to


@settings(max_examples=150, deadline=None)
@given(flat_rows(), st.integers(0, 2))
def test_from_flat_equals_assemble_pack_on_the_split_sequences(row, offset):
    lengths, cols, alignment, pad_to = row
    cu = np.concatenate([[0], np.cumsum(lengths)])
    sources = list(range(10, 10 + len(lengths)))
    options = {"alignment": alignment, "pad_to": pad_to, "position_offset": offset, "pad_token_id": 7}
    flat = PackedSequence.from_flat(cols, cu, metadata={"source_index": sources}, **options)
    seqs = [
        {k: torch.from_numpy(v[a:b].copy()) for k, v in cols.items()} | {"source_index": s}
        for a, b, s in zip(cu[:-1], cu[1:], sources)
    ]
    _same(flat, assemble_pack(seqs, **options))


def test_from_flat_refuses_bad_boundaries_and_columns():
    ids = np.arange(1, 6)
    for cu in ([0, 3], [1, 3, 5], [0, 3, 3, 5], [0]):
        with pytest.raises(ValueError, match="cu_seqlens"):
            PackedSequence.from_flat({"input_ids": ids}, cu)
    with pytest.raises(ValueError, match="'loss_mask'"):
        PackedSequence.from_flat({"input_ids": ids, "loss_mask": np.ones(5)}, [0, 5])
    with pytest.raises(ValueError, match="'extra' has shape"):
        PackedSequence.from_flat({"input_ids": ids, "extra": np.ones(4)}, [0, 5])
    with pytest.raises(ValueError, match="metadata 'source_index' has 1 values for 2 sequences"):
        PackedSequence.from_flat({"input_ids": ids}, [0, 2, 5], metadata={"source_index": [0]})
    with pytest.raises(ValueError, match="neither -100"):
        PackedSequence.from_flat({"input_ids": ids, "labels": np.array([1, 2, -5, 4, 5])}, [0, 5])


def test_parquet_rows_take_the_flat_path_and_match_the_sequence_path(tmp_path, write_jsonl, monkeypatch):
    """``PackedParquetDataset`` builds text packs straight from the row (no split into per-sequence dicts); the
    result is what ``assemble_pack`` gives on the split sequences."""
    rows = [{"input_ids": list(range(1, n + 1)), "mirror": [-t for t in range(1, n + 1)]} for n in (5, 3, 7, 2, 6, 1)]
    out = tmp_path / "out"
    assert main(["pack", str(write_jsonl(rows)), "-o", str(out), "--capacity", "10", "--alignment", "2", "-q"]) == 0
    calls = []
    import packwise.integrations.pytorch._data as td

    monkeypatch.setattr(td, "assemble_pack", lambda *a, **k: calls.append(1) or assemble_pack(*a, **k))
    ds = PackedParquetDataset(out, alignment=2, pad_to=10)  # within the recorded capacity 10
    for i in range(len(ds)):
        pack = ds[i]
        lengths = pack.cu_seqlens.diff().tolist()
        cu = np.concatenate([[0], np.cumsum(lengths)])
        ids, labels = ds._row(i).column("input_ids")[0].as_py(), ds._row(i).column("labels")[0].as_py()
        mirror = ds._row(i).column("mirror")[0].values.to_numpy()
        seqs = [
            {"input_ids": torch.tensor(ids[a:b]), "labels": torch.tensor(labels[a:b]),
             "mirror": torch.from_numpy(mirror[a:b].copy()), "source_index": s}
            for a, b, s in zip(cu[:-1], cu[1:], pack.metadata["source_index"])
        ]  # fmt: skip
        _same(pack, assemble_pack(seqs, alignment=2, pad_to=10))
    assert calls == []  # never through the per-sequence path


def test_mask_boundaries_numpy_and_torch_agree():
    labels = np.array([5, 6, 7, X, 9, 10, 11])
    starts, lengths = np.array([0, 3, 4]), np.array([3, 1, 3])
    a = labels.copy()
    assert mask_boundaries(a, starts, lengths, count=True) == 2  # 5 and 9 were targets; position 3 was -100
    assert a.tolist() == [X, 6, 7, X, X, 10, 11]
    t = torch.from_numpy(labels.copy())
    assert mask_boundaries(t, starts) is None and t.tolist() == a.tolist()  # written through the numpy view
    s = labels.copy()
    assert mask_boundaries(s, starts, lengths, shifted=True, count=True) == 2  # 7 and 11; position 3 was -100
    assert s.tolist() == [5, 6, X, X, 9, 10, X]
    empty = labels.copy()
    assert mask_boundaries(empty, [0, 3, 3], [3, 0, 4], count=True) == 1  # an empty document has no label
    assert empty.tolist() == [X, 6, 7, X, 9, 10, 11]
    with pytest.raises(ValueError, match="lengths"):
        mask_boundaries(labels.copy(), starts, shifted=True)


def test_gather_index_and_layout():
    index, cu = gather_index(np.array([0, 2, 5, 9]), np.array([1, 2, 0]))
    assert index.tolist() == [2, 3, 4, 5, 6, 7, 8, 0, 1] and cu.tolist() == [0, 3, 7, 9]
    lay = segment_layout([3, 1], alignment=2, pad_to=7)
    assert lay.seq_idx.tolist() == [0, 0, 0, 0, 1, 1, 2]
    assert lay.dst.tolist() == [0, 1, 2, 4] and lay.total == 7
    with pytest.raises(ValueError, match="pack holds 6 tokens \\(4 real \\+ 2 alignment\\) > pad_to=5"):
        segment_layout([3, 1], alignment=2, pad_to=5)


def test_the_seam_is_numpy_only():
    code = "import sys, packwise.plan._flat; print('torch' in sys.modules, 'pyarrow' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.split() == ["False", "False"]


@pytest.mark.parametrize("alignment", [0, -1, False, True, 1.0, 2.0, "2", None, np.int32(0), 2**31])
def test_segment_layout_refuses_an_alignment_that_is_not_a_positive_int32(alignment):
    """0 gave cu_seqlens_padded [0, 0, 0] and -1 gave [0, 1, 1] before: silently wrong rows."""
    with pytest.raises(
        ValueError, match=re.escape(f"alignment must be an integer in [1, 2147483647] (tokens), got {alignment!r}")
    ):
        segment_layout([3, 5], alignment=alignment)


def test_segment_layout_refuses_pad_to_beyond_int32_and_keeps_integer_likes():
    with pytest.raises(ValueError, match=r"^pad_to=1000000000000000000000000000000 > 2147483647 tokens"):
        segment_layout([3, 5], pad_to=10**30)
    assert segment_layout([3, 5], alignment=np.int64(4), pad_to=16).cu_seqlens_padded.tolist() == [0, 4, 12]
