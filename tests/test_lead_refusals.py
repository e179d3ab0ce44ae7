"""Refusals found by this round's break tests: a map-style dataset handed to DistributedPackSampler is read by
its len() (an iterator that never ends used to fill memory), and varlen_attention's max_seqlen_* are checked."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from packwise.attention import varlen_attention
from packwise.data import DistributedPackSampler


class _Samples:
    """Map-style, like a tokenized HF dataset: ``__getitem__`` ignores the index (never raises IndexError)."""

    def __len__(self) -> int:
        return 4

    def __getitem__(self, i):
        return {"input_ids": torch.arange(3)}


class _Lengths(_Samples):
    def __getitem__(self, i):
        return np.array([3, i + 1])


def test_a_map_style_dataset_of_samples_is_refused_by_name_not_iterated_forever():
    with pytest.raises(TypeError, match=r"pack 0 is a dict, not its sequence lengths; pass a PackedParquetDataset"):
        DistributedPackSampler(_Samples(), num_replicas=2, rank=0)


def test_a_map_style_dataset_of_length_arrays_is_read_by_its_len():
    s = DistributedPackSampler(_Lengths(), num_replicas=2, rank=0, shuffle=False)
    assert s.costs.tolist() == [4.0, 5.0, 6.0, 7.0] and len(s) == 2


@pytest.mark.parametrize("value", [True, 0, -1, 2.0, None, "3"])
def test_max_seqlen_must_be_a_positive_integer(value):
    q = torch.randn(6, 2, 8)
    cu = torch.tensor([0, 3, 6])
    with pytest.raises(ValueError, match=r"max_seqlen_q=.* must be an integer >= 1 \(tokens of the longest document\)"):
        varlen_attention(q, q, q, cu_seqlens_q=cu, cu_seqlens_k=cu, max_seqlen_q=value, max_seqlen_k=3)


def test_max_seqlen_below_the_longest_document_is_refused_and_integer_likes_pass():
    q = torch.randn(6, 2, 8)
    cu = torch.tensor([0, 2, 6])
    with pytest.raises(
        ValueError, match=r"^max_seqlen_k=3 but the longest document in cu_seqlens_k has 4 tokens; pass"
    ):
        varlen_attention(q, q, q, cu_seqlens_q=cu, cu_seqlens_k=cu, max_seqlen_q=4, max_seqlen_k=3)
    ref = varlen_attention(q, q, q, cu_seqlens_q=cu, cu_seqlens_k=cu, max_seqlen_q=4, max_seqlen_k=4)
    for like in (np.int64(4), torch.tensor(4), 5):
        out = varlen_attention(q, q, q, cu_seqlens_q=cu, cu_seqlens_k=cu, max_seqlen_q=like, max_seqlen_k=like)
        assert torch.equal(out, ref)


def test_numpy_integers_are_integers_for_cp_size_and_window():
    """They were refused as 'not an integer'; bools and floats still are."""
    from packwise.loss import PackedLoss

    assert PackedLoss(cp_size=np.int64(2)).cp_size == 2 and type(PackedLoss(cp_size=np.int64(2)).cp_size) is int
    q = torch.randn(6, 2, 8)
    cu = torch.tensor([0, 3, 6])
    kw = dict(cu_seqlens_q=cu, cu_seqlens_k=cu, max_seqlen_q=3, max_seqlen_k=3)
    assert torch.equal(varlen_attention(q, q, q, window=np.int64(2), **kw), varlen_attention(q, q, q, window=2, **kw))
    with pytest.raises(TypeError, match=r"^window=2.0 is a float; give an integer \(tokens\) or None$"):
        varlen_attention(q, q, q, window=2.0, **kw)


def test_a_negative_seed_in_a_config_is_refused_at_the_config_key():
    """It was accepted by PackingConfig and `config show`, then refused by `packwise pack` as '--seed'."""
    from pydantic import ValidationError

    from packwise import PackingConfig

    with pytest.raises(ValidationError, match=r"seed\n  Input should be greater than or equal to 0"):
        PackingConfig(seed=-1)
    assert PackingConfig(seed=0).seed == 0


def test_the_loader_takes_numpy_integers_and_refuses_bools_by_name():
    from packwise.stream import PackingLoader, PackingStream

    stream = PackingStream([{"input_ids": [1, 2]}] * 4, capacity=4, buffer_size=4)
    loader = PackingLoader(stream, batch_size=np.int64(2), num_workers=np.int32(0))
    assert (type(loader.batch_size), loader.batch_size, loader.num_workers) == (int, 2, 0)
    assert [b["input_ids"].numel() for b in loader] == [8]  # one batch of the 2 packs (THD row)
    with pytest.raises(
        ValueError, match=r"^num_workers must be an integer >= 0 \(DataLoader worker processes\), got True$"
    ):
        PackingLoader(stream, batch_size=2, num_workers=True)
    with pytest.raises(ValueError, match=r"^batch_size must be an integer >= 1, got 2.0$"):
        PackingLoader(stream, batch_size=2.0)
