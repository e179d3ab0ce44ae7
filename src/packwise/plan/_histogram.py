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

from ._api import MAX_CAPACITY, RANDOMIZED, _optional_int, check_algorithm_options, resolve_algorithm
from ._constraints import pack_count_target, split_to_target
from ._engine import HistogramBuilder
from ._fit_decreasing import place_decreasing
from ._knapsack import place_balanced_greedy_knapsack, place_greedy_knapsack
from ._krell import place_lpfhp, place_spfhp
from ._mffd import place_mffd
from ._plan import PackingMetrics, fill_metrics

#: Algorithms :func:`plan_histogram` plans (all but the order-dependent next_fit and first_fit_shuffle).
HISTOGRAM_ALGORITHMS: tuple[str, ...] = (
    "first_fit_decreasing",
    "best_fit_decreasing",
    "modified_first_fit_decreasing",
    "greedy_knapsack",
    "balanced_greedy_knapsack",
    "shortest_pack_first_histogram",
    "longest_pack_first_histogram",
)


class _CountsBuilder(HistogramBuilder):
    """A :class:`HistogramBuilder` made from cost counts; records events only (``finalize`` is not used)."""

    def __init__(self, counts: list[int], capacity: int) -> None:  # no super(): it needs the (N,) array
        self.n = sum(counts)
        self.capacity = capacity
        self.counts = list(counts)
        above, acc = [0] * len(counts), 0
        for length in range(len(counts) - 1, -1, -1):
            above[length] = acc
            acc += counts[length]
        self.cursor = above
        self.above = list(above)
        self.counts_at_start = list(counts)
        self.n_bins = 0
        self.ev_bin, self.ev_g, self.ev_k, self.ev_src, self.ev_rev = [], [], [], [], []


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

    def plan_hash(self, lengths_chunks, order_chunks, *, chunk_packs: int = 1 << 20) -> str:
        """``PackPlan.plan_hash`` of the expanded plan, streamed: ``lengths_chunks`` are the ``(N,)`` lengths
        in input order and ``order_chunks`` the ``(N,)`` plan order (``PackPlan.order``), each as consecutive
        chunks (any sizes); memory is one chunk. Raises ValueError when the chunks do not add up to N."""
        n = self.num_sequences
        h = hashlib.sha256(b"packwise-plan-v1")
        h.update(np.asarray([self.capacity, self.alignment, n], dtype="<i8").tobytes())
        for name, chunks in (("lengths", lengths_chunks), ("order", order_chunks)):
            seen = 0
            for chunk in chunks:
                arr = np.ascontiguousarray(chunk, dtype="<i8")
                seen += arr.shape[0]
                h.update(arr.tobytes())
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
        per = np.add.reduceat(self.template_costs, self.template_offsets[:-1]) if self.template_costs.size else []
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


def plan_histogram(
    counts,
    *,
    capacity: int,
    algorithm: str = "best_fit_decreasing",
    max_sequences_per_pack: int | None = None,
    min_packs: int | None = None,
    pack_count_multiple: int | None = None,
    alignment: int = 1,
    **algorithm_options,
) -> HistogramPlan:
    """Plan from the length histogram alone; the same packs as :func:`plan_packs` on the expanded lengths.

    Args:
        counts: ``(L+1,)`` non-negative integers, ``counts[l]`` = sequences of ``l`` tokens (``counts[0]``
            must be 0); L + alignment padding must not exceed ``capacity`` where counts are non-zero.
        capacity, algorithm, max_sequences_per_pack, min_packs, pack_count_multiple, alignment,
            **algorithm_options: as :func:`plan_packs`; ``algorithm`` is one of :data:`HISTOGRAM_ALGORITHMS`.

    Returns:
        A :class:`HistogramPlan`: memory O(C + templates), time O(C + E log C), independent of N.

    Raises:
        ValueError: bad counts (negative, not integer, a non-zero count over capacity or at length 0),
            an order-dependent algorithm (next_fit, first_fit_shuffle), or anything :func:`plan_packs` refuses.

    Example:
        >>> import numpy as np
        >>> hp = plan_histogram(np.bincount([3, 7, 2, 5]), capacity=8)
        >>> hp.num_packs, hp.templates()
        (3, [(0, 1, [7]), (1, 1, [5, 3]), (2, 1, [2])])
    """
    if isinstance(capacity, bool) or not isinstance(capacity, (int, np.integer)) or not 1 <= capacity <= MAX_CAPACITY:
        raise ValueError(f"capacity must be an integer in [1, {MAX_CAPACITY:,}] (tokens per pack), got {capacity!r}")
    capacity = int(capacity)
    name = resolve_algorithm(algorithm)
    if name not in HISTOGRAM_ALGORITHMS:
        why = "keeps the input order" if name == "next_fit" else "shuffles sequences one by one"
        raise ValueError(
            f"algorithm {name!r} {why}, so it cannot plan from a histogram; use one of "
            f"{', '.join(HISTOGRAM_ALGORITHMS)}, or plan_packs on the lengths"
        )
    assert name not in RANDOMIZED
    check_algorithm_options(name, algorithm_options)
    max_seqs = _optional_int("max_sequences_per_pack", max_sequences_per_pack, 1)
    min_packs = _optional_int("min_packs", min_packs, 0)
    multiple = _optional_int("pack_count_multiple", pack_count_multiple, 1)
    alignment = _optional_int("alignment", alignment, 1) or 1
    real = _as_counts(counts)
    nz = np.flatnonzero(real)
    cost_counts = np.zeros(capacity + 1, dtype=np.int64)
    if nz.size:
        if nz[0] == 0:
            raise ValueError(f"counts[0] = {int(real[0])}: every length must be >= 1 token (drop empty sequences)")
        costs = (nz + (alignment - 1)) // alignment * alignment
        if costs[-1] > capacity:
            aligned = f" ({int(costs[-1])} after alignment to {alignment})" if alignment > 1 else ""
            raise ValueError(
                f"{int(real[nz[-1]])} sequences have {int(nz[-1])} tokens{aligned} > capacity {capacity}; "
                "truncate or split them (overflow='truncate' or 'split') or raise capacity"
            )
        np.add.at(cost_counts, costs, real[nz])
    m = max_seqs or (1 << 62)
    builder = _CountsBuilder(cost_counts.tolist(), capacity)
    if name == "best_fit_decreasing":
        groups = place_decreasing(builder, max_seqs=m, policy="best")
    elif name == "first_fit_decreasing":
        groups = place_decreasing(builder, max_seqs=m, policy="first")
    elif name == "modified_first_fit_decreasing":
        groups = place_mffd(builder, max_seqs=m)
    elif name == "greedy_knapsack":
        groups = place_greedy_knapsack(builder, max_seqs=m)
    elif name == "balanced_greedy_knapsack":
        total = int((np.arange(capacity + 1) * cost_counts).sum())
        delta = int(algorithm_options.get("delta", 0))
        groups = place_balanced_greedy_knapsack(builder, max_seqs=m, delta=delta, total_cost=total)
    elif name == "shortest_pack_first_histogram":
        groups = place_spfhp(builder, max_seqs=m)
    else:
        groups = place_lpfhp(builder, max_seqs=m)
    return _build(builder, groups, real, name, alignment, min_packs, multiple)


