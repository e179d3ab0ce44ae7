"""``varlen_attention``: attention over packed documents that never crosses a document boundary.

Shapes: ``q (T_q, H, D)``, ``k, v (T_k, H_kv, D)`` with ``H % H_kv == 0`` (grouped-query attention); the
``N`` documents are ``cu_seqlens_q/k`` ``(N+1,)`` (int, cumulative, starting at 0). A causal mask is
bottom-right aligned inside each document (flash-attention's convention; for self-attention it is the
usual lower triangle). Zero-length documents are allowed (tail padding segments).

Backends (all exact; each is tested against a per-document float64 reference):

==============  ======  ========================================================================
backend         device  how
==============  ======  ========================================================================
flash           CUDA    ``flash_attn.flash_attn_varlen_func`` (Dao et al.), fp16/bf16
torch_varlen    CUDA    ``torch.nn.attention.varlen.varlen_attn`` (torch's flash kernel)
flex            any     ``flex_attention`` with a document ``BlockMask`` (eager on CPU: slow)
sdpa            any     ``scaled_dot_product_attention`` once per document (no cross-document work)
dense           any     one matmul with an additive float block-diagonal mask (eager math, O(T²))
==============  ======  ========================================================================

``auto`` picks flash, then torch_varlen on CUDA with fp16/bf16, else sdpa (fastest correct CPU
backend measured in ``benchmarks/bench_train.py``); with logit softcapping or attention sinks it picks
flash (softcap only) or dense, the backends that honour them.

Attention features, per backend (a backend that cannot honour one raises ``ValueError`` naming it):

=============  =====  ============  =====  ====  =====
feature        flash  torch_varlen  flex   sdpa  dense
=============  =====  ============  =====  ====  =====
``window``     yes    yes           yes    yes   yes
``softcap``    yes    no            no     no    yes
``sinks``      no     no            no     no    yes
=============  =====  ============  =====  ====  =====

``window`` is transformers' sliding window: a query at position ``i`` sees keys ``j`` with
``i - j < window`` (flash's ``window_size=(window - 1, 0)``). ``softcap`` is Gemma-2's
``softcap * tanh(scores / softcap)`` before the mask; ``sinks`` (gpt-oss) is one extra logit per head that
joins the softmax and is dropped after it.
"""

from __future__ import annotations

import importlib.util
import math
import operator
import warnings
from typing import Literal, cast, get_args

import torch
import torch.nn.functional as F

Backend = Literal["auto", "flash", "torch_varlen", "flex", "sdpa", "dense"]
BACKENDS: tuple[str, ...] = get_args(Backend)
#: Which backends honour each optional attention feature (see the module docstring).
FEATURES: dict[str, tuple[str, ...]] = {
    "window": ("flash", "torch_varlen", "flex", "sdpa", "dense"),
    "softcap": ("flash", "dense"),
    "sinks": ("dense",),
}


def resolve_backend(backend: Backend, device, dtype, *, softcap: bool = False, sinks: bool = False) -> Backend:
    """The concrete backend ``auto`` means here for these features (other names are returned as given).

    Example:
        >>> resolve_backend("auto", "cpu", torch.float32), resolve_backend("auto", "cpu", torch.float32, sinks=True)
        ('sdpa', 'dense')
    """
    if backend != "auto":
        return backend
    avail = available_backends(device, dtype)
    if sinks:
        return "dense"
    if softcap:
        return "flash" if "flash" in avail else "dense"
    return "flash" if "flash" in avail else "torch_varlen" if "torch_varlen" in avail else "sdpa"


