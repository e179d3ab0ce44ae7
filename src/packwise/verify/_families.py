"""Tiny random configs of transformers model families for the conformance matrix (``packwise verify``).

Every config is 2 layers, hidden 64 (vision tower 32), 4 query / 2 key-value heads, over the qwen2.5
vocabulary, and turns on the family's attention features: sliding windows of 8 tokens (Mistral; Qwen2 via
``use_sliding_window`` + ``max_window_layers``; Gemma-2/3 and gpt-oss interleaved local/global layers),
Gemma-2 logit softcapping 5.0, gpt-oss attention sinks, RoBERTa's bidirectional attention with
``position_offset = pad_token_id + 1``. Hybrid families (Mamba/Mamba2 mixers, gated DeltaNet, short
convolutions, lightning attention) carry recurrent/convolutional state that packwise resets per document;
Kimi Linear (MLA attention with a value head dim unlike the query's) is expected to be REFUSED.
"""

from __future__ import annotations

from collections.abc import Callable

WINDOW = 8


def _base(vocab: int) -> dict:
    return dict(
        vocab_size=vocab, hidden_size=64, intermediate_size=128, num_hidden_layers=2, num_attention_heads=4,
        num_key_value_heads=2, max_position_embeddings=4096, tie_word_embeddings=True,
    )  # fmt: skip


def _llama(t, v):
    return t.LlamaConfig(**_base(v))


def _qwen2(t, v):
    return t.Qwen2Config(**_base(v), use_sliding_window=True, sliding_window=WINDOW, max_window_layers=1)


def _qwen3(t, v):
    return t.Qwen3Config(**_base(v), head_dim=16)


def _qwen3_moe(t, v):
    return t.Qwen3MoeConfig(**_base(v), head_dim=16, num_experts=4, num_experts_per_tok=2, moe_intermediate_size=32)


def _mistral(t, v):
    return t.MistralConfig(**_base(v), sliding_window=WINDOW)


def _gemma2(t, v):
    return t.Gemma2Config(
        **_base(v), head_dim=16, sliding_window=WINDOW, attn_logit_softcapping=5.0, final_logit_softcapping=30.0,
        layer_types=["sliding_attention", "full_attention"], query_pre_attn_scalar=16,
    )  # fmt: skip


def _gemma3(t, v):
    return t.Gemma3TextConfig(
        **_base(v), head_dim=16, sliding_window=WINDOW, layer_types=["sliding_attention", "full_attention"],
        query_pre_attn_scalar=24,
    )  # fmt: skip


def _phi3(t, v):
    return t.Phi3Config(**_base(v), pad_token_id=0)


def _gpt_oss(t, v):
    return t.GptOssConfig(
        **_base(v), head_dim=16, num_local_experts=4, num_experts_per_tok=2, sliding_window=WINDOW,
        layer_types=["sliding_attention", "full_attention"],
    )  # fmt: skip


def _olmo2(t, v):
    return t.Olmo2Config(**_base(v))


def _roberta(t, v):
    b = _base(v)
    return t.RobertaConfig(
        vocab_size=v, hidden_size=64, intermediate_size=128, num_hidden_layers=2, num_attention_heads=4,
        max_position_embeddings=4096, pad_token_id=1, hidden_dropout_prob=0.0, attention_probs_dropout_prob=0.0,
        tie_word_embeddings=b["tie_word_embeddings"],
    )  # fmt: skip


def _bert(t, v):
    return t.BertConfig(
        vocab_size=v, hidden_size=64, intermediate_size=128, num_hidden_layers=2, num_attention_heads=4,
        max_position_embeddings=4096, pad_token_id=0, hidden_dropout_prob=0.0, attention_probs_dropout_prob=0.0,
    )  # fmt: skip


def _bamba(t, v):
    return t.BambaConfig(
        **_base(v), attn_layer_indices=[1], mamba_n_heads=4, mamba_d_head=32, mamba_d_state=16, mamba_n_groups=1,
        mamba_expand=2,
    )  # fmt: skip