def _as_counts(counts) -> np.ndarray:
    arr = np.asarray(counts)
    if arr.ndim != 1:
        raise ValueError(f"counts must be 1-D (counts[length]), got shape {arr.shape}")
    if arr.size and (arr.dtype == np.bool_ or arr.dtype.kind not in "iu"):
        raise TypeError(f"counts must be integers, got dtype {arr.dtype}")
    arr = arr.astype(np.int64, copy=False)
    if arr.size and arr.min() < 0:
        i = int(arr.argmin())
        raise ValueError(f"counts[{i}] = {int(arr[i])}; counts must be >= 0")
    return arr


def _build(builder, groups, real, name, alignment, min_packs, multiple) -> HistogramPlan:
    cap = builder.capacity
    ev_len = np.zeros(len(builder.ev_k), dtype=np.int64)
    ev_k, ev_g = np.asarray(builder.ev_k, np.int64), np.asarray(builder.ev_g, np.int64)
    ev_src, ev_bin = np.asarray(builder.ev_src, np.int64), np.asarray(builder.ev_bin, np.int64)
    ev_slot = np.zeros_like(ev_k)
    groups = sorted(groups)
    starts, sizes, t_off, t_costs = [], [], [0], []
    empty_bins: list[tuple[int, int]] = []  # (start, g) of groups without sequences, dropped from the plan
    above = np.asarray(builder.above, np.int64)
    for start, g, events in groups:
        p0 = 0
        for e in events:
            ev_slot[e] = p0
            p0 += builder.ev_k[e]
        if p0 == 0:
            empty_bins.append((start, g))
            continue
        starts.append(start)
        sizes.append(g)
        t_off.append(t_off[-1] + p0)
    # slot costs: each event's cost is the length whose block (length desc) holds its source position
    src_sorted = np.argsort(ev_src, kind="stable")
    present = np.flatnonzero(np.asarray(builder.counts_at_start, np.int64))[::-1]  # lengths, descending
    if ev_src.size:
        ev_len = present[np.searchsorted(above[present], ev_src, side="right") - 1]
    for _start, _g, events in groups:
        for e in events:
            t_costs.extend([int(ev_len[e])] * builder.ev_k[e])
    # bins -> packs: drop empty bins
    ev_pack = ev_bin.copy()
    if empty_bins:
        e_starts = np.asarray([s for s, _ in empty_bins], np.int64)
        e_cum = np.concatenate([[0], np.cumsum([g for _, g in empty_bins])])
        ev_pack -= e_cum[np.searchsorted(e_starts, ev_bin, side="right")]
        st = np.asarray(starts, np.int64)
        starts = (st - e_cum[np.searchsorted(e_starts, st, side="right")]).tolist()
    ev = {
        "src": ev_src[src_sorted], "pack": ev_pack[src_sorted], "k": ev_k[src_sorted],
        "span": (ev_g * ev_k)[src_sorted], "rev": np.asarray(builder.ev_rev, np.int64)[src_sorted],
        "slot": ev_slot[src_sorted], "above": above,
    }  # fmt: skip
    plan = HistogramPlan(
        counts=real, capacity=cap, algorithm=name, alignment=alignment,
        template_start=np.asarray(starts, np.int64), template_packs=np.asarray(sizes, np.int64),
        template_offsets=np.asarray(t_off, np.int64), template_costs=np.asarray(t_costs, np.int64), _ev=ev,
        _splits={"pack": np.zeros(0, np.int64)},
    )  # fmt: skip
    target = pack_count_target(plan.num_packs, min_packs, multiple)
    if target > plan.num_packs:
        plan = _split(plan, target, f"min_packs={min_packs}, pack_count_multiple={multiple}")
    return plan


