"""Break-test findings on the stream with a ``length_fn`` and on numpy-integer layout options: each is named."""

from __future__ import annotations

import re

import numpy as np
import pytest
import torch

import packwise.assemble as pa
from packwise.stream import PackingStream


def run(source, **kw):
    return list(PackingStream(source, capacity=8, shuffle=False, **kw))


@pytest.mark.parametrize(
    ("ids", "message"),
    [
        (7, r"sample 1: input_ids \(int\) has no length; input_ids must be a 1-D sequence \(L,\) of token ids$"),
        (np.int64(7), r"sample 1: input_ids has shape \(\) \(0-D\); input_ids must be 1-D \(L,\) — wrap a scalar"),
        (torch.tensor(7), r"sample 1: input_ids has shape \(\) \(0-D\)"),
        (np.zeros((1, 6), np.int64), r"sample 1: input_ids has shape \(1, 6\) \(2-D\); .* drop the batch dim"),
    ],
)
def test_a_length_fn_does_not_hide_bad_input_ids(ids, message):
    """With a length_fn the ids are still checked against it: a (1, L) array reported as 1 token would overfill
    the pack (24 tokens at capacity 8 before), a scalar raised a bare TypeError naming no sample."""
    source = [{"input_ids": [1, 2]}, {"input_ids": ids}, {"input_ids": [3]}]
    with pytest.raises(ValueError, match=message):
        run(source, buffer_size=3, length_fn=lambda s: 1 if s["input_ids"] is ids else 2, assemble=False)


@pytest.mark.parametrize(
    ("source", "fn"), [([3, 2], int), ([[1, 2], [3]], len), ([{"input_ids": [1]}, 5], lambda s: 1)]
)
def test_assemble_needs_mappings_named_by_sample(source, fn):
    bad = next(j for j, s in enumerate(source) if not isinstance(s, dict))
    kind = type(source[bad]).__name__
    with pytest.raises(ValueError, match=rf"^sample {bad} \({kind}\) is not a mapping; assemble=True builds packs"):
        run(source, buffer_size=2, length_fn=fn)
    assert sum(map(len, run(source, buffer_size=2, length_fn=fn, assemble=False))) == 2  # raw samples: as they are


def test_numpy_integer_alignment_and_padding_multiple_are_integers():
    seqs = [[{"input_ids": torch.arange(3), "labels": torch.arange(3)}], [{"input_ids": torch.arange(5)}]]
    for key, value in (("alignment", 4), ("pad_to_multiple_of", 8)):
        want = pa.assemble_batch(seqs, **{key: value})
        got = pa.assemble_batch(seqs, **{key: np.int64(value)})
        assert want.keys() == got.keys()
        for k in want:
            same = torch.equal(want[k], got[k]) if isinstance(want[k], torch.Tensor) else want[k] == got[k]
            assert same, k
    two_step = pa.collate_packs(
        [pa.assemble_pack(p, alignment=np.int32(4)) for p in seqs], pad_to_multiple_of=np.int64(8)
    )
    assert two_step["cu_seqlens_padded"].tolist() == [0, 4, 12, 16]  # packs aligned to 4, the row to 8
    packs = run([{"input_ids": [1, 2, 3]}], buffer_size=1, alignment=np.int64(2))  # accepted at init: also at pack 0
    assert packs[0].cu_seqlens_padded.tolist() == [0, 4]
    for bad in (True, 0, 2.0, np.float64(2)):
        with pytest.raises(ValueError, match="^" + re.escape(f"alignment must be an integer >= 1, got {bad!r}")):
            pa.assemble_pack(seqs[0], alignment=bad)
