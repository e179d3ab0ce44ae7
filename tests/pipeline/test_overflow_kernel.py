"""One overflow kernel (``packwise.pipeline.cut_points``): the offline pipeline (text and media), ``PackingStream``
and the Energon mixin cut an over-long sample at the same points and count the same tokens and media."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from packwise.pipeline import Samples, apply_overflow, cut_points

IMG, VS, VE, TEXT = 151655, 151652, 151653, 7
POLICIES = ("truncate", "split", "drop")


@st.composite
def cases(draw):
    """``(n, limit, policy, spans, loss)``: image blocks ``[VS, IMG×k, VE]`` (3+ tokens) that do not overlap."""
    n = draw(st.integers(1, 60))
    limit = draw(st.integers(1, 30))
    policy = draw(st.sampled_from(POLICIES))
    spans, at = [], 0
    while at < n and draw(st.booleans()):
        gap = draw(st.integers(0, 8))
        size = draw(st.integers(3, 12))
        if at + gap + size > n:
            break
        spans.append((at + gap, at + gap + size))
        at += gap + size
    loss = draw(st.lists(st.booleans(), min_size=n, max_size=n))
    return n, limit, policy, spans, loss


def _ids(n: int, spans) -> np.ndarray:
    ids = np.full(n, TEXT, dtype=np.int32)
    for s, e in spans:
        ids[s], ids[s + 1 : e - 1], ids[e - 1] = VS, IMG, VE
    return ids


def _labels(ids: np.ndarray, loss) -> np.ndarray:
    return np.where(np.asarray(loss, dtype=bool), ids, -100).astype(np.int32)


def _expected(n, limit, policy, spans, loss):
    """The kernel's cuts and the counts every caller must report from them."""
    cuts = cut_points(n, limit, policy, spans=spans)
    inside = [sum(1 for b, d in spans if s <= b and d <= e) for s, e in cuts]
    kept = sum(e - s for s, e in cuts)
    lost = n - kept
    loss_lost = sum(loss) - sum(sum(loss[s:e]) for s, e in cuts)
    return cuts, inside, len(spans) - sum(inside), lost, loss_lost


def _pipeline(n, limit, policy, spans, loss, *, media: bool):
    ids = _ids(n, spans)
    refs = [[(f"img{k}.png", (1, 2, 2 * (e - s - 2))) for k, (s, e) in enumerate(spans)]]
    samples = Samples(
        ids, _labels(ids, loss), np.array([0, n], dtype=np.int64), np.array([0], dtype=np.int64),
        media=refs if media else None,
    )  # fmt: skip
    return apply_overflow(samples, limit, policy, lambda i: f"row {i}")


@settings(max_examples=300, deadline=None)
@given(cases())
def test_kernel_cuts_tile_fit_and_never_enter_a_span(case):
    n, limit, policy, spans, _ = case
    cuts = cut_points(n, limit, policy, spans=spans)
    if n <= limit:
        assert cuts == [(0, n)]
        return
    if policy == "drop":
        assert cuts == []
        return
    for s, e in cuts:
        assert 0 < e - s <= limit and not any(b < e < d for b, d in spans if e < n)
    if not cuts:  # only a span longer than the limit blocks a cut
        assert any(e - s > limit for s, e in spans)
        return
    assert [s for s, _ in cuts] == [0, *[e for _, e in cuts[:-1]]]  # consecutive from 0
    if policy == "truncate":
        assert len(cuts) <= 1
    else:
        assert cuts[-1][1] == n  # split keeps every token or drops the sample