def _split(plan: HistogramPlan, target: int, why: str) -> HistogramPlan:
    """Apply ``split_to_target`` to the at most ``target - P`` fullest packs, materialised from their templates."""
    p, n = plan.num_packs, plan.num_sequences
    if n < target:
        raise ValueError(
            f"cannot make {target} packs from {n} sequences ({why}); every pack needs at least one "
            f"sequence: lower min_packs / pack_count_multiple or plan more sequences"
        )
    need = target - p
    o, tc = plan.template_offsets, plan.template_costs
    t_cost = np.add.reduceat(tc, o[:-1])
    t_size = np.diff(o)
    chosen: list[int] = []  # packs to materialise: the fullest splittable ones, ties by pack index
    for t in np.lexsort((plan.template_start, -t_cost)).tolist():
        if t_size[t] < 2:
            continue
        take = min(need - len(chosen), int(plan.template_packs[t]))
        chosen.extend(range(int(plan.template_start[t]), int(plan.template_start[t]) + take))
        if len(chosen) == need:
            break
    chosen.sort()
    t_of = np.searchsorted(plan.template_start, chosen, side="right") - 1
    mini_sizes = t_size[t_of]
    mini_off = np.zeros(len(chosen) + 1, np.int64)
    np.cumsum(mini_sizes, out=mini_off[1:])
    mini_costs = np.concatenate([tc[o[t] : o[t + 1]] for t in t_of]) if chosen else np.zeros(0, np.int64)
    order, offsets = split_to_target(
        np.arange(mini_off[-1], dtype=np.int64), mini_off, mini_costs, len(chosen) + need, why=why
    )
    # Each output pack lies in one chosen pack; record (piece, new slot) for each (chosen pack, old slot).
    piece = np.zeros(order.shape[0], np.int64)
    new_slot = np.zeros(order.shape[0], np.int64)
    owner = np.searchsorted(mini_off, order, side="right") - 1
    pieces_of = np.zeros(len(chosen), np.int64)
    for q in range(offsets.shape[0] - 1):
        members = order[offsets[q] : offsets[q + 1]]
        c = int(owner[offsets[q]])
        piece[members] = pieces_of[c]
        new_slot[members] = np.arange(members.shape[0])
        pieces_of[c] += 1
    extra = np.concatenate([[0], np.cumsum(pieces_of - 1)])
    # New templates: chosen packs cut out of their template, replaced by one template per piece.
    starts, counts, t_off, t_costs = [], [], [0], []
    ch = np.asarray(chosen, np.int64)
    for t in range(len(plan.template_start)):
        s, g = int(plan.template_start[t]), int(plan.template_packs[t])
        cuts = ch[(ch >= s) & (ch < s + g)].tolist()
        cur = s
        for c in [*cuts, s + g]:
            if c > cur:
                starts.append(cur)
                counts.append(c - cur)
                t_costs.extend(tc[o[t] : o[t + 1]].tolist())
                t_off.append(len(t_costs))
            if c < s + g:
                i = chosen.index(c)
                for q in range(offsets.shape[0] - 1):
                    members = order[offsets[q] : offsets[q + 1]]
                    if int(owner[offsets[q]]) == i:
                        starts.append(c)
                        counts.append(1)
                        t_costs.extend(mini_costs[members].tolist())
                        t_off.append(len(t_costs))
            cur = c + 1
    st = np.asarray(starts, np.int64)
    st = st + extra[np.searchsorted(ch, st, side="left")]
    # pieces of one chosen pack follow each other: shift each by its piece index
    fixed, prev, k = st.copy(), None, 0
    for i, s in enumerate(starts):
        if s in chosen:
            k = k + 1 if prev == s else 0
            fixed[i] += k
            prev = s
        else:
            prev = None
    splits = {"pack": ch, "extra": extra, "first": mini_off, "piece": piece, "slot": new_slot}
    return HistogramPlan(
        counts=plan.counts, capacity=plan.capacity, algorithm=plan.algorithm, alignment=plan.alignment,
        template_start=fixed, template_packs=np.asarray(counts, np.int64), template_offsets=np.asarray(t_off, np.int64),
        template_costs=np.asarray(t_costs, np.int64), _ev=plan._ev, _splits=splits,
    )  # fmt: skip


__all__ = ["HISTOGRAM_ALGORITHMS", "HistogramPlan", "PackingMetrics", "plan_histogram"]