def available_backends(device: torch.device | str = "cpu", dtype: torch.dtype = torch.float32) -> list[str]:
    """Backends that can run on ``device`` with ``dtype`` here (``auto`` excluded).

    Example:
        >>> available_backends("cpu")
        ['flex', 'sdpa', 'dense']
    """
    try:
        device = torch.device(device)
    except RuntimeError as e:
        raise ValueError(f"unknown device {device!r} ({e}); use 'cpu' or 'cuda'") from None
    out = []
    half = dtype in (torch.float16, torch.bfloat16)
    if device.type == "cuda" and half and importlib.util.find_spec("flash_attn") is not None:
        out.append("flash")
    if device.type == "cuda" and half and importlib.util.find_spec("torch.nn.attention.varlen") is not None:
        out.append("torch_varlen")
    return [*out, "flex", "sdpa", "dense"]


def _check(q, k, v, cu_q, cu_k) -> None:
    if q.dim() != 3 or k.dim() != 3 or v.dim() != 3:
        raise ValueError(f"q, k, v must be (T, H, D); got {tuple(q.shape)}, {tuple(k.shape)}, {tuple(v.shape)}")
    if k.shape != v.shape or q.shape[-1] != k.shape[-1]:
        raise ValueError(f"k {tuple(k.shape)} and v {tuple(v.shape)} must match, with q's head dim {q.shape[-1]}")
    if k.shape[1] == 0 or q.shape[1] == 0:
        raise ValueError(f"q has {q.shape[1]} heads and k/v {k.shape[1]}; both need at least one")
    if q.shape[1] % k.shape[1]:
        raise ValueError(f"{q.shape[1]} query heads are not a multiple of {k.shape[1]} key/value heads")
    for name, cu, t in (("cu_seqlens_q", cu_q, q.shape[0]), ("cu_seqlens_k", cu_k, k.shape[0])):
        if cu.dim() != 1 or cu.shape[0] < 2 or int(cu[0]) != 0 or int(cu[-1]) != t:
            raise ValueError(f"{name} must be (N+1,) from 0 to {t} tokens, got {cu.tolist()}")
        if bool((cu.diff() < 0).any()):
            raise ValueError(f"{name} must be non-decreasing, got {cu.tolist()}")
    if cu_q.shape != cu_k.shape:
        raise ValueError(f"cu_seqlens_q has {cu_q.shape[0] - 1} documents, cu_seqlens_k {cu_k.shape[0] - 1}")


