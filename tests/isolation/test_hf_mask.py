"""A sliding window a module applies only through HF's mask (issue #28 item 4): honoured per document when the
layer holds it (qwen2_moe), refused by name otherwise (phimoe, doge) — even under ``allow=``."""

from __future__ import annotations

import pytest
import torch
import transformers as t

from packwise.hf import PackingRefused, use_packed_attention
from packwise.verify import check_equivalence
from packwise.verify._families import _base

VOCAB = 97
MOE = dict(num_experts_per_tok=2)
ALLOW = ["Qwen2MoeAttention", "Qwen2MoeDecoderLayer", "Qwen2MoeSparseMoeBlock", "PhimoeAttention",
         "PhimoeDecoderLayer", "PhimoeSparseMoeBlock", "DogeAttention", "DogeDecoderLayer", "DogeCDMoE"]  # fmt: skip


def _present(model) -> list[str]:
    """The ALLOW names this model carries (an allow name matching no module class is refused)."""
    return [n for n in ALLOW if n in {type(m).__name__ for m in model.modules()}]


@pytest.fixture(scope="module")
def docs():
    g = torch.Generator().manual_seed(1)
    return [torch.randint(0, VOCAB, (n,), generator=g) for n in (23, 9, 31, 5)]  # longer than the window of 8


def test_qwen2_moe_window_layers_keep_their_window_packed(docs):
    torch.manual_seed(0)
    cfg = t.Qwen2MoeConfig(
        **_base(VOCAB), use_sliding_window=True, sliding_window=8, max_window_layers=2, num_experts=4,
        moe_intermediate_size=32, shared_expert_intermediate_size=32, **MOE,
    )  # fmt: skip
    model = t.Qwen2MoeForCausalLM(cfg).eval()
    model = use_packed_attention(model, allow=_present(model))
    assert cfg.layer_types == ["sliding_attention", "full_attention"]
    attn = [layer.self_attn for layer in model.model.layers]
    assert [getattr(a, "_packwise_window", None) for a in attn] == [8, None]
    r = check_equivalence(model, docs, check_grads=False)
    assert r.isolated and r.max_abs_diff < 1e-5, r
    del attn[0]._packwise_window  # what use_packed_attention(allow=...) gave before: full attention on layer 0
    leaked = check_equivalence(model, docs, check_grads=False)
    assert not leaked.isolated and leaked.max_abs_diff > 0.1, leaked


def _blt():
    layers = dict(hidden_size=32, num_attention_heads=2, num_hidden_layers=1, intermediate_size=64)
    cfg = t.BltConfig(
        vocab_size=260, patch_in_forward=False, encoder_hash_byte_group_vocab=64, encoder_config=layers, decoder_config=layers, global_config=layers,
        patcher_config=layers,
    )  # fmt: skip
    return t.BltForCausalLM(cfg)


@pytest.mark.parametrize(
    "build, where",
    [
        (lambda: t.PhimoeForCausalLM(t.PhimoeConfig(**_base(VOCAB), sliding_window=8, num_local_experts=4, **MOE)),
         r"PhimoeAttention \(model.layers.0.self_attn\) applies PhimoeConfig.sliding_window=8"),
        (lambda: t.DogeForCausalLM(t.DogeConfig(**_base(VOCAB), sliding_window=8)),
         r"DogeAttention \(model.layers.0.self_attn\) applies DogeConfig.sliding_window=8"),
        (_blt, r"BltSelfAttention \(model.local_encoder.layers.0.self_attn\) applies "
               r"BltLocalEncoderConfig.sliding_window=512"),
    ],
)  # fmt: skip
def test_mask_only_window_is_refused_even_under_allow(build, where):
    torch.manual_seed(0)
    model = build().eval()
    every_class = sorted({type(m).__name__ for m in model.modules()})  # allow= cannot opt the window in
    with pytest.raises(PackingRefused, match=where + " only through the attention mask"):
        use_packed_attention(model, allow=every_class)


def test_no_window_no_refusal():
    torch.manual_seed(0)
    model = t.PhimoeForCausalLM(t.PhimoeConfig(**_base(VOCAB), sliding_window=None, num_local_experts=4, **MOE))
    assert use_packed_attention(model.eval(), allow=_present(model)).config._attn_implementation == "packwise"
