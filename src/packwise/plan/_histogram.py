"""``plan_histogram``: plan from ``counts[length]`` alone, as pack *templates*, in memory and time independent of N.

The histogram planners (FFD, BFD, MFFD, greedy knapsack, balanced greedy knapsack, SPFHP, LPFHP) never
look at single sequences (see ``_engine``): they place *events* — "each of the ``g`` packs ``b .. b+g-1``
receives ``k`` sequences of cost ``L``" — on groups of identical packs. The final groups are the templates.
Within one cost, :func:`plan_packs` hands sequences out by index ascending in event order, so the rank of a
sequence among the sequences of its cost decides its pack and slot:

    position s = (sequences of larger cost) + rank;  event e with ev_src[e] <= s < ev_src[e] + g·k;
    pack = ev_pack[e] + (s - ev_src[e]) // k  (served last to first for MFFD's backward pass);
    slot = ev_slot[e] + (s - ev_src[e]) % k.

A worker that holds a block of sequences in input order needs only the plan and, per cost, how many
sequences of that cost come before its block (``offsets``, from the per-block histograms). The expanded
placement is :func:`plan_packs`' plan element for element (same ``plan_hash``), including the
``min_packs`` / ``pack_count_multiple`` splits, which touch at most ``target - P`` packs and are kept as
exceptions to the templates.
"""

from __future__ import annotations

import hashlib
import math
from dataclasses import dataclass, field

import numpy as np

from ._plan import fill_metrics

_HASH_STEP = 1 << 18  # values per hash update (2 MiB as int64)