@settings(max_examples=200, deadline=None)
@given(cases())
def test_pipeline_with_and_without_media_follows_the_kernel(case):
    n, limit, policy, spans, loss = case
    cuts, inside, media_lost, lost, loss_lost = _expected(n, limit, policy, spans, loss)
    out, c = _pipeline(n, limit, policy, spans, loss, media=True)
    assert np.diff(out.offsets).tolist() == [e - s for s, e in cuts]
    assert out.ids.tolist() == [t for s, e in cuts for t in _ids(n, spans)[s:e].tolist()]
    assert [len(m) for m in out.media] == inside and c.images_dropped == media_lost
    over = n > limit
    dropped = over and not cuts
    assert (c.samples_dropped, c.tokens_dropped, c.loss_tokens_dropped) == ((1, n, sum(loss)) if dropped else (0, 0, 0))
    truncated = over and policy == "truncate" and bool(cuts)
    assert (c.samples_truncated, c.tokens_truncated, c.loss_tokens_truncated) == (
        (1, lost, loss_lost) if truncated else (0, 0, 0)
    )
    split = over and policy == "split" and bool(cuts)
    assert (c.samples_split, c.pieces_added) == ((1, len(cuts) - 1) if split else (0, 0))
    # the same sample read as text (no media): the kernel without spans
    text_cuts = cut_points(n, limit, policy)
    out, c = _pipeline(n, limit, policy, spans, loss, media=False)
    assert np.diff(out.offsets).tolist() == [e - s for s, e in text_cuts]
    assert c.tokens_truncated + c.tokens_dropped == n - sum(e - s for s, e in text_cuts)


@settings(max_examples=200, deadline=None)
@given(cases())
def test_stream_follows_the_kernel(case):
    from packwise.stream import PackingStream

    n, limit, policy, _, loss = case
    cuts = cut_points(n, limit, policy)
    stream = PackingStream([], capacity=limit, buffer_size=4, overflow=policy)
    ids = np.arange(n)
    pieces = stream._overflow({"input_ids": ids, "labels": _labels(ids, loss)}, 0, n)
    assert [p["input_ids"].tolist() for p in pieces] == [ids[s:e].tolist() for s, e in cuts]
    st_ = stream.stats
    removed = n - sum(e - s for s, e in cuts)
    assert st_.get("tokens_truncated", 0) + st_.get("tokens_dropped", 0) == removed
    assert st_.get("split", 0) == int(n > limit and policy == "split")


@settings(max_examples=100, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(cases())
@example((4, 3, "split", [(0, 3)], [True] * 4))  # split keeps the image in piece 1: nothing dropped (was 1)
def test_energon_agrees_with_the_pipeline(case):
    pytest.importorskip("megatron.energon")
    import torch

    n, limit, policy, spans, loss = case
    enc, sample = _energon(n, limit, policy, spans, loss)
    pieces, counts = enc._fit(sample, limit)
    out, c = _pipeline(n, limit, policy, spans, loss, media=True)
    bounds = out.offsets.tolist()
    assert [p["input_ids"].tolist() for p in pieces] == [out.ids[a:b].tolist() for a, b in zip(bounds, bounds[1:])]
    assert [int(torch.as_tensor(p.get("image_grid_thw", torch.zeros(0, 3))).shape[0]) for p in pieces] == [
        len(m) for m in out.media
    ]
    same = ("samples_truncated", "tokens_truncated", "loss_tokens_truncated", "samples_split", "pieces_added",
            "samples_dropped", "tokens_dropped", "loss_tokens_dropped")  # fmt: skip
    assert {k: counts[k] for k in same} == {k: getattr(c, k) for k in same}
    assert counts["media_dropped"] == c.images_dropped


def _energon(n, limit, policy, spans, loss):
    from dataclasses import make_dataclass

    import torch
    from megatron.energon import Sample, TaskEncoder

    from packwise import PackingConfig
    from packwise.integrations.energon import PackwiseTaskEncoderMixin

    class Enc(PackwiseTaskEncoderMixin, TaskEncoder):
        packing_config = PackingConfig(capacity=limit, labels="hf", buffer_size=8, overflow=policy)

        def packing_length(self, s):
            return len(s.input_ids)

    ids = _ids(n, spans)
    grids = [[1, 2, 2 * (e - s - 2)] for s, e in spans]  # t·h·w / merge² = the IMG tokens of the block
    TS = make_dataclass(
        "TS", [(f, object) for f in ("input_ids", "labels", "image_grid_thw", "pixel_values")], bases=(Sample,)
    )
    rows = sum(int(np.prod(g)) for g in grids)
    sample = TS(
        __key__="0", __restore_key__=(), __subflavors__={}, input_ids=torch.as_tensor(ids, dtype=torch.int64),
        labels=torch.as_tensor(_labels(ids, loss), dtype=torch.int64),
        image_grid_thw=torch.tensor(grids, dtype=torch.int64).reshape(-1, 3) if grids else None,
        pixel_values=torch.arange(float(rows))[:, None] if grids else None,
    )  # fmt: skip
    return Enc(), sample
