"""What a row carries declares its label convention, independent of the output convention (break-test of h16).

Rows: ``labels`` alone = HF labels (unshifted); ``labels`` + ``loss_mask`` = a Megatron row (``labels =
text[1:]``, ``loss_mask`` aligned with them); ``loss_mask`` alone = a per-token mask on the predicted token.
The output convention (``PackingConfig.labels``) only decides how the batch spells the same targets.
"""

from __future__ import annotations

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from packwise import PackingConfig
from packwise.assemble import (
    assemble_pack,
    collate_packs,
    flatten_padded_batch,
    shard_for_context_parallel,
    to_packed_seq_params,
    unshard_context_parallel,
)

X = -100
MEGATRON_ROW = {"input_ids": [1, 2, 3, 4], "labels": [2, 3, 4, 5], "loss_mask": [0, 0, 1, 1]}


def _params(p) -> dict:
    return p if isinstance(p, dict) else {k: getattr(p, k) for k in ("cu_seqlens_q", "cu_seqlens_q_padded")}


def test_megatron_row_keeps_its_loss_mask_in_assemble_stream_and_energon_path():
    """Bug 1: labels + loss_mask lost the loss_mask (2 and 3 were trained)."""
    cfg = PackingConfig(labels="shifted", capacity=8, buffer_size=4)
    assert cfg.collator()([cfg.assemble([MEGATRON_ROW])])["labels"].tolist() == [[X, X, 4, 5]]
    (pack,) = list(cfg.stream([MEGATRON_ROW]))
    assert pack.labels.tolist() == [X, X, 4, 5]
    # the Energon mixin assembles with energon_settings()["assemble"]
    settings = PackingConfig(labels="shifted", capacity=8, buffer_size=4, overflow="error").energon_settings()
    assert assemble_pack([MEGATRON_ROW], **settings["assemble"]).labels.tolist() == [X, X, 4, 5]


def test_megatron_row_keeps_its_last_target():
    """Bug 2: the last given Megatron label (usually EOS) was dropped."""
    row = {"input_ids": [1, 2, 3, 4], "labels": [2, 3, 4, 5], "loss_mask": [1, 1, 1, 1]}
    assert PackingConfig(labels="shifted").assemble([row]).labels.tolist() == [2, 3, 4, 5]
    two = assemble_pack([row, {"input_ids": [7, 8], "labels": [8, 9], "loss_mask": [1, 1]}], labels_shifted=True)
    assert two.labels.tolist() == [2, 3, 4, 5, 8, 9]  # every target is its own position's: none crosses


def test_labels_without_loss_mask_that_look_shifted_are_refused():
    """Bug 2's row without loss_mask is ambiguous: refused naming the field and the fix."""
    with pytest.raises(ValueError, match=r"sequence 0: labels look Megatron-shifted.*add loss_mask"):
        PackingConfig(labels="shifted").assemble([{"input_ids": [1, 2, 3, 4], "labels": [2, 3, 4, 5]}])


def test_loss_mask_row_gives_the_same_targets_in_both_output_conventions():
    """Bug 3: the same row trained different targets depending on the output convention."""
    seq = {"input_ids": [1, 2, 3, 4], "loss_mask": [0, 0, 1, 1]}  # targets: tokens 3 and 4
    hf_then_shift = collate_packs([PackingConfig().assemble([seq])], labels="shifted")["labels"]
    shifted = PackingConfig(labels="shifted")
    assert hf_then_shift.tolist() == [[X, 3, 4, X]]
    assert shifted.collator()([shifted.assemble([seq])])["labels"].tolist() == [[X, 3, 4, X]]
    assert PackingConfig().collator()([PackingConfig().assemble([seq])])["labels"].tolist() == [[X, X, 3, 4]]


def test_hf_labels_under_shifted_output_are_not_copy_targets():
    """Bug 3: HF labels under labels='shifted' became copy targets ([-100, 2, 3, -100])."""
    row = {"input_ids": [1, 2, 3, 4], "labels": [X, 2, 3, 4]}
    assert PackingConfig(labels="shifted").assemble([row]).labels.tolist() == [2, 3, 4, X]


def test_megatron_row_with_hf_looking_labels_is_refused():
    with pytest.raises(ValueError, match=r"sequence 0: carries labels and loss_mask.*labels\[t\] == input_ids\[t\]"):
        PackingConfig(labels="shifted").assemble([{"input_ids": [1, 2, 3, 4], "labels": [X, 2, 3, 4],
                                                   "loss_mask": [1, 1, 1, 1]}])  # fmt: skip


