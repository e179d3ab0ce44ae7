"""The plan: which sequences share a pack, in CSR form, and what it costs.

Notation used throughout packwise: ``N`` sequences, ``P`` packs, ``T`` tokens, ``C`` the capacity of a
pack in tokens.
"""

from __future__ import annotations

import hashlib
import math
from dataclasses import asdict, dataclass, field

import numpy as np


@dataclass(frozen=True)
class PackingMetrics:
    """How good a plan is, in tokens. Every field is a plain Python number.

    Baselines: *pad-to-longest* forms batches of ``batch_size`` sequences in input order and pads each
    to its longest sequence; *pad-to-capacity* pads every sequence to ``C``. Speed-ups count tokens
    processed, not FLOPs (attention cost grows faster than linearly).

    Attributes:
        num_sequences: N.
        num_packs: P.
        capacity: C, tokens per pack.
        total_tokens: real tokens, sum of lengths.
        total_cost: tokens after per-sequence alignment (== total_tokens when alignment is 1).
        utilisation: total_tokens / (P * C).
        waste_tokens: P * C - total_tokens.
        lower_bound_packs: L1 = ceil(total_cost / C); no plan can use fewer packs.
        excess_packs_pct: 100 * (P - L1) / L1.
        fill_min: least full pack, as a fraction of C.
        fill_mean: mean pack fill, as a fraction of C (== utilisation).
        fill_max: fullest pack, as a fraction of C.
        fill_balance: 1 - std / mean of pack fills (1.0 = all packs equally full).
        max_sequences_in_pack: most sequences in one pack.
        batch_size: sequences per pad-to-longest batch (default round(N / P): as many sequences per
            step as one pack holds on average).
        pad_to_longest_tokens: tokens processed by the pad-to-longest baseline.
        pad_to_capacity_tokens: N * C.
        padding_avoided_vs_longest: pad_to_longest_tokens - P * C (may be negative on tiny inputs).
        padding_avoided_vs_capacity: (N - P) * C.
        speedup_vs_longest: pad_to_longest_tokens / (P * C).
        speedup_vs_capacity: N / P.
        speedup_ceiling: N * C / total_tokens = 1 / (1 - waste of pad-to-capacity) (Krell et al. 2021).
        speedup_ceiling_vs_longest: pad_to_longest_tokens / total_tokens.

    Example:
        >>> from packwise.plan import plan_packs
        >>> m = plan_packs([3, 7, 2, 5], capacity=8).metrics()
        >>> m.num_packs, m.lower_bound_packs, m.waste_tokens, round(m.utilisation, 4), m.speedup_vs_capacity
        (3, 3, 7, 0.7083, 1.333...)
    """

    num_sequences: int
    num_packs: int
    capacity: int
    total_tokens: int
    total_cost: int
    utilisation: float
    waste_tokens: int
    lower_bound_packs: int
    excess_packs_pct: float
    fill_min: float
    fill_mean: float
    fill_max: float
    fill_balance: float
    max_sequences_in_pack: int
    batch_size: int
    pad_to_longest_tokens: int
    pad_to_capacity_tokens: int
    padding_avoided_vs_longest: int
    padding_avoided_vs_capacity: int
    speedup_vs_longest: float
    speedup_vs_capacity: float
    speedup_ceiling: float
    speedup_ceiling_vs_longest: float

    def to_dict(self) -> dict:
        """Plain ``dict`` for JSON."""
        return asdict(self)


def _ratio(a: float, b: float) -> float:
    return float(a) / float(b) if b else 0.0


