"""Break-test findings in PackingStream / PackingLoader: nothing dropped or resumed silently."""

from __future__ import annotations

import pytest

from packwise.stream import PackingLoader, PackingStream

ROWS = [{"input_ids": [1] * n} for n in (3, 5, 2, 6, 4, 7, 1, 8)]  # 36 tokens


def test_drop_last_batch_counts_the_dropped_packs():
    loader = PackingLoader(PackingStream(ROWS, capacity=8, buffer_size=8), batch_size=4, drop_last_batch=True)
    batches = list(loader)
    assert [b["cu_seqlens"].tolist() for b in batches] == [[0, 4, 12, 17, 20, 27, 28]]  # 4 | 8 | 5+3 | 7+1
    assert loader.stats == {"batches": 1, "packs_dropped_last_batch": 1, "sequences_dropped_last_batch": 2,
                            "tokens_dropped_last_batch": 8}  # fmt: skip


def test_drop_last_batch_refuses_a_whole_dropped_epoch():
    loader = PackingLoader(PackingStream(ROWS, capacity=8, buffer_size=8), batch_size=100, drop_last_batch=True)
    with pytest.raises(ValueError, match=r"dropped the whole epoch: it made 5 packs \(8 sequences, 36 tokens\), "
                                         r"fewer than batch_size 100; use batch_size <= 5"):  # fmt: skip
        list(loader)
    assert loader.stats["packs_dropped_last_batch"] == 5