def test_megatron_row_to_hf_refuses_to_lose_the_last_target():
    with pytest.raises(ValueError, match=r"sequence 0: its last label \(5, loss_mask 1\).*would be lost"):
        PackingConfig().assemble([MEGATRON_ROW])
    # a last target the loss_mask removes is no loss: converted exactly
    row = {"input_ids": [1, 2, 3, 4], "labels": [2, 3, 4, 5], "loss_mask": [1, 1, 1, 0]}
    assert PackingConfig().assemble([row]).labels.tolist() == [X, 2, 3, 4]


def test_flattened_megatron_batch_to_hf_collator_is_refused_or_exact():
    """Bug 5: the HF collator trained 2 and 3 despite loss_mask 0 and lost 5."""
    fb = flatten_padded_batch(
        {"input_ids": torch.tensor([[1, 2, 3, 4]]), "labels": torch.tensor([[2, 3, 4, 5]]),
         "loss_mask": torch.tensor([[0, 0, 1, 1]])}, lengths=[4],
    )  # fmt: skip
    with pytest.raises(ValueError, match=r"pack 0: Megatron-shifted label 5 at token 3.*would lose it"):
        PackingConfig().data_collator()([fb])
    fb2 = flatten_padded_batch(
        {"input_ids": torch.tensor([[1, 2, 3, 4]]), "labels": torch.tensor([[2, 3, 4, 5]]),
         "loss_mask": torch.tensor([[0, 1, 1, 0]])}, lengths=[4],
    )  # fmt: skip
    assert PackingConfig().data_collator()([fb2])["labels"].tolist() == [[X, X, 3, 4]]
    shifted = PackingConfig(labels="shifted").collator()([fb2])
    assert shifted["labels"].tolist() == [[X, 3, 4, X]] and shifted["loss_mask"].tolist() == [[0, 1, 1, 0]]
    assert shifted["loss_mask"].dtype == torch.float32  # Megatron's float mask, whatever dtype the shard had


def test_packed_seq_params_of_a_fixed_width_pack_include_the_tail():
    """Bug 4: the tail was missing (cu_seqlens_q_padded [0, 3] for a row of 8)."""
    cfg = PackingConfig(capacity=8, labels="shifted", fixed_width=True)
    q = _params(cfg.packed_seq_params(cfg.assemble([{"input_ids": [1, 2, 3]}])))
    assert q["cu_seqlens_q_padded"].tolist() == [0, 3, 8] and q["cu_seqlens_q"].tolist() == [0, 3, 3]


def test_packed_seq_params_add_an_empty_segment_when_only_the_last_doc_is_padded():
    """Bug 7 (TE #3331): cu_seqlens_q[:-1] == cu_seqlens_q_padded[:-1] makes TE drop pad_between_seqs."""
    c = PackingConfig(capacity=64, topology={"cp": 2}, labels="shifted")
    q = _params(c.packed_seq_params(c.collator()([c.assemble([{"input_ids": torch.arange(13)}])])))
    assert q["cu_seqlens_q"].tolist() == [0, 13, 13] and q["cu_seqlens_q_padded"].tolist() == [0, 16, 16]
    two = _params(to_packed_seq_params(assemble_pack([{"input_ids": [1] * 5}, {"input_ids": [2] * 7}], alignment=4)))
    assert two["cu_seqlens_q"].tolist() == [0, 5, 12] and two["cu_seqlens_q_padded"].tolist() == [0, 8, 16]


def test_loss_reads_the_convention_from_the_config_and_checks_cp():
    """Bug 6: a batch without labels_shifted was scored as HF by a loss built from a shifted config."""
    torch.manual_seed(0)
    logits = torch.randn(1, 4, 8)
    labels, mask = torch.tensor([[2, 3, 4, X]]), torch.tensor([[1.0, 1.0, 1.0, 0.0]])
    loss = PackingConfig(labels="shifted").loss()
    assert float(loss(logits, {"labels": labels, "loss_mask": mask})) == float(
        loss(logits, {"labels": labels, "loss_mask": mask, "labels_shifted": True})
    )
    cfg = PackingConfig(capacity=16, topology={"cp": 2}, labels="shifted")
    shard = cfg.shard(cfg.collator()([cfg.assemble([{"input_ids": list(range(1, 9))}])]), cp_rank=0)
    with pytest.raises(ValueError, match=r"cp_size=2 but the loss was built with cp_size=1"):
        PackingConfig(labels="shifted").loss()(torch.zeros(1, 4, 16), shard)


