"""Every CPU attention backend against a per-document float64 reference written from the definition."""

from __future__ import annotations

import math

import pytest
import torch

from packwise.attention import available_backends, varlen_attention


def reference(q, k, v, cu_q, cu_k, causal, scale):
    """softmax(q k^T * scale + mask) v, document by document, in float64, bottom-right causal."""
    out = torch.zeros(q.shape, dtype=torch.float64)
    groups = q.shape[1] // k.shape[1]
    for i in range(len(cu_q) - 1):
        q0, q1, k0, k1 = cu_q[i], cu_q[i + 1], cu_k[i], cu_k[i + 1]
        for h in range(q.shape[1]):
            qq = q[q0:q1, h].double()
            kk = k[k0:k1, h // groups].double()
            vv = v[k0:k1, h // groups].double()
            s = qq @ kk.T * scale
            if causal:
                lq, lk = q1 - q0, k1 - k0
                allowed = torch.arange(lk)[None, :] <= torch.arange(lq)[:, None] + (lk - lq)
                s = s.masked_fill(~allowed, float("-inf"))
            p = torch.softmax(s, dim=-1).nan_to_num(0.0)
            out[q0:q1, h] = p @ vv
    return out


CASES = [
    ("three docs", [0, 5, 12, 20], [0, 5, 12, 20]),
    ("one doc", [0, 9], [0, 9]),
    ("zero-length tail segment", [0, 6, 11, 11], [0, 6, 11, 11]),
    ("shorter queries than keys", [0, 2, 5], [0, 4, 9]),
]


@pytest.mark.parametrize("backend", [b for b in available_backends("cpu")])
@pytest.mark.parametrize(("name", "cu_q", "cu_k"), CASES, ids=[c[0] for c in CASES])
@pytest.mark.parametrize("heads", [(4, 4), (4, 2), (6, 1)], ids=["mha", "gqa2", "mqa"])
@pytest.mark.parametrize("causal", [True, False])
def test_backend_matches_reference(backend, name, cu_q, cu_k, heads, causal):
    torch.manual_seed(0)
    h, hkv = heads
    q = torch.randn(cu_q[-1], h, 8)
    k = torch.randn(cu_k[-1], hkv, 8)
    v = torch.randn(cu_k[-1], hkv, 8)
    scale = 1 / math.sqrt(8)
    out = varlen_attention(
        q, k, v, cu_seqlens_q=torch.tensor(cu_q), cu_seqlens_k=torch.tensor(cu_k),
        max_seqlen_q=max(b - a for a, b in zip(cu_q, cu_q[1:])), max_seqlen_k=max(b - a for a, b in zip(cu_k, cu_k[1:])),
        causal=causal, backend=backend,
    )  # fmt: skip
    assert out.shape == q.shape and out.dtype == q.dtype
    assert (out.double() - reference(q, k, v, cu_q, cu_k, causal, scale)).abs().max() <= 1e-6


def test_auto_on_cpu_is_sdpa_and_gradients_flow():
    q = torch.randn(7, 2, 4, requires_grad=True)
    cu = torch.tensor([0, 3, 7])
    out = varlen_attention(q, q, q, cu_seqlens_q=cu, cu_seqlens_k=cu, max_seqlen_q=4, max_seqlen_k=4)
    out.sum().backward()
    assert q.grad is not None and q.grad.shape == q.shape


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"backend": "nope"}, "unknown attention backend 'nope'"),
        ({"backend": "flash"}, "needs CUDA, fp16/bf16"),
        ({"cu_seqlens_q": torch.tensor([0, 3, 6])}, "cu_seqlens_q must be (N+1,) from 0 to 7 tokens"),
        ({"cu_seqlens_q": torch.tensor([0, 5, 3, 7])}, "must be non-decreasing"),
    ],
)
def test_validation(kwargs, message):
    q = torch.randn(7, 2, 4)
    args = {
        "cu_seqlens_q": torch.tensor([0, 3, 7]),
        "cu_seqlens_k": torch.tensor([0, 3, 7]),
        "max_seqlen_q": 4,
        "max_seqlen_k": 4,
    }
    args.update(kwargs)
    if "cu_seqlens_q" in kwargs and kwargs["cu_seqlens_q"].shape[0] == 4 and "non-decreasing" in message:
        args["cu_seqlens_k"] = torch.tensor([0, 5, 3, 7])
    with pytest.raises(ValueError) as info:
        varlen_attention(q, q, q, **args)
    assert message in str(info.value)


def test_flex_refuses_backward_on_cpu():
    q = torch.randn(4, 2, 4, requires_grad=True)
    cu = torch.tensor([0, 4])
    with pytest.raises(ValueError, match="no backward on CPU"):
        varlen_attention(q, q, q, cu_seqlens_q=cu, cu_seqlens_k=cu, max_seqlen_q=4, max_seqlen_k=4, backend="flex")


def reference_features(q, k, v, cu, scale, window, softcap, sinks):
    """Per document, float64, from the definitions: causal, i - j < window, softcap·tanh(s/softcap), sink logit."""
    out = torch.zeros(q.shape, dtype=torch.float64)
    groups = q.shape[1] // k.shape[1]
    for a, b in zip(cu, cu[1:]):
        for h in range(q.shape[1]):
            s = q[a:b, h].double() @ k[a:b, h // groups].double().T * scale
            if softcap:
                s = softcap * torch.tanh(s / softcap)
            i, j = torch.arange(b - a)[:, None], torch.arange(b - a)[None, :]
            allowed = (j <= i) & ((i - j < window) if window else True)
            s = s.masked_fill(~allowed, float("-inf"))
            if sinks is not None:
                s = torch.cat([s, torch.full((b - a, 1), float(sinks[h]), dtype=torch.float64)], dim=1)
                p = torch.softmax(s, dim=-1)[:, :-1]
            else:
                p = torch.softmax(s, dim=-1)
            out[a:b, h] = p @ v[a:b, h // groups].double()
    return out


@pytest.mark.parametrize(
    ("window", "softcap", "sinks"),
    [(3, None, None), (None, 2.0, None), (None, None, True), (4, 2.0, True)],
    ids=["window", "softcap", "sinks", "all"],
)
def test_features_match_reference(window, softcap, sinks):
    torch.manual_seed(0)
    cu = [0, 5, 12, 20]
    q, k, v = torch.randn(20, 4, 8), torch.randn(20, 2, 8), torch.randn(20, 2, 8)
    sink = torch.randn(4) if sinks else None
    expected = reference_features(q, k, v, cu, 0.3, window, softcap, sink)
    for backend in available_backends("cpu"):
        kwargs = dict(cu_seqlens_q=torch.tensor(cu), cu_seqlens_k=torch.tensor(cu), max_seqlen_q=8, max_seqlen_k=8)
        args = dict(scale=0.3, backend=backend, window=window, softcap=softcap, sinks=sink)
        if (softcap or sinks) and backend != "dense":
            with pytest.raises(ValueError, match=f"attention backend '{backend}' cannot honour"):
                varlen_attention(q, k, v, **kwargs, **args)
            continue
        out = varlen_attention(q, k, v, **kwargs, **args)
        assert (out.double() - expected).abs().max() <= 1e-5, backend
    auto = varlen_attention(q, k, v, **kwargs, scale=0.3, window=window, softcap=softcap, sinks=sink)
    assert (auto.double() - expected).abs().max() <= 1e-5