def varlen_attention(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    *,
    cu_seqlens_q: torch.Tensor,
    cu_seqlens_k: torch.Tensor,
    max_seqlen_q: int,
    max_seqlen_k: int,
    causal: bool = True,
    scale: float | None = None,
    backend: Backend = "auto",
    dropout_p: float = 0.0,
    window: int | None = None,
    softcap: float | None = None,
    sinks: torch.Tensor | None = None,
) -> torch.Tensor:
    """Attention of every document with itself only.

    Args:
        q: ``(T_q, H, D)`` queries.
        k: ``(T_k, H_kv, D)`` keys; ``H`` must be a multiple of ``H_kv``.
        v: ``(T_k, H_kv, D)`` values.
        cu_seqlens_q: ``(N+1,)`` cumulative query lengths (tokens), ``[0, ..., T_q]``.
        cu_seqlens_k: ``(N+1,)`` cumulative key lengths, ``[0, ..., T_k]``.
        max_seqlen_q: longest query document (tokens; used by the flash kernels).
        max_seqlen_k: longest key document.
        causal: lower-triangular (bottom-right aligned) inside each document.
        scale: softmax scale; default ``1 / sqrt(D)``.
        backend: see the module docstring.
        dropout_p: attention dropout (``flex`` supports none; ``flex`` has no backward on CPU).
        window: sliding window in tokens (``i - j < window``; causal only); None: no window.
        softcap: logit soft-capping value (Gemma-2); None or 0: none.
        sinks: ``(H,)`` attention-sink logits (gpt-oss); None: none.

    Returns:
        ``(T_q, H, D)`` in ``q``'s dtype.

    Raises:
        ValueError: bad shapes or boundaries, an unknown backend, a backend unavailable here, a feature
            (``window``, ``softcap``, ``sinks``) the backend does not honour, or a ``max_seqlen_*`` that is not an
            integer >= 1 or (with CPU ``cu_seqlens``, checked without a device sync) below the longest document.

    Example:
        >>> q = k = v = torch.randn(5, 2, 4)
        >>> cu = torch.tensor([0, 2, 5])
        >>> out = varlen_attention(q, k, v, cu_seqlens_q=cu, cu_seqlens_k=cu, max_seqlen_q=3, max_seqlen_k=3)
        >>> torch.allclose(out[:2], varlen_attention(q[:2], k[:2], v[:2], cu_seqlens_q=cu[:2], cu_seqlens_k=cu[:2],
        ...                                          max_seqlen_q=2, max_seqlen_k=2), atol=1e-6)
        True
    """
    if backend not in BACKENDS:
        raise ValueError(f"unknown attention backend {backend!r}; use one of {', '.join(BACKENDS)}")
    cu_seqlens_q, cu_seqlens_k = torch.as_tensor(cu_seqlens_q), torch.as_tensor(cu_seqlens_k)
    for name, cu in (("cu_seqlens_q", cu_seqlens_q), ("cu_seqlens_k", cu_seqlens_k)):
        if cu.is_floating_point() or cu.dtype == torch.bool:
            raise TypeError(f"{name} must hold integers (token offsets), got dtype {cu.dtype}")
    _check(q, k, v, cu_seqlens_q, cu_seqlens_k)
    for name, value, cu in (("max_seqlen_q", max_seqlen_q, cu_seqlens_q), ("max_seqlen_k", max_seqlen_k, cu_seqlens_k)):
        value = _max_seqlen(name, value)
        if cu.device.type == "cpu" and cu.numel() > 1 and value < (longest := int(cu.diff().max())):
            # the flash kernels size their grid by it: an under-reported value leaves tokens uncomputed
            raise ValueError(f"{name}={value} but the longest document in {name.replace('max_seqlen', 'cu_seqlens')} "
                             f"has {longest} tokens; pass at least {longest}")  # fmt: skip
    scale = 1.0 / math.sqrt(q.shape[-1]) if scale is None else float(scale)
    softcap = float(softcap) if softcap else None
    if window is not None:  # an int or a numpy int; not a bool, float or string
        if (n := _index(window)) is None:
            raise TypeError(f"window={window!r} is a {type(window).__name__}; give an integer (tokens) or None")
        window = n
    if window is not None and (window < 1 or not causal):
        raise ValueError(f"window {window}: a sliding window must be >= 1 tokens and causal")
    if sinks is not None and tuple(sinks.shape) != (q.shape[1],):
        raise ValueError(f"sinks must be ({q.shape[1]},) — one logit per query head — got {tuple(sinks.shape)}")
    backend = resolve_backend(backend, q.device, q.dtype, softcap=softcap is not None, sinks=sinks is not None)
    features: tuple[tuple[str, object], ...] = (("window", window), ("softcap", softcap), ("sinks", sinks))
    for feature, setting in features:
        if setting is not None and backend not in FEATURES[feature]:
            raise ValueError(
                f"attention backend {backend!r} cannot honour {feature}; use one of {', '.join(FEATURES[feature])}"
            )
    if backend in ("flash", "torch_varlen") and backend not in available_backends(q.device, q.dtype):
        raise ValueError(f"attention backend {backend!r} needs CUDA, fp16/bf16 and its package; use 'sdpa' here")
    cu_q = cu_seqlens_q.to(device=q.device, dtype=torch.int32)
    cu_k = cu_seqlens_k.to(device=q.device, dtype=torch.int32)
    if backend == "flash":
        from flash_attn import flash_attn_varlen_func

        return flash_attn_varlen_func(
            q, k, v, cu_q, cu_k, int(max_seqlen_q), int(max_seqlen_k), dropout_p, softmax_scale=scale, causal=causal,
            window_size=(-1, -1) if window is None else (int(window) - 1, 0), softcap=softcap or 0.0,
        )  # fmt: skip
    if backend == "torch_varlen":
        from torch.nn.attention.varlen import varlen_attn

        span = (-1, 0) if window is None else (int(window) - 1, 0)
        out = varlen_attn(
            q, k, v, cu_q, cu_k, int(max_seqlen_q), int(max_seqlen_k), scale=scale,
            window_size=span if causal else (-1, -1),
            enable_gqa=q.shape[1] != k.shape[1],
        )  # fmt: skip
        return cast(torch.Tensor, out)  # a (out, aux) tuple only with return_aux=, which is not passed
    if backend == "sdpa":
        return _sdpa(q, k, v, cu_q.tolist(), cu_k.tolist(), causal, scale, dropout_p, window)
    if backend == "dense":
        return _dense(q, k, v, cu_q, cu_k, causal, scale, dropout_p, window, softcap, sinks)
    if dropout_p:
        raise ValueError("backend 'flex' has no attention dropout; use 'sdpa' or 'dense' in training with dropout")
    if q.device.type == "cpu" and torch.is_grad_enabled() and (q.requires_grad or k.requires_grad or v.requires_grad):
        raise ValueError("flex_attention has no backward on CPU (torch limitation); use backend 'sdpa' to train here")
    return _flex(q, k, v, cu_q, cu_k, causal, scale, window)