def fill_metrics(
    *,
    num_sequences: int,
    capacity: int,
    total_tokens: int,
    total_cost: int,
    pack_length_counts,
    max_sequences_in_pack: int,
    batch_size: int,
    pad_to_longest_tokens: int,
) -> PackingMetrics:
    """:class:`PackingMetrics` from sums and the ``(C+1,)`` histogram of real tokens per pack.

    The fill statistics are computed in exact integer arithmetic from the histogram (one rounding at the
    end), so a plan expanded from templates and one built sequence by sequence report the same floats.
    """
    counts = [int(c) for c in np.asarray(pack_length_counts).tolist()]
    n = num_sequences
    p = sum(counts)
    s1 = sum(v * c for v, c in enumerate(counts) if c)
    s2 = sum(v * v * c for v, c in enumerate(counts) if c)
    used = [v for v, c in enumerate(counts) if c]
    slots = p * capacity
    lower = math.ceil(total_cost / capacity)
    pad_longest = pad_to_longest_tokens
    return PackingMetrics(
        num_sequences=n,
        num_packs=p,
        capacity=capacity,
        total_tokens=total_tokens,
        total_cost=total_cost,
        utilisation=_ratio(total_tokens, slots),
        waste_tokens=slots - total_tokens,
        lower_bound_packs=lower,
        excess_packs_pct=100.0 * _ratio(p - lower, lower),
        fill_min=used[0] / capacity if p else 0.0,
        fill_mean=s1 / slots if p else 0.0,
        fill_max=used[-1] / capacity if p else 0.0,
        fill_balance=1.0 - math.sqrt(p * s2 - s1 * s1) / s1 if p and s1 else 0.0,
        max_sequences_in_pack=max_sequences_in_pack,
        batch_size=batch_size,
        pad_to_longest_tokens=pad_longest,
        pad_to_capacity_tokens=n * capacity,
        padding_avoided_vs_longest=pad_longest - slots,
        padding_avoided_vs_capacity=(n - p) * capacity,
        speedup_vs_longest=_ratio(pad_longest, slots),
        speedup_vs_capacity=_ratio(n, p),
        speedup_ceiling=_ratio(n * capacity, total_tokens),
        speedup_ceiling_vs_longest=_ratio(pad_longest, total_tokens),
    )