@dataclass(frozen=True, eq=False)
class HistogramPlan:
    """A plan as templates: ``template_packs[t]`` identical packs from pack ``template_start[t]`` on, each
    holding sequences of costs ``template_costs[template_offsets[t]:template_offsets[t+1]]`` in slot order.

    Attributes:
        counts: ``(C+1,)`` int64, sequences per real length (index = length in tokens).
        capacity: C. algorithm: canonical name. alignment: costs are lengths rounded up to this multiple.
        template_start, template_packs: ``(G,)`` int64, first pack and number of packs of each template,
            in pack order (templates cover packs ``0 .. P-1`` without gaps).
        template_offsets: ``(G+1,)`` int64; template_costs: ``(S,)`` int64, slot costs of each template.

    Example:
        >>> from packwise.plan import plan_histogram
        >>> hp = plan_histogram([0, 0, 2, 1, 0, 1], capacity=8)  # lengths 2, 2, 3, 5
        >>> hp.num_packs, hp.templates()
        (2, [(0, 1, [5, 3]), (1, 1, [2, 2])])
        >>> hp.place([3, 2, 5, 2])  # (pack, slot) of each sequence, in input order
        (array([0, 1, 0, 1]), array([1, 0, 0, 1]))
    """

    counts: np.ndarray
    capacity: int
    algorithm: str
    alignment: int
    template_start: np.ndarray
    template_packs: np.ndarray
    template_offsets: np.ndarray
    template_costs: np.ndarray
    _ev: dict = field(repr=False)  # src, pack, k, span (g*k), rev, slot: (E,) int64, sorted by src
    _splits: dict = field(repr=False)  # split packs: pack (K,), first (K+1,), then per (pack, slot): new pack, slot

    @property
    def num_packs(self) -> int:
        """P."""
        return int(self.template_packs.sum())

    @property
    def num_sequences(self) -> int:
        """N."""
        return int(self.counts.sum())

    @property
    def seed(self) -> None:
        """Histogram planners are deterministic: always None."""
        return None

    def templates(self) -> list[tuple[int, int, list[int]]]:
        """``[(first pack, packs, slot costs), ...]`` in pack order."""
        o = self.template_offsets
        return [
            (int(s), int(g), self.template_costs[o[t] : o[t + 1]].tolist())
            for t, (s, g) in enumerate(zip(self.template_start, self.template_packs))
        ]

    def costs_of(self, lengths) -> np.ndarray:
        """``(n,)`` int64 costs (lengths rounded up to ``alignment``)."""
        a = self.alignment
        arr = np.asarray(lengths, dtype=np.int64)
        return arr if a == 1 else (arr + (a - 1)) // a * a

    def block_offsets(self, block_counts) -> np.ndarray:
        """Per-cost offsets of consecutive blocks: ``(B, C+1)`` int64 from per-block *cost* counts ``(B, C+1)``
        (row ``b``: sequences of each cost in blocks ``0 .. b-1``)."""
        c = np.asarray(block_counts, dtype=np.int64)
        out = np.zeros_like(c)
        np.cumsum(c[:-1], axis=0, out=out[1:])
        return out

    def place(self, lengths, offsets=None) -> tuple[np.ndarray, np.ndarray]:
        """``(pack, slot)`` of each sequence of one block, from the plan alone.

        Args:
            lengths: ``(n,)`` real lengths of the block's sequences, in input order.
            offsets: ``(C+1,)`` int64, per cost, the sequences of that cost before this block (default 0:
                the block is the start of the input). See :meth:`block_offsets`.

        Returns:
            ``(pack, slot)``, two ``(n,)`` int64 arrays: pack index in ``[0, P)`` and position in the pack.
        """
        costs = self.costs_of(lengths)
        n = costs.shape[0]
        if n and (costs.min() < 1 or costs.max() > self.capacity):
            raise ValueError(f"lengths must be in [1, {self.capacity}] after alignment to {self.alignment}")
        order = np.argsort(costs, kind="stable")
        sc = costs[order]
        first = np.searchsorted(sc, sc, side="left")
        rank = np.empty(n, dtype=np.int64)
        rank[order] = np.arange(n, dtype=np.int64) - first
        if offsets is not None:
            rank += np.asarray(offsets, dtype=np.int64)[costs]
        s = self._above[costs] + rank
        ev = self._ev
        e = np.searchsorted(ev["src"], s, side="right") - 1
        d = s - ev["src"][e]
        if n and (d >= ev["span"][e]).any():
            raise ValueError("a block's offsets and lengths exceed the planned counts; pass the right offsets")
        k = ev["k"][e]
        b, j = np.divmod(d, k)
        g = ev["span"][e] // k
        b = np.where(ev["rev"][e] == 1, g - 1 - b, b)
        pack, slot = ev["pack"][e] + b, ev["slot"][e] + j
        return self._apply_splits(pack, slot)

    def _apply_splits(self, pack: np.ndarray, slot: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        sp = self._splits
        if not sp["pack"].shape[0]:
            return pack, slot
        split, extra = sp["pack"], sp["extra"]  # extra[i]: packs added by splits of packs split[:i]
        i = np.searchsorted(split, pack, side="left")
        hit = (i < split.shape[0]) & (split[np.minimum(i, split.shape[0] - 1)] == pack)
        new_pack = pack + extra[i]
        new_slot = slot.copy()
        if hit.any():
            h = np.flatnonzero(hit)
            row = sp["first"][i[h]] + slot[h]
            new_pack[h] += sp["piece"][row]
            new_slot[h] = sp["slot"][row]
        return new_pack, new_slot

    @property
    def _above(self) -> np.ndarray:
        return self._ev["above"]

    def pack_sizes(self, p0: int = 0, p1: int | None = None) -> np.ndarray:
        """``(p1-p0,)`` int64 sequences per pack for packs ``p0 .. p1-1`` (O(p1 - p0 + G))."""
        p1 = self.num_packs if p1 is None else p1
        per = np.diff(self.template_offsets)
        out = np.repeat(per, self.template_packs)[p0:p1] if p1 - p0 else np.zeros(0, np.int64)
        return out.astype(np.int64)

    def pack_offsets(self, packs) -> np.ndarray:
        """Plan position (``PackPlan.offsets[p]``) of each pack in ``packs`` (``P`` allowed: gives N); int64."""
        packs = np.asarray(packs, dtype=np.int64)
        size = np.diff(self.template_offsets)
        first = np.zeros(size.shape[0] + 1, dtype=np.int64)
        np.cumsum(size * self.template_packs, out=first[1:])
        t = np.maximum(np.searchsorted(self.template_start, packs, side="right") - 1, 0)
        if not size.shape[0]:
            return np.zeros(packs.shape, np.int64)
        return first[t] + (packs - self.template_start[t]) * size[t]

    def plan_hash(self, lengths_chunks, order_chunks, *, chunk_packs: int = 1 << 16) -> str:
        """``PackPlan.plan_hash`` of the expanded plan, streamed: ``lengths_chunks`` are the ``(N,)`` lengths
        in input order and ``order_chunks`` the ``(N,)`` plan order (``PackPlan.order``), each as consecutive
        chunks (any sizes); memory is one chunk. Raises ValueError when the chunks do not add up to N."""
        n = self.num_sequences
        h = hashlib.sha256(b"packwise-plan-v1")
        h.update(np.asarray([self.capacity, self.alignment, n], dtype="<i8").tobytes())
        for name, chunks in (("lengths", lengths_chunks), ("order", order_chunks)):
            seen = 0
            for chunk in chunks:
                arr = np.asarray(chunk)
                seen += arr.shape[0]
                for a in range(0, arr.shape[0], _HASH_STEP):  # bounded copies: one step at a time
                    h.update(np.ascontiguousarray(arr[a : a + _HASH_STEP], dtype="<i8").data)
            if seen != n:
                raise ValueError(f"plan_hash: {name} chunks hold {seen} values, the plan {n} sequences")
            if name == "lengths":
                h.update(np.asarray([n], dtype="<i8").tobytes())
        p = self.num_packs
        h.update(np.asarray([p + 1], dtype="<i8").tobytes())
        for a in range(0, p + 1, chunk_packs):
            h.update(self.pack_offsets(np.arange(a, min(a + chunk_packs, p + 1))).astype("<i8").tobytes())
        return h.hexdigest()

    def pack_cost_counts(self) -> np.ndarray:
        """``(C+1,)`` int64: packs per total cost (the fill histogram when alignment is 1)."""
        per: np.ndarray | list[int] = (
            np.add.reduceat(self.template_costs, self.template_offsets[:-1]) if self.template_costs.size else []
        )
        return np.bincount(np.asarray(per, np.int64), weights=self.template_packs, minlength=self.capacity + 1).astype(
            np.int64
        )

    def summary(self) -> dict:
        """Order-free metrics: sequences, packs, tokens, cost, lower bound L1, excess over L1, utilisation."""
        lengths = np.arange(self.counts.shape[0], dtype=np.int64)
        tokens = int((lengths * self.counts).sum())
        cost = int((self.costs_of(lengths) * self.counts).sum())
        p, lower = self.num_packs, math.ceil(cost / self.capacity)
        return {
            "num_sequences": self.num_sequences, "num_packs": p, "capacity": self.capacity, "total_tokens": tokens,
            "total_cost": cost, "lower_bound_packs": lower, "excess_packs_pct": 100.0 * (p - lower) / lower if lower
            else 0.0, "utilisation": tokens / (p * self.capacity) if p else 0.0, "templates": len(self.template_start),
            "max_sequences_in_pack": int(np.diff(self.template_offsets).max()) if p else 0,
        }  # fmt: skip

    def metrics(self, *, pad_to_longest_tokens: int, pack_length_counts=None, batch_size: int | None = None):
        """The full :class:`PackingMetrics` (as ``PackPlan.metrics``), given what a histogram cannot know.

        Args:
            pad_to_longest_tokens: the pad-to-longest baseline, which depends on input order (batches of
                ``batch_size`` consecutive sequences, default round(N / P)).
            pack_length_counts: ``(C+1,)`` packs per real token count; default from the templates, exact only
                when ``alignment == 1`` (required otherwise).
        """
        if pack_length_counts is None:
            if self.alignment != 1:
                raise ValueError("pack_length_counts is required when alignment > 1 (packs hold real lengths)")
            pack_length_counts = self.pack_cost_counts()
        n, p = self.num_sequences, self.num_packs
        lengths = np.arange(self.counts.shape[0], dtype=np.int64)
        return fill_metrics(
            num_sequences=n, capacity=self.capacity, total_tokens=int((lengths * self.counts).sum()),
            total_cost=int((self.costs_of(lengths) * self.counts).sum()), pack_length_counts=pack_length_counts,
            max_sequences_in_pack=int(np.diff(self.template_offsets).max()) if p else 0,
            batch_size=batch_size or (max(1, round(n / p)) if p else 1), pad_to_longest_tokens=pad_to_longest_tokens,
        )  # fmt: skip

    def expand(self, lengths):
        """The :class:`PackPlan` for the full ``(N,)`` lengths (in input order) this histogram counts."""
        from ._plan import PackPlan

        real = np.asarray(lengths, dtype=np.int64)
        pack, slot = self.place(real)
        sizes = self.pack_sizes()
        offsets = np.zeros(sizes.shape[0] + 1, dtype=np.int64)
        np.cumsum(sizes, out=offsets[1:])
        order = np.empty(real.shape[0], dtype=np.int64)
        order[offsets[pack] + slot] = np.arange(real.shape[0], dtype=np.int64)
        return PackPlan(order, offsets, real, self.capacity, self.algorithm, None, self.alignment)


__all__ = ["HistogramPlan"]
