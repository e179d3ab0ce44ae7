"""Megatron MTP on every public path of an MTP config: ``to_packed_seq_params(batch)`` — the plain call — gives
megatron-core's own ``roll_tensor`` the layout that rolls every document exactly as it rolls alone, on the batches
of ``cfg.collator()``, ``cfg.loader()`` and the packs of ``cfg.stream()`` (#28 item 6)."""

from __future__ import annotations

import pytest
import torch

pytest.importorskip("megatron.core")
pytestmark = pytest.mark.slow  # importing megatron-core takes ~10 s on 2 cores

from packwise import PackingConfig  # noqa: E402
from packwise.assemble import collate_packs, to_packed_seq_params  # noqa: E402

# three documents of 5, 9 and 3 tokens; alignment 4 lays them out at [0, 8, 20, 24] (real ends 5, 17, 23)
DOCS = [list(range(10, 15)), list(range(20, 29)), list(range(30, 33))]
MTP = {"capacity": 32, "alignment": 4, "labels": "shifted", "consumer": {"multi_token_prediction": True}}


def roll(t: torch.Tensor, params=None) -> list:
    from megatron.core.transformer.multi_token_prediction import roll_tensor

    return roll_tensor(t, shifts=-1, dims=-1, packed_seq_params=params)[0].tolist()


def cu_padded(params) -> list[int]:
    return (params["cu_seqlens_q_padded"] if isinstance(params, dict) else params.cu_seqlens_q_padded).tolist()


def targets(labels: torch.Tensor, params=None) -> list:
    """MTP's depth-2 targets: the rolled label where the rolled loss mask (1 where a label is) is 1, else None."""
    mask = roll((labels != -100).float(), params)[0]
    return [label if m else None for label, m in zip(roll(labels, params)[0], mask)]


def check_every_document_rolls_alone(tokens: torch.Tensor, labels: torch.Tensor, params) -> None:
    """Tokens and labels ``[1, T]``: each document's rolled tokens and MTP targets equal ``roll_tensor``'s of it
    alone (a padding slot's label is -100 where alone's zero fill is 0: neither carries loss)."""
    starts = cu_padded(params)
    seen = []
    for start in starts[:-1]:
        doc = next(d for d in DOCS if d[0] == int(tokens[0, start]))
        n = len(doc)
        alone = torch.tensor([doc])
        alone_labels = torch.tensor([doc[1:] + [-100]])  # Megatron labels: tokens[1:], the last one none
        assert roll(tokens, params)[0][start : start + n] == roll(alone)[0]
        assert targets(labels, params)[start : start + n] == targets(alone_labels)  # MTP's (label, mask) pairs
        seen.append(n)
    assert sorted(seen) == [3, 5, 9]


def test_collator_batch_plain_call_rolls_each_document_alone():
    cfg = PackingConfig(**MTP)
    batch = cfg.collator()([cfg.assemble([{"input_ids": d} for d in DOCS])])
    assert batch["multi_token_prediction"] is True
    params = to_packed_seq_params(batch)
    assert params.cu_seqlens_q.tolist() == [0, 8, 20, 24]  # the physical boundaries, not the real [0, 5, 17, 20]
    assert roll(batch["tokens"], params)[0][:12] == [11, 12, 13, 14, 0, 0, 0, 0, 21, 22, 23, 24]
    check_every_document_rolls_alone(batch["tokens"], batch["labels"], params)
    mask = roll(batch["loss_mask"], params)[0]
    assert sum(mask) == (5 - 2) + (9 - 2) + (3 - 2)  # the depth-2 targets of each document, none across


def test_loader_batch_plain_call_rolls_each_document_alone():
    cfg = PackingConfig(**MTP, buffer_size=3)
    batch = next(iter(cfg.loader([{"input_ids": d} for d in DOCS])))
    assert batch["multi_token_prediction"] is True
    params = to_packed_seq_params(batch)
    assert params.cu_seqlens_q.tolist() == params.cu_seqlens_q_padded.tolist()
    check_every_document_rolls_alone(batch["tokens"], batch["labels"], params)


def test_stream_pack_and_its_collated_batch_plain_call_roll_each_document_alone():
    cfg = PackingConfig(**MTP, buffer_size=3)
    (pack,) = list(cfg.stream([{"input_ids": d} for d in DOCS]))
    assert pack.multi_token_prediction is True
    params = to_packed_seq_params(pack)
    assert params.cu_seqlens_q.tolist() == params.cu_seqlens_q_padded.tolist()
    check_every_document_rolls_alone(pack.input_ids[None], pack.labels[None], params)
    batch = collate_packs([pack])  # the public collate of stream packs keeps the mark
    assert batch["multi_token_prediction"] is True
    check_every_document_rolls_alone(batch["tokens"], batch["labels"], to_packed_seq_params(batch))


def test_real_boundaries_would_roll_a_first_token_into_padding_and_are_refused_on_an_mtp_batch():
    cfg = PackingConfig(**MTP)
    batch = cfg.collator()([cfg.assemble([{"input_ids": d} for d in DOCS[:2]])])  # 5 and 9 tokens at [0, 8, 20]
    real = to_packed_seq_params(dict(batch, multi_token_prediction=False))  # what the plain call used to give
    assert real.cu_seqlens_q.tolist() == [0, 5, 14]
    # doc 1's first token 20 lands in doc 0's padding slot 7; doc 1's own slots 8..19 roll within [5, 14)
    assert roll(batch["tokens"], real)[0] == [11, 12, 13, 14, 0, 0, 0, 20, 21, 22, 23, 24, 25, 0, 26, 27, 28, 0, 0, 0]
    with pytest.raises(ValueError, match=r"multi_token_prediction=False\) on a batch built for Megatron MTP"):
        to_packed_seq_params(batch, multi_token_prediction=False)


def test_non_mtp_batches_keep_the_real_boundaries_and_mixed_packs_are_refused():
    plain = PackingConfig(capacity=32, alignment=4, labels="shifted", buffer_size=3)
    batch = next(iter(plain.loader([{"input_ids": d} for d in DOCS[:2]])))
    assert "multi_token_prediction" not in batch
    assert to_packed_seq_params(batch).cu_seqlens_q.tolist() in ([0, 5, 14], [0, 9, 14])
    mtp_pack = next(iter(PackingConfig(**MTP, buffer_size=3).stream([{"input_ids": DOCS[0]}])))
    plain_pack = next(iter(plain.stream([{"input_ids": DOCS[1]}])))
    with pytest.raises(ValueError, match="packs mix multi_token_prediction=True and False"):
        collate_packs([mtp_pack, plain_pack])