def _nemotron_h(t, v):
    return t.NemotronHConfig(
        **{k: x for k, x in _base(v).items() if k != "num_hidden_layers"}, hybrid_override_pattern="M*",
        mamba_num_heads=4, mamba_head_dim=32, ssm_state_size=16, n_groups=1, head_dim=16,
    )  # fmt: skip


def _qwen3_next(t, v):
    return t.Qwen3NextConfig(
        **_base(v), head_dim=16, layer_types=["linear_attention", "full_attention"], num_experts=4,
        num_experts_per_tok=2, moe_intermediate_size=32, shared_expert_intermediate_size=32, linear_num_key_heads=2,
        linear_num_value_heads=4, linear_key_head_dim=16, linear_value_head_dim=16,
    )  # fmt: skip


def _jamba(t, v):
    return t.JambaConfig(
        **_base(v), attn_layer_period=2, attn_layer_offset=1, expert_layer_period=2, num_experts=2,
        mamba_d_state=8, mamba_dt_rank=8, use_mamba_kernels=False,
    )  # fmt: skip


def _lfm2(t, v):
    return t.Lfm2Config(**_base(v), layer_types=["conv", "full_attention"])


def _mamba(t, v):
    return t.MambaConfig(vocab_size=v, hidden_size=64, num_hidden_layers=2, state_size=8, expand=2, conv_kernel=4)


def _mamba2(t, v):
    return t.Mamba2Config(
        vocab_size=v, hidden_size=64, num_hidden_layers=2, num_heads=4, head_dim=32, state_size=16, n_groups=1,
        expand=2, chunk_size=16,
    )  # fmt: skip


def _falcon_mamba(t, v):
    return t.FalconMambaConfig(vocab_size=v, hidden_size=64, num_hidden_layers=2, state_size=8, expand=2)


_MAMBA2 = dict(mamba_n_heads=4, mamba_d_head=32, mamba_d_state=16, mamba_n_groups=1, mamba_expand=2)


def _granitemoehybrid(t, v):
    return t.GraniteMoeHybridConfig(
        **_base(v), layer_types=["mamba", "attention"], **_MAMBA2, num_local_experts=2, num_experts_per_tok=1
    )


def _falcon_h1(t, v):
    return t.FalconH1Config(**_base(v), **_MAMBA2, mamba_d_ssm=None, head_dim=16)


def _zamba(t, v):  # three layers: the shared transformer block needs two hybrid layers to tie
    return t.ZambaConfig(
        **{**_base(v), "num_hidden_layers": 3}, layer_types=["hybrid", "linear_attention", "hybrid"],
        mamba_d_state=8, mamba_dt_rank=8, n_mamba_heads=2,
    )  # fmt: skip


def _zamba2(t, v):
    return t.Zamba2Config(
        **_base(v), mamba_d_state=16, mamba_headdim=16, n_mamba_heads=8, layers_block_type=["mamba", "hybrid"],
        num_mem_blocks=1,
    )  # fmt: skip


_DELTA = dict(
    head_dim=16, layer_types=["linear_attention", "full_attention"], linear_num_key_heads=2, linear_num_value_heads=4,
    linear_key_head_dim=16, linear_value_head_dim=16,
)  # fmt: skip


def _qwen3_5(t, v):
    return t.Qwen3_5TextConfig(**_base(v), **_DELTA)


def _qwen3_5_moe(t, v):
    return t.Qwen3_5MoeTextConfig(
        **_base(v), **_DELTA, num_experts=4, num_experts_per_tok=2, moe_intermediate_size=32,
        shared_expert_intermediate_size=32,
    )  # fmt: skip


def _lfm2_moe(t, v):
    return t.Lfm2MoeConfig(
        **_base(v), layer_types=["conv", "full_attention"], num_experts=4, num_experts_per_tok=2,
        moe_intermediate_size=32, num_dense_layers=1,
    )  # fmt: skip