def _index(value) -> int | None:
    """``value`` as an int (Python, numpy or a one-element integer tensor), else None (bool, float, str...)."""
    if isinstance(value, bool):
        return None
    try:
        return operator.index(value)
    except TypeError:
        return None


def _max_seqlen(name: str, value) -> int:
    """An int >= 1; bools, floats and 0 are refused."""
    if (n := _index(value)) is None or n < 1:
        raise ValueError(f"{name}={value!r} must be an integer >= 1 (tokens of the longest document)")
    return n


def _gqa(k: torch.Tensor, groups: int, dim: int) -> torch.Tensor:
    return k if groups == 1 else k.repeat_interleave(groups, dim=dim)


def _sdpa(q, k, v, cu_q: list[int], cu_k: list[int], causal, scale, dropout_p, window=None) -> torch.Tensor:
    """One SDPA call per document, laid out exactly as transformers' own SDPA path ``(1, H, L, D)`` with
    ``enable_gqa`` — so a packed document runs the same kernel as the document alone."""
    out = torch.empty_like(q)
    gqa = q.shape[1] != k.shape[1]
    for (q0, q1), (k0, k1) in zip(zip(cu_q, cu_q[1:]), zip(cu_k, cu_k[1:])):
        if q1 == q0:
            continue
        qs = q[q0:q1].transpose(0, 1)[None]
        ks = k[k0:k1].transpose(0, 1)[None]
        vs = v[k0:k1].transpose(0, 1)[None]
        mask, is_causal = None, causal and (q1 - q0) > 1
        if causal and ((q1 - q0) != (k1 - k0) or (window is not None and window < k1 - k0)):
            # bottom-right causal for unequal lengths, and/or a sliding window that binds
            qi = torch.arange(q1 - q0, device=q.device)[:, None] + (k1 - k0) - (q1 - q0)
            kj = torch.arange(k1 - k0, device=q.device)[None, :]
            mask = kj <= qi
            if window is not None:
                mask &= qi - kj < window
            is_causal = False
        if gqa and mask is not None:
            ks, vs = _gqa(ks, q.shape[1] // k.shape[1], 1), _gqa(vs, q.shape[1] // k.shape[1], 1)
        o = F.scaled_dot_product_attention(
            qs, ks, vs, attn_mask=mask, dropout_p=dropout_p, is_causal=is_causal, scale=scale,
            enable_gqa=gqa and mask is None,
        )  # fmt: skip
        out[q0:q1] = o[0].transpose(0, 1)
    return out


def _doc_layout(cu: torch.Tensor, total: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Per token: document index and position from the document's end (0 = last token)."""
    lengths = cu.diff().to(torch.int64)
    doc = torch.repeat_interleave(torch.arange(lengths.shape[0], device=cu.device), lengths)
    from_end = cu[1:].to(torch.int64)[doc] - 1 - torch.arange(total, device=cu.device)
    return doc, from_end


def _dense(q, k, v, cu_q, cu_k, causal, scale, dropout_p, window=None, softcap=None, sinks=None) -> torch.Tensor:
    doc_q, end_q = _doc_layout(cu_q, q.shape[0])
    doc_k, end_k = _doc_layout(cu_k, k.shape[0])
    allowed = doc_q[:, None] == doc_k[None, :]
    if causal:
        allowed &= end_k[None, :] >= end_q[:, None]
    if window is not None:
        allowed &= end_k[None, :] - end_q[:, None] < window
    out = attend(q.transpose(0, 1), k.transpose(0, 1), v.transpose(0, 1), allowed, scale, dropout_p, softcap, sinks)
    return out.transpose(0, 1).contiguous()


def attend(q, k, v, allowed, scale: float, dropout_p: float = 0.0, softcap=None, sinks=None) -> torch.Tensor:
    """Dense masked attention ``softmax(cap(q k^T * scale) | allowed [, sink]) v`` in float32 math.

    ``q (..., H, S, D)``, ``k, v (..., H_kv, K, D)``, ``allowed`` a bool mask broadcastable to
    ``(..., H, S, K)``; returns ``(..., H, S, D)`` in ``q``'s dtype. Rows with no allowed key give 0.

    Example:
        >>> q = torch.randn(2, 3, 4)
        >>> attend(q, q, q, torch.ones(3, 3, dtype=torch.bool), 0.5).shape
        torch.Size([2, 3, 4])
    """
    groups = q.shape[-3] // k.shape[-3]
    kk, vv = _gqa(k, groups, -3), _gqa(v, groups, -3)
    scores = torch.matmul(q, kk.transpose(-1, -2)).float() * scale
    if softcap:
        scores = torch.tanh(scores / softcap) * softcap
    scores = scores.masked_fill(~allowed, float("-inf"))
    if sinks is not None:
        sink = sinks.float().reshape(-1, 1, 1).expand(*scores.shape[:-1], 1)
        scores = torch.cat([scores, sink], dim=-1)
        scores = scores - scores.max(dim=-1, keepdim=True).values
        probs = torch.softmax(scores, dim=-1)[..., :-1]
    else:
        probs = torch.softmax(scores, dim=-1).nan_to_num(0.0)
    probs = probs.to(q.dtype)
    if dropout_p:
        probs = F.dropout(probs, p=dropout_p)
    return torch.matmul(probs, vv)


def _flex(q, k, v, cu_q, cu_k, causal, scale, window=None) -> torch.Tensor:
    from torch.nn.attention.flex_attention import create_block_mask, flex_attention

    doc_q, end_q = _doc_layout(cu_q, q.shape[0])
    doc_k, end_k = _doc_layout(cu_k, k.shape[0])

    def mask_mod(b, h, qi, ki):
        same = doc_q[qi] == doc_k[ki]
        if window is not None:
            same = same & (end_k[ki] - end_q[qi] < window)
        return same & (end_k[ki] >= end_q[qi]) if causal else same

    block = create_block_mask(mask_mod, None, None, q.shape[0], k.shape[0], device=q.device)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # eager flex on CPU warns that it is not compiled
        out = flex_attention(
            q.transpose(0, 1)[None], k.transpose(0, 1)[None], v.transpose(0, 1)[None], block_mask=block,
            scale=scale, enable_gqa=q.shape[1] != k.shape[1],
        )  # fmt: skip
    return out[0].transpose(0, 1).contiguous()
