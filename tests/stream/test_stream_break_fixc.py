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


def test_an_empty_source_is_refused_at_the_end_of_the_epoch():
    with pytest.raises(ValueError, match=r"PackingStream epoch 0: the source yielded no samples"):
        list(PackingStream([], capacity=8, buffer_size=1))
    once = iter(ROWS)
    stream = PackingStream(lambda: (r for r in once), capacity=8, buffer_size=8)  # epoch 2 reads nothing
    assert len(list(stream)) == 6  # (a plain iterable: the windows start at a seeded phase)
    with pytest.raises(ValueError, match=r"yielded no samples \(an empty dataset, or a one-shot iterator"):
        list(stream)


def test_a_state_from_another_dataset_is_refused():
    loader = PackingLoader(PackingStream(ROWS, capacity=8, buffer_size=4), batch_size=1)
    next(iter(loader))
    state = loader.state_dict()
    assert state["source"] == {"samples": 8}
    other = PackingLoader(PackingStream(ROWS[:6], capacity=8, buffer_size=4), batch_size=1)
    with pytest.raises(ValueError, match=r"saved over a source of 8 samples but this stream's source has 6"):
        other.load_state_dict(state)
