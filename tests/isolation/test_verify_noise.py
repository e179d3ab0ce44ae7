"""``check_equivalence`` false positives (issue #28 item 5): a gradient that is zero in exact arithmetic (OPT's
``k_proj.bias``) is absorbed by a noise floor; a config with dropout (Seed-OSS) is compared deterministically, and
the report names what was switched off."""

from __future__ import annotations

import pytest
import torch
import transformers as t

from packwise.hf import use_packed_attention
from packwise.verify import check_equivalence

VOCAB = 97


@pytest.fixture(scope="module")
def docs():
    g = torch.Generator().manual_seed(1)
    return [torch.randint(0, VOCAB, (n,), generator=g) for n in (23, 9, 31, 5, 60)]


def test_opt_zero_key_bias_gradient_is_float_noise(docs):
    torch.manual_seed(0)
    cfg = t.OPTConfig(
        vocab_size=VOCAB, hidden_size=256, ffn_dim=512, num_hidden_layers=2, num_attention_heads=4,
        word_embed_proj_dim=256, max_position_embeddings=512, dropout=0.0,
    )  # fmt: skip
    model = use_packed_attention(t.OPTForCausalLM(cfg).eval(), allow=["OPTAttention", "OPTDecoder", "OPTDecoderLayer"])
    r = check_equivalence(model, docs)
    # before: k_proj.bias (zero up to ~5e-11) against a 1e-6 * max|g| floor gave 3.5e-4 > grad_rtol 1e-4
    assert r.isolated and r.grad_max_rel_diff <= 1e-4, r
    assert r.grad_noise_floor == pytest.approx(16 * torch.finfo(torch.float32).eps * 0.14192966, rel=1e-5)
    leak = check_equivalence(model, docs, inputs="none")  # a real leak stays far above the floor
    assert not leak.isolated and leak.grad_max_rel_diff > 1e-2


def test_seed_oss_dropout_is_switched_off_and_named(docs):
    torch.manual_seed(0)
    cfg = t.SeedOssConfig(
        vocab_size=VOCAB, hidden_size=64, intermediate_size=128, num_hidden_layers=2, num_attention_heads=4,
        num_key_value_heads=2, head_dim=16, max_position_embeddings=512, attention_dropout=0.1, residual_dropout=0.1,
    )  # fmt: skip
    model = use_packed_attention(
        t.SeedOssForCausalLM(cfg), allow=["SeedOssAttention", "SeedOssDecoderLayer", "SeedOssRotaryEmbedding"]
    )
    r = check_equivalence(model, docs[:4], train=True)
    assert r.isolated and r.max_abs_diff < 1e-5, r
    assert r.dropout_off == (
        "SeedOssAttention.attention_dropout=0.1 (x2)", "SeedOssAttention.residual_dropout=0.1 (x2)",
        "SeedOssConfig.attention_dropout=0.1 (x1)", "SeedOssConfig.residual_dropout=0.1 (x1)",
        "SeedOssMLP.residual_dropout=0.1 (x2)",
    )  # fmt: skip
    assert model.model.layers[0].self_attn.attention_dropout == 0.1 and cfg.residual_dropout == 0.1  # restored
    assert check_equivalence(model, docs[:4]).dropout_off == ()  # eval mode: nothing to switch off
