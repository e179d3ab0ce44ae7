"""One PackingConfig builds every component; each field, changed in turn, changes what the components produce.

``components(cfg)`` runs the built planner, assembler, collator, loss, CP sharder, stream, Energon settings
and ``PackedSeqParams`` on one fixed input and fingerprints their outputs. Fields the offline pipeline
reads (tokenizer, chat template, ...) are checked where that component receives them
(``pipeline_kwargs``, exercised end to end by tests/pipeline and tests/cli). Two fields only gate rules:
``topology.pp`` (needs fixed_width) and ``consumer.varlen_only`` (allows layout/positions choices); their
test shows the set of accepted configs changes.
"""

from __future__ import annotations

import pytest
import torch
from pydantic import BaseModel

from packwise import PackingConfig
from packwise.assemble import assemble_pack
from packwise.plan import plan_packs

LENGTHS = (5, 9, 3, 7, 2, 6)
DOCS = [{"input_ids": torch.arange(1, n + 1) + 10 * i} for i, n in enumerate(LENGTHS)]


def _fingerprint(value):
    if isinstance(value, torch.Tensor):
        return (str(value.dtype), tuple(value.shape), value.tolist())
    if isinstance(value, dict):
        return {k: _fingerprint(v) for k, v in sorted(value.items())}
    if isinstance(value, (list, tuple)):
        return [_fingerprint(v) for v in value]
    return value


def components(cfg: PackingConfig) -> dict:
    """Everything the config builds, run on DOCS."""
    plan = plan_packs(list(LENGTHS), **cfg.plan_kwargs())
    packs = [cfg.assemble([DOCS[i] for i in p]) for p in plan.packs()]
    batch = cfg.collator()(packs[:2])
    out = {"plan": [p.tolist() for p in plan.packs()], "batch": _fingerprint(batch)}
    logits = torch.linspace(-1, 1, 64 * batch["labels"].numel()).reshape(*batch["labels"].shape, 64)
    out["loss"] = float(cfg.loss()(logits, batch, num_items=10 if cfg.topology.cp > 1 else None))
    if batch["layout"] == "thd":
        out["params"] = _fingerprint(vars(cfg.packed_seq_params(batch)))
        out["shard"] = _fingerprint(cfg.shard(batch, cp_rank=0))
    if cfg.buffer_size is not None:
        long = {"input_ids": torch.arange(20)}  # longer than capacity=16: the overflow policy decides
        out["stream"] = [p.cu_seqlens.tolist() for p in cfg.stream([*DOCS, long])]
    try:  # Energon needs buffer_size and overflow="error"; the refusal names what differs
        out["energon"] = _fingerprint(cfg.energon_settings())
    except ValueError as e:
        out["energon"] = str(e)
    out["pipeline"] = repr(sorted(cfg.pipeline_kwargs().items()))
    return out


# field -> (base overrides, variant overrides): the variant differs from the base in that field only
VARIANTS = {
    "capacity": ({}, {"capacity": 12}),
    "algorithm": ({}, {"algorithm": "next_fit"}),
    "algorithm_options": ({"algorithm": "balanced_greedy_knapsack"}, {"algorithm_options": {"delta": 3}}),
    "overflow": ({"capacity": 16, "buffer_size": 7}, {"overflow": "split"}),
    "topology.tp": ({"topology": {"sequence_parallel": True}}, {"topology": {"tp": 2}}),
    "topology.cp": ({}, {"topology": {"cp": 2}}),
    "topology.sequence_parallel": ({"topology": {"tp": 2}}, {"topology": {"sequence_parallel": True}}),
    "topology.fp8": ({}, {"topology": {"fp8": True}, "capacity": 64}),
    "alignment": ({}, {"alignment": 2}),
    "layout": ({}, {"layout": "padded"}),
    "fixed_width": ({}, {"fixed_width": True}),
    "emit.position_ids": ({"consumer": {"varlen_only": True}}, {"emit": {"position_ids": False}}),
    "emit.padding_mask": ({}, {"emit": {"padding_mask": False}}),
    "emit.seq_idx": ({}, {"emit": {"seq_idx": False}}),
    "labels": ({}, {"labels": "shifted"}),
    "loss_reduction": ({}, {"loss_reduction": "sum"}),
    "buffer_size": ({"buffer_size": 6}, {"buffer_size": 2}),
    "consumer.mrope": ({}, {"consumer": {"mrope": True}}),
    "consumer.multi_token_prediction": (
        {"alignment": 2, "labels": "shifted"},
        {"consumer": {"multi_token_prediction": True}},
    ),
    "consumer.varlen_only": None,  # rule-only: test_rule_only_fields
    "consumer.max_seqlen": ({}, {"consumer": {"max_seqlen": "tensor"}}),
    "topology.pp": None,  # rule-only: test_rule_only_fields
    "multimodal.media_root": ({}, {"multimodal": {"media_root": "/data/media"}}),
    "multimodal.min_pixels": ({}, {"multimodal": {"min_pixels": 28 * 28}}),
    "multimodal.max_pixels": ({}, {"multimodal": {"max_pixels": 28 * 28 * 64}}),
    "multimodal.media_family": ({}, {"multimodal": {"media_family": "nemotron-omni"}}),
    "tokenizer": ({}, {"tokenizer": "qwen2.5"}),
    "chat_template": ({}, {"chat_template": "chatml"}),
    "loss_on": ({}, {"loss_on": "all"}),
    "seed": ({"algorithm": "first_fit_shuffle"}, {"seed": 3}),
    "max_sequences_per_pack": ({}, {"max_sequences_per_pack": 1}),
    "max_segments": ({}, {"max_segments": 8}),
    "min_packs": ({}, {"min_packs": 6}),
    "pack_count_multiple": ({}, {"pack_count_multiple": 4}),
    "skip_bad_rows": ({}, {"skip_bad_rows": True}),
    "drop_fields": ({}, {"drop_fields": ["id"]}),  # pipeline_kwargs (packs: tests/test_input_rule.py)
}


