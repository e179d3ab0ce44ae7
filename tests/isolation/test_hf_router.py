"""MoE routers never see padding (issue #27 item 4): through PackedDataCollator + use_packed_attention the
load-balancing loss of a padded batch (alignment, pad_to_multiple_of, a fixed-width pack) is the tight pack's,
on real transformers MoE models (tiny random configs)."""

from __future__ import annotations

import pytest
import torch
import transformers as t

from packwise.assemble import assemble_pack
from packwise.hf import PackedDataCollator, use_packed_attention
from packwise.verify import family_model
from packwise.verify._families import _base

VOCAB = 97
ROWS = [{"input_ids": list(range(3, 14))}, {"input_ids": list(range(20, 27))}, {"input_ids": list(range(40, 45))}]
#: families outside VERIFIED_FAMILIES: the module classes opted in (their attention is plain causal attention)
ALLOW = {
    "mixtral": ["MixtralAttention", "MixtralDecoderLayer", "MixtralSparseMoeBlock"],
    "qwen3_5_moe": ["Qwen3_5MoeAttention", "Qwen3_5MoeDecoderLayer", "Qwen3_5MoeSparseMoeBlock"],
    "nemotron_h": ["NemotronHAttention", "NemotronHBlock", "NemotronHMoE"],
}
#: the tight pack's aux loss (seed 0) and what the padded batches gave before (padding routed into the statistics)
TIGHT = {"qwen3_moe": 2.0516417, "mixtral": 2.0051856, "gpt_oss": 2.0156646, "qwen3_5_moe": 2.0021574}
BEFORE = {  # alignment=8, pad_to_multiple_of=32
    "qwen3_moe": (2.0411201, 2.0091567), "mixtral": (2.0184808, 2.0104387), "gpt_oss": (2.0215025, 2.029264),
    "qwen3_5_moe": (2.0140231, 2.0162783),
}  # fmt: skip


def _model(family: str):
    torch.manual_seed(0)
    moe = dict(num_experts_per_tok=2, moe_intermediate_size=32)
    if family == "mixtral":
        model = t.MixtralForCausalLM(t.MixtralConfig(**_base(VOCAB), num_local_experts=4, num_experts_per_tok=2))
    elif family == "qwen3_5_moe":  # its attention layers only (the gated DeltaNet layers carry state: refused)
        cfg = t.Qwen3_5MoeTextConfig(
            **_base(VOCAB), head_dim=16, layer_types=["full_attention"] * 2, num_experts=4,
            shared_expert_intermediate_size=32, **moe,
        )  # fmt: skip
        model = t.Qwen3_5MoeForCausalLM(cfg)
    elif family == "nemotron_h":  # attention + MoE blocks (its Mamba blocks carry state: refused)
        base = {k: v for k, v in _base(VOCAB).items() if k != "num_hidden_layers"}
        cfg = t.NemotronHConfig(
            **base, layers_block_type=["attention", "moe"], n_routed_experts=4, moe_shared_expert_intermediate_size=32,
            head_dim=16, n_group=1, topk_group=1, **moe,
        )  # fmt: skip
        model = t.NemotronHForCausalLM(cfg)
    else:
        model = family_model(family, VOCAB)
    return use_packed_attention(model.eval(), allow=ALLOW.get(family, ()))


def _batches():
    fixed = [assemble_pack(ROWS[:2], pad_to=24), assemble_pack(ROWS[2:], pad_to=8)]  # PackedParquetDataset items
    return {
        "tight": PackedDataCollator()(ROWS),
        "alignment": PackedDataCollator(alignment=8)(ROWS),
        "multiple": PackedDataCollator(pad_to_multiple_of=32)(ROWS),
        "fixed": PackedDataCollator()(fixed),
    }


def test_collator_names_its_padding():
    b = _batches()
    assert "padding_mask" not in b["tight"]
    assert b["alignment"]["padding_mask"][0].nonzero().flatten().tolist() == [11, 12, 13, 14, 15, 23, 29, 30, 31]
    assert b["multiple"]["padding_mask"][0].nonzero().flatten().tolist() == list(range(23, 32))
    assert b["fixed"]["padding_mask"][0].nonzero().flatten().tolist() == [18, 19, 20, 21, 22, 23, 29, 30, 31]


@pytest.mark.parametrize("family", ["qwen3_moe", "mixtral", "gpt_oss", "qwen3_5_moe", "nemotron_h"])
def test_aux_loss_of_padded_batch_equals_tight_pack(family):
    model = _model(family)
    with torch.no_grad():
        out = {k: model(**b, output_router_logits=True) for k, b in _batches().items()}
    for kind in ("alignment", "multiple", "fixed"):
        assert abs(out[kind].loss.item() - out["tight"].loss.item()) < 2e-6, kind  # CE + coef * aux
        if family == "nemotron_h":  # sigmoid router, no auxiliary loss in transformers 5.24: nothing to protect
            assert out[kind].aux_loss is None
            continue
        assert abs(out[kind].aux_loss.item() - out["tight"].aux_loss.item()) < 1e-6, kind
    if family in TIGHT:
        assert out["tight"].aux_loss.item() == pytest.approx(TIGHT[family], abs=1e-6)
        with torch.no_grad():  # without the collator's padding_mask: padding enters the statistics (the old figures)
            for kind, before in zip(("alignment", "multiple"), BEFORE[family]):
                b = {k: v for k, v in _batches()[kind].items() if k != "padding_mask"}
                assert model(**b, output_router_logits=True).aux_loss.item() == pytest.approx(before, abs=1e-6)


def test_padding_mask_with_an_attention_mask_is_refused():
    model = _model("qwen3_moe")
    b = _batches()["multiple"]
    with pytest.raises(ValueError, match=r"both padding_mask .* and an attention_mask"):
        model(**b, attention_mask=torch.ones_like(b["input_ids"]))


def test_trainer_loss_of_padded_batch_equals_tight_pack(tmp_path):
    # a real transformers.Trainer: its dataloader runs the collator, compute_loss feeds the patched forward
    model = _model("qwen3_moe")
    model.config.output_router_logits = True  # CE + router_aux_loss_coef (0.001) * aux
    args = t.TrainingArguments(output_dir=str(tmp_path), report_to=[], use_cpu=True, per_device_train_batch_size=3)
    losses = {}
    for kind, collator in {
        "tight": PackedDataCollator(),
        "multiple": PackedDataCollator(pad_to_multiple_of=32),
    }.items():
        trainer = t.Trainer(model=model, args=args, train_dataset=ROWS, data_collator=collator)
        batch = trainer._prepare_inputs(next(iter(trainer.get_train_dataloader())))
        assert ("padding_mask" in batch) == (kind == "multiple")
        with torch.no_grad():
            losses[kind] = trainer.compute_loss(model, batch).item()
    assert losses["tight"] == pytest.approx(4.6607256, abs=1e-5)
    # before: 4.6606832 with ROWS in order (the padding counted in the aux loss)
    assert losses["multiple"] == pytest.approx(losses["tight"], abs=2e-6)