def _kimi_linear(t, v):
    return t.KimiLinearConfig(
        **{**_base(v), "num_key_value_heads": 4}, pad_token_id=0, bos_token_id=1, eos_token_id=2,
        layer_types=["linear_attention", "full_attention"], linear_head_dim=16, linear_num_heads=4,
        num_local_experts=4, num_experts_per_tok=2, moe_intermediate_size=32, q_lora_rank=None, kv_lora_rank=16,
        qk_nope_head_dim=16, qk_rope_head_dim=8, v_head_dim=16,
    )  # fmt: skip


def _olmo_hybrid(t, v):
    return t.OlmoHybridConfig(
        **_base(v), pad_token_id=0, bos_token_id=1, eos_token_id=2, layer_types=["linear_attention", "full_attention"]
    )


def _minimax(t, v):
    return t.MiniMaxConfig(
        **_base(v), num_local_experts=2, num_experts_per_tok=1, layer_types=["linear_attention", "full_attention"]
    )


def _qwen2_5_vl(t, v):
    from ._models import tiny_config

    return tiny_config("tiny-qwen2.5-vl", v)


#: family -> (config builder, model kind): ``causal``, ``masked`` (encoder) or ``vl`` (image+text).
FAMILIES: dict[str, tuple[Callable, str]] = {
    "llama": (_llama, "causal"),
    "qwen2": (_qwen2, "causal"),
    "qwen3": (_qwen3, "causal"),
    "qwen3_moe": (_qwen3_moe, "causal"),
    "mistral": (_mistral, "causal"),
    "gemma2": (_gemma2, "causal"),
    "gemma3": (_gemma3, "causal"),
    "phi3": (_phi3, "causal"),
    "gpt_oss": (_gpt_oss, "causal"),
    "olmo2": (_olmo2, "causal"),
    "roberta": (_roberta, "masked"),
    "bert": (_bert, "masked"),
    "qwen2_5_vl": (_qwen2_5_vl, "vl"),
    "bamba": (_bamba, "causal"),
    "nemotron_h": (_nemotron_h, "causal"),
    "qwen3_next": (_qwen3_next, "causal"),
    "jamba": (_jamba, "causal"),
    "lfm2": (_lfm2, "causal"),
    "mamba": (_mamba, "causal"),
    "mamba2": (_mamba2, "causal"),
    "falcon_mamba": (_falcon_mamba, "causal"),
    "granitemoehybrid": (_granitemoehybrid, "causal"),
    "falcon_h1": (_falcon_h1, "causal"),
    "zamba": (_zamba, "causal"),
    "zamba2": (_zamba2, "causal"),
    "qwen3_5": (_qwen3_5, "causal"),
    "qwen3_5_moe": (_qwen3_5_moe, "causal"),
    "lfm2_moe": (_lfm2_moe, "causal"),
    "kimi_linear": (_kimi_linear, "causal"),
    "olmo_hybrid": (_olmo_hybrid, "causal"),
    "minimax": (_minimax, "causal"),
}


def family_model(family: str, vocab: int):
    """A random-init fp32 model of ``family`` (seed it first) in eval mode.

    Example:
        >>> import torch
        >>> _ = torch.manual_seed(0)
        >>> family_model("mistral", 97).config.sliding_window
        8

    Raises:
        ValueError: an unknown family.
    """
    import torch
    import transformers as t

    if family not in FAMILIES:
        raise ValueError(f"unknown model family {family!r}; use one of {', '.join(FAMILIES)}")
    build, kind = FAMILIES[family]
    config = build(t, vocab)
    if kind == "masked":
        model = t.AutoModelForMaskedLM.from_config(config)
    elif kind == "vl":
        model = t.Qwen2_5_VLForConditionalGeneration(config)
    else:
        model = t.AutoModelForCausalLM.from_config(config)
    return model.to(torch.float32).eval()
