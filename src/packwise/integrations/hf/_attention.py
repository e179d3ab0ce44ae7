"""The ``AttentionInterface`` function packwise registers: varlen attention on the collator's boundaries.

Every attention feature transformers passes to the interface is honoured, packed or not: the per-layer
``sliding_window`` (Mistral, Qwen2 ``max_window_layers``, Gemma-2/3 interleaved local/global layers),
``softcap`` (Gemma-2 ``attn_logit_softcapping``), ``s_aux`` (gpt-oss attention sinks), ``scaling`` and
non-causal (encoder) modules — per document when ``cu_seq_lens_q/k`` are given. Sources: the keyword
arguments of ``attention_interface(...)`` in transformers 5.24's ``modeling_mistral``, ``modeling_gemma2``,
``modeling_gpt_oss`` and ``modeling_roberta``; window semantics from ``masking_utils.sliding_window_overlay``.
"""

from __future__ import annotations

import torch

from ...attention import Backend, attend, varlen_attention


def packwise_attention_forward(
    module: torch.nn.Module,
    query: torch.Tensor,
    key: torch.Tensor,
    value: torch.Tensor,
    attention_mask: torch.Tensor | None,
    scaling: float | None = None,
    dropout: float = 0.0,
    *,
    backend: Backend = "auto",
    **kwargs,
) -> tuple[torch.Tensor, None]:
    """An ``AttentionInterface`` function: varlen attention on the collator's ``cu_seq_lens_q/k``.

    ``query`` is ``(B, H, S, D)``, ``key``/``value`` ``(B, H_kv, K, D)``; with ``cu_seq_lens_q/k`` the
    ``B·S`` tokens are attended document by document (the mask HF built is ignored), causal modules and
    modules marked bidirectional by :func:`~packwise.hf.use_packed_attention` (encoders) alike. Without
    them (unpacked batches, generation) it is SDPA with HF's mask, or dense math when the layer has
    ``softcap`` or attention sinks. ``sliding_window``, ``softcap``, ``s_aux`` and ``scaling`` are honoured
    on both paths. Returns ``((B, S, H, D), None)``.

    Raises:
        ValueError: boundaries given together with a populated KV cache (keys longer than queries), or
            boundaries that do not cover the ``B·S`` tokens.
    """
    window = kwargs.get("sliding_window", getattr(module, "_packwise_window", None))  # the latter: hf/_mask.py
    softcap = kwargs.get("softcap") or None
    sinks = kwargs.get("s_aux")
    cu_q = kwargs.get("cu_seq_lens_q")
    causal = kwargs.get("is_causal")
    causal = getattr(module, "is_causal", True) if causal is None else causal
    if cu_q is None or not (causal or getattr(module, "_packwise_bidirectional", False)):
        # Unpacked input, generation, or a bidirectional module that is not the text encoder (a VLM's vision
        # tower receives the text kwargs too, with its own sequence): the text boundaries do not apply.
        return _unpacked(module, query, key, value, attention_mask, scaling, dropout, causal, window, softcap, sinks)
    cu_k = kwargs.get("cu_seq_lens_k", cu_q)
    b, h, s, d = query.shape
    if key.shape[2] != s:
        raise ValueError(
            f"packed attention got {s} queries but {key.shape[2]} keys: a populated KV cache cannot be combined with "
            "cu_seq_lens (pass use_cache=False when continuing from a cache)"
        )
    if int(cu_q[-1]) != b * s:
        raise ValueError(
            f"cu_seq_lens_q ends at {int(cu_q[-1])} but the batch has {b}x{s} tokens: the boundaries belong to another "
            "batch (build input_ids and cu_seq_lens_q/k with one PackedDataCollator call)"
        )
    q = query.transpose(1, 2).reshape(b * s, h, d)
    k = key.transpose(1, 2).reshape(b * s, key.shape[1], d)
    v = value.transpose(1, 2).reshape(b * s, value.shape[1], d)
    out = varlen_attention(
        q, k, v, cu_seqlens_q=cu_q, cu_seqlens_k=cu_k,
        max_seqlen_q=int(kwargs.get("max_length_q") or s), max_seqlen_k=int(kwargs.get("max_length_k") or s),
        causal=bool(causal), scale=scaling, backend=backend, dropout_p=dropout if module.training else 0.0,
        window=int(window) if window and causal else None, softcap=softcap, sinks=sinks,
    )  # fmt: skip
    return out.reshape(b, s, h, d), None


def _unpacked(module, query, key, value, mask, scaling, dropout, causal, window, softcap, sinks):
    """One sequence per row with HF's mask (which already carries the sliding window)."""
    if softcap is None and sinks is None:
        from transformers.integrations.sdpa_attention import sdpa_attention_forward

        return sdpa_attention_forward(
            module, query, key, value, mask, scaling=scaling, dropout=dropout, is_causal=causal
        )
    s, k_len = query.shape[2], key.shape[2]
    if mask is None:  # HF skipped the mask (plain causal/bidirectional): build it, bottom-right aligned
        qi = torch.arange(s, device=query.device)[:, None] + (k_len - s)
        kj = torch.arange(k_len, device=query.device)[None, :]
        allowed = kj <= qi if causal else torch.ones(s, k_len, dtype=torch.bool, device=query.device)
        if window and causal:
            allowed = allowed & (qi - kj < int(window))
    elif mask.dtype == torch.bool:
        allowed = mask[..., :k_len]
    else:  # an additive float mask
        allowed = mask[..., :k_len] > torch.finfo(mask.dtype).min / 2
    scale = query.shape[-1] ** -0.5 if scaling is None else float(scaling)
    out = attend(query, key, value, allowed, scale, dropout if module.training else 0.0, softcap, sinks)
    return out.transpose(1, 2).contiguous(), None