def _fields(model: type[BaseModel], prefix: str = "") -> list[str]:
    out = []
    for name, info in model.model_fields.items():
        sub = info.annotation
        if isinstance(sub, type) and issubclass(sub, BaseModel):
            out += _fields(sub, f"{prefix}{name}.")
        else:
            out.append(prefix + name)
    return out


def _merge(a: dict, b: dict) -> dict:
    out = dict(a)
    for k, v in b.items():
        out[k] = _merge(out[k], v) if isinstance(v, dict) and isinstance(out.get(k), dict) else v
    return out


def test_every_field_has_a_variant():
    assert sorted(_fields(PackingConfig)) == sorted(VARIANTS)


@pytest.mark.parametrize("field", [f for f, v in VARIANTS.items() if v is not None])
def test_changing_a_field_changes_the_built_components(field):
    base, change = VARIANTS[field]
    a, b = components(PackingConfig(**base)), components(PackingConfig(**_merge(base, change)))
    assert a != b, f"{field}: no built component changed"


def test_mtp_collator_refuses_media():
    pack = assemble_pack([{"input_ids": [1, 2], "pixel_values": torch.zeros(4, 3), "image_grid_thw": [[1, 2, 2]]}])
    PackingConfig().collator()([pack])
    with pytest.raises(ValueError, match=r"consumer\.multi_token_prediction=True"):
        PackingConfig(consumer={"multi_token_prediction": True}, labels="shifted").collator()([pack])


def test_rule_only_fields():
    with pytest.raises(ValueError, match=r"topology\.pp=2 needs fixed_width"):
        PackingConfig(topology={"pp": 2})
    PackingConfig(topology={"pp": 2}, fixed_width=True, labels="shifted")
    with pytest.raises(ValueError, match=r"emit\.position_ids=False needs consumer\.varlen_only"):
        PackingConfig(emit={"position_ids": False})
    PackingConfig(emit={"position_ids": False}, consumer={"varlen_only": True})


def test_emit_padding_mask_false_is_not_emitted():
    """The issue's example: emit.padding_mask=False used to be accepted and ignored."""
    cfg = PackingConfig(emit={"padding_mask": False, "seq_idx": False})
    batch = cfg.collator()([cfg.assemble(DOCS[:2])])
    assert "padding_mask" not in batch and "seq_idx" not in batch and "position_ids" in batch


def test_builders_refuse_what_they_cannot_build():
    with pytest.raises(ValueError, match="needs buffer_size"):
        PackingConfig().stream(DOCS)
    with pytest.raises(ValueError, match="labels='shifted' does not fit the HF data collator"):
        PackingConfig(labels="shifted").data_collator()
    collate = PackingConfig(topology={"cp": 2}).data_collator()
    assert collate.alignment == 4


def test_consumer_max_seqlen_tensor_for_megatron_lm_broadcast():
    """consumer.max_seqlen='tensor': 0-d int32 tensors (Megatron-LM broadcasts batch values over TP ranks);
    PackedSeqParams still gets Python ints; the HF collator refuses it."""
    cfg = PackingConfig(capacity=16, labels="shifted", consumer={"max_seqlen": "tensor"})
    batch = cfg.collator()([cfg.assemble([{"input_ids": torch.arange(5)}, {"input_ids": torch.arange(3)}])])
    for key in ("max_seqlen", "max_seqlen_padded", "max_length_q", "max_length_k"):
        assert batch[key].dtype == torch.int32 and batch[key].dim() == 0
    assert int(batch["max_seqlen"]) == 5
    params = cfg.packed_seq_params(batch)
    assert params.max_seqlen_q == 5 and type(params.max_seqlen_q) is int
    with pytest.raises(ValueError, match=r"consumer\.max_seqlen='tensor' does not fit the HF data collator"):
        cfg.model_copy(update={"labels": "hf"}).data_collator()