def test_energon_settings_carry_overflow_and_refuse_missing_buffer():
    """Bugs 8, 11: the config's overflow reaches the Energon mixin (which applies it, media-safe); buffer_size=None
    failed at batch()."""
    assert PackingConfig(buffer_size=8).energon_settings()["overflow"] == "truncate"
    assert PackingConfig(buffer_size=8, overflow="split").energon_settings()["overflow"] == "split"
    with pytest.raises(ValueError, match=r"buffer_size=None: Energon packs from a buffer"):
        PackingConfig(overflow="error").energon_settings()


@pytest.mark.parametrize(
    ("kwargs", "key"),
    [
        ({"emit": {"padding_mask": False}, "consumer": {"varlen_only": True}}, "emit.padding_mask=False"),
        ({"loss_reduction": "sum"}, "loss_reduction='sum'"),
        ({"emit": {"seq_idx": False}}, "emit.seq_idx=False"),
    ],
)
def test_data_collator_refuses_settings_it_does_not_honour(kwargs, key):
    """Bug 9: emit and loss_reduction were validated and then ignored by the HF collator."""
    with pytest.raises(ValueError, match=rf"{key}.*does not fit the HF data collator"):
        PackingConfig(**kwargs).data_collator()


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"capacity": 8, "topology": {"cp": 8}}, r"alignment=16 \(derived from topology\) exceeds capacity=8"),
        ({"capacity": 8, "alignment": 16}, r"alignment=16 exceeds capacity=8"),
        ({"consumer": {"multi_token_prediction": True}}, r"multi_token_prediction=True is a Megatron.*labels: shifted"),
        ({"topology": {"pp": 2}, "fixed_width": True}, r"topology.pp=2 is a Megatron setting.*labels: shifted"),
        ({"alignment": True}, "alignment"),
        ({"alignment": "8"}, "alignment"),
        ({"topology": {"cp": True}}, "cp"),
        ({"buffer_size": "8"}, "buffer_size"),
        ({"max_sequences_per_pack": True}, "max_sequences_per_pack"),
    ],
)
def test_setup_refuses(kwargs, message):
    """Bug 10 and the low-severity setup items of 12."""
    with pytest.raises(ValueError, match=message):
        PackingConfig(**kwargs)


def test_cp_rank_accepts_numpy_and_tensor_integers():
    cfg = PackingConfig(capacity=16, topology={"cp": 2})
    batch = cfg.collator()([cfg.assemble([{"input_ids": list(range(1, 9))}])])
    want = cfg.shard(batch, cp_rank=1)["input_ids"].tolist()
    assert want == [[3, 4, 5, 6]]
    for rank in (np.int64(1), torch.tensor(1)):
        assert shard_for_context_parallel(batch, cp_size=2, cp_rank=rank)["input_ids"].tolist() == want


def test_collator_overrides_a_configured_option():
    cfg = PackingConfig(labels="shifted")
    assert cfg.collator(labels="hf")([cfg.assemble([{"input_ids": [1, 2, 3]}])])["labels"].tolist() == [[X, 2, 3]]


def test_model_copy_revalidates():
    with pytest.raises(ValueError, match=r"topology\.pp=2 needs fixed_width=True"):
        PackingConfig(labels="shifted").model_copy(update={"topology": {"pp": 2}})
    assert PackingConfig().model_copy(update={"capacity": 64}).capacity == 64


def test_unshard_names_the_missing_shard():
    cfg = PackingConfig(capacity=16, topology={"cp": 4})
    batch = cfg.collator()([cfg.assemble([{"input_ids": list(range(1, 9))}])])
    shards = [cfg.shard(batch, cp_rank=r) for r in range(4)]
    with pytest.raises(ValueError, match=r"got 3 shards of ranks \[0, 1, 2\] \(cp_size=4\); need the 4 shards"):
        unshard_context_parallel(shards[:3])


def test_stream_overflow_error_names_the_source_index():
    for lengths, bad in (([10, 3, 2], 0), ([3, 2, 10], 2)):
        stream = PackingConfig(capacity=4, buffer_size=3, overflow="error").stream(
            [{"input_ids": list(range(n))} for n in lengths]
        )
        with pytest.raises(ValueError, match=rf"^sample {bad} has 10 tokens > capacity 4"):
            list(stream)


