"""``ComputeCost``: a pack's training compute from plain numbers (FLOPs per token and per attended pair).

A sequence of ``l`` tokens costs ``per_token·l`` (the matmuls of every dense and active-expert weight:
2 FLOPs per weight per token forward, 6 with the backward) plus, per attention layer, ``per_pair`` FLOPs
for every (query, key) pair it attends to. A causal full-attention layer attends to ``l(l+1)/2`` pairs; a
sliding-window layer of window ``w`` (a query sees itself and the ``w - 1`` keys before it, HF's
``sliding_window`` convention) to ``Σ_i min(i+1, w)`` pairs. The numbers come from a model config outside
plan/ (``packwise.integrations.hf.model_cost``) or from the user; plan/ only does the arithmetic.

Source of the FLOP counts: Kaplan et al., "Scaling Laws for Neural Language Models" (2020), §2.1 —
``2·N`` forward FLOPs per token for ``N`` non-embedding weights, and ``2·d_attn`` per (query, key) pair and
layer for ``QKᵀ`` plus the same for ``AV``.
"""

from __future__ import annotations

import dataclasses

import numpy as np


def causal_pairs(lengths, window: int | None = None) -> np.ndarray:
    """``(n,)`` float64 (query, key) pairs a causal layer attends to for each length (window: keys a query sees).

    Raises:
        ValueError: a negative length or ``window < 1``.

    Example:
        >>> causal_pairs([1, 4, 6]).tolist(), causal_pairs([1, 4, 6], window=3).tolist()
        ([1.0, 10.0, 21.0], [1.0, 9.0, 15.0])
    """
    n = np.asarray(lengths, dtype=np.float64)
    if n.size and n.min() < 0:
        raise ValueError(f"lengths must be >= 0, got {n.min():.0f}")
    full = n * (n + 1) / 2
    if window is None:
        return full
    if isinstance(window, bool) or not isinstance(window, (int, np.integer)) or window < 1:
        raise ValueError(f"window must be an integer >= 1 (or None for full attention), got {window!r}")
    w = float(window)
    return np.where(n <= w, full, w * (w + 1) / 2 + (n - w) * w)


@dataclasses.dataclass(frozen=True)
class ComputeCost:
    """FLOPs of a pack from its sequences' lengths: ``per_token·Σl + Σ_layers per_pair·pairs(l)``.

    Attributes:
        per_token: FLOPs per token of the weight matmuls (dense plus active experts, lm_head included).
        per_pair: FLOPs per attended (query, key) pair of one attention layer (``4·heads·head_dim``, × 3 with
            the backward).
        full_layers: causal full-attention layers.
        window_layers: sliding-window layers (with ``window``).
        window: the sliding window in tokens (None when no layer slides).

    Calling it on a pack's ``(n,)`` lengths gives the pack's FLOPs (float); ``distribute(cost=...)`` takes it.

    Raises:
        ValueError: a negative number, a non-integer layer count, or window layers without a window.

    Example:
        >>> c = ComputeCost(per_token=10.0, per_pair=1.0, full_layers=1, window_layers=1, window=2)
        >>> c([3, 1])  # 10·4 + (6 + 1) + (5 + 1)
        53.0
    """

    per_token: float
    per_pair: float = 0.0
    full_layers: int = 0
    window_layers: int = 0
    window: int | None = None

    def __post_init__(self) -> None:
        for name in ("per_token", "per_pair"):
            v = getattr(self, name)
            if isinstance(v, bool) or not isinstance(v, (int, float, np.integer, np.floating)) or not v >= 0:
                raise ValueError(f"ComputeCost.{name} must be a number >= 0, got {v!r}")
        for name in ("full_layers", "window_layers"):
            v = getattr(self, name)
            if isinstance(v, bool) or not isinstance(v, (int, np.integer)) or v < 0:
                raise ValueError(f"ComputeCost.{name} must be an integer >= 0, got {v!r}")
        if self.window_layers and self.window is None:
            raise ValueError(f"ComputeCost has window_layers={self.window_layers} but window=None; give the window")
        if self.window is not None:
            causal_pairs([], self.window)  # validates it

    def __call__(self, lengths) -> float:
        n = np.asarray(lengths, dtype=np.float64)
        cost = self.per_token * float(n.sum())
        if self.per_pair and self.full_layers:
            cost += self.per_pair * self.full_layers * float(causal_pairs(n).sum())
        if self.per_pair and self.window_layers:
            cost += self.per_pair * self.window_layers * float(causal_pairs(n, self.window).sum())
        return cost
