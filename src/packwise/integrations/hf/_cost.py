"""``model_cost(config)``: a Transformers config -> :class:`packwise.plan.ComputeCost` (training FLOPs).

Weights are counted on a meta-device instance of the config's causal LM (``AutoModelForCausalLM``; nothing
is allocated or downloaded), so every family counts what it really has: embeddings are left out (a lookup,
no matmul), the lm_head is counted (tied or not), and the routed experts count ``k / E`` of their weights
(``num_experts_per_tok`` of ``num_experts`` / ``num_local_experts`` / ``n_routed_experts``); shared experts
count in full. Attention: ``2·heads·(d_qk + d_v)`` FLOPs per (query, key) pair and layer (``head_dim`` both;
MLA: ``qk_nope_head_dim + qk_rope_head_dim`` and ``v_head_dim``); ``layer_types`` says
which layers attend fully (``full_attention``), in a window (``sliding_attention``, ``config.sliding_window``)
or not at all (``linear_attention``, ``conv``, ``moe``: linear in tokens, counted by their weights). Any
other layer type is refused by name. Every figure × 3 (forward + backward: Kaplan et al. 2020, §2.1).
"""

from __future__ import annotations

import torch

from ...plan import ComputeCost

#: layer_types entries and how their layer attends (None: no quadratic term).
LAYER_ATTENTION = {
    "full_attention": "full",
    "sliding_attention": "window",
    "linear_attention": None,
    "conv": None,
    "moe": None,
}
_EXPERT_COUNT = ("num_experts", "num_local_experts", "n_routed_experts")


def _attr(cfg, names):
    return next((getattr(cfg, n) for n in names if getattr(cfg, n, None)), None)


def _layer_counts(cfg) -> tuple[int, int, int | None]:
    layers = int(cfg.num_hidden_layers)
    types = getattr(cfg, "layer_types", None)
    window = getattr(cfg, "sliding_window", None)
    if types is None:  # every layer the same: sliding when the config turns a window on for all of them
        if window is not None and getattr(cfg, "use_sliding_window", True):
            return 0, layers, int(window)
        return layers, 0, None
    unknown = sorted({t for t in types if t not in LAYER_ATTENTION})
    if unknown:
        raise ValueError(
            f"{type(cfg).__name__}.layer_types holds {unknown}: packwise has no compute model for them (known: "
            f"{sorted(LAYER_ATTENTION)}); pass distribute(cost=ComputeCost(...)) with your own numbers"
        )
    full = sum(LAYER_ATTENTION[t] == "full" for t in types)
    slid = sum(LAYER_ATTENTION[t] == "window" for t in types)
    if slid and not window:
        raise ValueError(f"{type(cfg).__name__} has sliding_attention layers but sliding_window={window!r}")
    return full, slid, int(window) if slid and window else None  # slid: window is set (checked above)


def _weights(cfg) -> float:
    """Matmul weights a token passes through: non-embedding weights, experts scaled by k/E, lm_head."""
    from transformers import AutoModel, AutoModelForCausalLM  # optional heavy dependency (as in _api)

    with torch.device("meta"):
        try:
            model = AutoModelForCausalLM.from_config(cfg)
        except ValueError:  # a multimodal model's text config (Qwen2.5-VL...): its decoder, lm_head added below
            model = AutoModel.from_config(cfg)
    embeddings = {id(m.weight) for m in model.modules() if isinstance(m, torch.nn.Embedding)}
    top_k, experts = getattr(cfg, "num_experts_per_tok", None), _attr(cfg, _EXPERT_COUNT)
    total = 0.0
    for name, p in model.named_parameters():
        if id(p) in embeddings:
            continue
        if "experts" in name.split("."):
            if not top_k or not experts:
                raise ValueError(
                    f"{type(cfg).__name__}: parameter {name!r} belongs to routed experts but the config gives "
                    f"num_experts_per_tok={top_k!r} and {'/'.join(_EXPERT_COUNT)}={experts!r}; cannot tell the "
                    "active share — pass distribute(cost=ComputeCost(...)) with your own numbers"
                )
            total += p.numel() * float(top_k) / float(experts)
        else:
            total += p.numel()
    head = model.get_output_embeddings()
    if head is None:  # the decoder alone: the lm_head is vocab × hidden
        total += float(cfg.vocab_size) * float(cfg.hidden_size)
    elif id(head.weight) in embeddings:  # tied to the input embedding: still a matmul
        total += head.weight.numel()
    return total


def model_cost(config) -> ComputeCost:
    """Training FLOPs of a pack for a Transformers model config (see the module docstring).

    Args:
        config: a ``transformers.PretrainedConfig`` (a multimodal config: its text config is used).

    Returns:
        A :class:`packwise.plan.ComputeCost`: ``per_token`` = 6 × matmul weights, ``per_pair`` =
        6·heads·(d_qk + d_v), the full / sliding layer counts and the window (tokens).

    Raises:
        ValueError: a ``layer_types`` entry without a compute model, routed experts without
            ``num_experts_per_tok`` and an expert count, sliding layers without ``sliding_window``.

    Example:
        >>> from transformers import LlamaConfig
        >>> cfg = LlamaConfig(vocab_size=10, hidden_size=8, intermediate_size=16, num_hidden_layers=2,
        ...                   num_attention_heads=2, num_key_value_heads=1)
        >>> c = model_cost(cfg)
        >>> c.per_token, c.per_pair, c.full_layers, c.window_layers  # 6·(2·(192 + 384 + 16) + 8 + 80)
        (7632.0, 96.0, 2, 0)
    """
    cfg = config.get_text_config() if hasattr(config, "get_text_config") else config
    full, slid, window = _layer_counts(cfg)
    heads = int(cfg.num_attention_heads)
    head_dim = getattr(cfg, "head_dim", None) or cfg.hidden_size // heads
    if getattr(cfg, "qk_nope_head_dim", None) is not None:  # MLA (DeepSeek): QKᵀ and AV have their own widths
        qk, v = cfg.qk_nope_head_dim + cfg.qk_rope_head_dim, cfg.v_head_dim
    else:
        qk = v = head_dim
    return ComputeCost(
        per_token=6.0 * _weights(cfg),
        per_pair=6.0 * heads * (qk + v),
        full_layers=full,
        window_layers=slid,
        window=window,
    )