def test_wrongly_shaped_loss_mask_and_flatten_then_cp_errors_name_the_fix():
    batch = collate_packs([assemble_pack([{"input_ids": [1, 2, 3, 4]}])], labels="shifted")
    with pytest.raises(ValueError, match=r"batch\['loss_mask'\] has shape \(1, 3\) but labels \(1, 4\)"):
        PackingConfig(labels="shifted").loss()(torch.zeros(1, 4, 8), {**batch, "loss_mask": torch.ones(1, 3)})
    fb = flatten_padded_batch({"input_ids": torch.tensor([[1, 2, 3, 0], [4, 5, 6, 7]])}, lengths=[3, 4])
    with pytest.raises(ValueError, match=r"a flatten_padded_batch pack is tight: pad each row's length"):
        shard_for_context_parallel(collate_packs([fb]), cp_size=2, cp_rank=0)


def test_plan_error_does_not_ask_for_the_overflow_already_set():
    """Bug 8: plan_kwargs() has no overflow (plan_packs plans whole sequences); the error said to set it."""
    from packwise.plan import plan_packs

    cfg = PackingConfig(capacity=4, overflow="truncate")
    assert "overflow" not in cfg.plan_kwargs()
    with pytest.raises(
        ValueError, match=r"sequence 0 has 10 tokens > capacity 4; truncate or split it before planning"
    ):
        plan_packs([10, 3], **cfg.plan_kwargs())


def _row(kind: str, text: list[int], keep: list[bool]) -> dict:
    ids = text[:-1]
    if kind == "hf":
        return {"input_ids": ids, "labels": [t if k else X for t, k in zip(ids, keep)]}
    if kind == "mask":
        return {"input_ids": ids, "loss_mask": [int(k) for k in keep]}
    if kind == "megatron":  # labels = text[1:], mask aligned; the last target masked so HF can hold it too
        mask = [int(k) for k in keep[1:]] + [0]
        return {"input_ids": ids, "labels": text[1:], "loss_mask": mask}
    return {"input_ids": ids}


@settings(max_examples=40, deadline=None)
@given(
    docs=st.lists(
        st.tuples(
            st.sampled_from(["hf", "mask", "megatron", "ids"]),
            st.lists(st.integers(1, 50), min_size=3, max_size=9),
            st.lists(st.booleans(), min_size=9, max_size=9),
        ),
        min_size=1,
        max_size=4,
    ),
    align=st.sampled_from([1, 4]),
)
def test_every_row_kind_trains_the_same_targets_in_both_output_conventions(docs, align):
    """Invariant: one row, one set of (position, target) pairs, whatever the output convention."""
    rows = [_row(kind, text, keep[: len(text) - 1]) for kind, text, keep in docs]
    hf_pack, shifted_pack = (
        assemble_pack(rows, alignment=align),
        assemble_pack(rows, alignment=align, labels_shifted=True),
    )
    for out in ("hf", "shifted"):
        a = collate_packs([hf_pack], labels=out)["labels"]
        b = collate_packs([shifted_pack], labels=out)["labels"]
        assert torch.equal(a, b)
    hf = collate_packs([hf_pack], labels="hf")["labels"][0]
    expected = []  # every kind: token t is a target iff keep[t] (all for "ids"), never a document's first
    for kind, text, keep in docs:
        ids = text[:-1]
        expected += [X] + [t if (k or kind == "ids") else X for t, k in zip(ids[1:], keep[1 : len(ids)])]
    assert hf[~hf_pack.padding_mask].tolist() == expected
    assert bool((hf[hf_pack.padding_mask] == X).all())


def test_data_collator_honours_consumer_mrope_for_text_only_batches():
    """Bug 9: consumer.mrope was validated and then ignored by the HF collator."""
    rows = [{"input_ids": [1, 2, 3]}, {"input_ids": [4, 5]}]
    assert PackingConfig().data_collator()(rows)["position_ids"].tolist() == [[0, 1, 2, 0, 1]]
    pos = PackingConfig(consumer={"mrope": True}).data_collator()(rows)["position_ids"]
    assert pos.shape == (4, 1, 5) and pos.tolist() == [[[0, 1, 2, 0, 1]]] * 4