@dataclass(frozen=True, eq=False)
class PackPlan:
    """Which sequences share a pack: CSR over sequence indices, cheap for 10 M sequences.

    Attributes:
        order: ``(N,)`` int64, sequence indices in pack order.
        offsets: ``(P+1,)`` int64, pack ``p`` holds ``order[offsets[p]:offsets[p+1]]``; ``offsets[0] == 0``,
            ``offsets[-1] == N``; no pack is empty.
        lengths: ``(N,)`` int64, real tokens per sequence, indexed by sequence.
        capacity: C, tokens per pack.
        algorithm: canonical name of the algorithm that made the plan.
        seed: the seed used, or None for deterministic algorithms.
        alignment: every sequence was planned at ``ceil(length / alignment) * alignment`` tokens.

    Example:
        >>> from packwise.plan import plan_packs
        >>> plan = plan_packs([6, 5, 4, 3, 2], capacity=10, algorithm="greedy_knapsack")
        >>> [p.tolist() for p in plan.packs()]
        [[0, 2], [1, 3, 4]]
        >>> plan.pack_lengths().tolist(), plan.num_packs
        ([10, 10], 2)
    """

    order: np.ndarray
    offsets: np.ndarray
    lengths: np.ndarray
    capacity: int
    algorithm: str
    seed: int | None = None
    alignment: int = 1
    _cache: dict = field(default_factory=dict, repr=False, compare=False)

    def __post_init__(self) -> None:
        for name in ("order", "offsets", "lengths"):
            view = getattr(self, name).view()
            view.flags.writeable = False
            object.__setattr__(self, name, view)

    @property
    def num_packs(self) -> int:
        """P."""
        return int(self.offsets.shape[0] - 1)

    @property
    def num_sequences(self) -> int:
        """N."""
        return int(self.order.shape[0])

    def __len__(self) -> int:
        return self.num_packs

    def packs(self) -> list[np.ndarray]:
        """The sequence indices of each pack: a list of P int64 arrays (views into ``order``)."""
        return np.split(self.order, self.offsets[1:-1]) if self.num_packs else []

    def pack_sizes(self) -> np.ndarray:
        """``(P,)`` int64, sequences per pack."""
        return np.diff(self.offsets)

    def pack_index(self) -> np.ndarray:
        """``(N,)`` int64, the pack of each sequence (indexed by sequence)."""
        out = np.empty(self.num_sequences, dtype=np.int64)
        out[self.order] = np.repeat(np.arange(self.num_packs, dtype=np.int64), self.pack_sizes())
        return out

    def costs(self) -> np.ndarray:
        """``(N,)`` int64, tokens each sequence occupies after alignment."""
        if self.alignment == 1:
            return self.lengths
        a = self.alignment
        return (self.lengths + (a - 1)) // a * a

    def pack_lengths(self) -> np.ndarray:
        """``(P,)`` int64, real tokens per pack."""
        return self._pack_sum(self.lengths)

    def pack_costs(self) -> np.ndarray:
        """``(P,)`` int64, tokens per pack after alignment (each <= capacity)."""
        return self._pack_sum(self.costs())

    def _pack_sum(self, values: np.ndarray) -> np.ndarray:
        if not self.num_packs:
            return np.zeros(0, dtype=np.int64)
        return np.add.reduceat(values[self.order], self.offsets[:-1]).astype(np.int64)

    def metrics(self, *, batch_size: int | None = None) -> PackingMetrics:
        """Utilisation, lower bound and padding baselines of this plan (see :class:`PackingMetrics`).

        Args:
            batch_size: sequences per batch of the pad-to-longest baseline; default round(N / P).

        Raises:
            ValueError: ``batch_size < 1``.
        """
        if batch_size is not None and batch_size < 1:
            raise ValueError(f"batch_size must be >= 1, got {batch_size}")
        key = ("metrics", batch_size)
        if key in self._cache:
            return self._cache[key]
        n, p, capacity = self.num_sequences, self.num_packs, self.capacity
        bs = batch_size or (max(1, round(n / p)) if p else 1)
        if n:
            starts = np.arange(0, n, bs)
            longest = np.maximum.reduceat(self.lengths, starts)
            rows = np.minimum(bs, n - starts)
            pad_longest = int((longest * rows).sum())
        else:
            pad_longest = 0
        m = fill_metrics(
            num_sequences=n, capacity=capacity, total_tokens=int(self.lengths.sum()),
            total_cost=int(self.costs().sum()),
            pack_length_counts=np.bincount(self.pack_lengths(), minlength=capacity + 1),
            max_sequences_in_pack=int(self.pack_sizes().max()) if p else 0, batch_size=bs,
            pad_to_longest_tokens=pad_longest,
        )  # fmt: skip
        self._cache[key] = m
        return m

    def plan_hash(self) -> str:
        """Stable SHA-256 (hex) of capacity, alignment, lengths and pack membership and order.

        Two plans with the same hash put the same sequences in the same packs in the same order,
        whatever algorithm produced them. Stable across platforms and numpy versions.

        Example:
            >>> from packwise.plan import plan_packs
            >>> a = plan_packs([3, 1], capacity=4, algorithm="bfd")
            >>> a.plan_hash() == plan_packs([3, 1], capacity=4, algorithm="ffd").plan_hash()
            True
        """
        if "hash" not in self._cache:
            h = hashlib.sha256(b"packwise-plan-v1")
            h.update(np.asarray([self.capacity, self.alignment], dtype="<i8").tobytes())
            for arr in (self.lengths, self.order, self.offsets):
                h.update(np.asarray([arr.shape[0]], dtype="<i8").tobytes())
                h.update(np.ascontiguousarray(arr, dtype="<i8").tobytes())
            self._cache["hash"] = h.hexdigest()
        return self._cache["hash"]
