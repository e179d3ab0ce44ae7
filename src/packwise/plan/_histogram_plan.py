"""``plan_histogram``: run a histogram planner on ``counts[length]`` and turn its groups into templates.

See :mod:`packwise.plan._histogram` for the templates and the placement rule. The planners are the ones
:func:`plan_packs` runs (``_engine``'s events on groups of identical packs), fed from counts instead of an
``(N,)`` array; ``min_packs`` / ``pack_count_multiple`` splits run ``split_to_target`` on the at most
``target - P`` packs they touch, materialised from their templates.
"""

from __future__ import annotations

import numpy as np

from ._api import MAX_CAPACITY, _optional_int, check_algorithm_options, resolve_algorithm
from ._constraints import lpt_halves, pack_count_target, split_to_target
from ._engine import HistogramBuilder
from ._finalize import Chains
from ._fit_decreasing import place_decreasing
from ._histogram import HistogramPlan
from ._knapsack import place_balanced_greedy_knapsack, place_greedy_knapsack
from ._krell import place_lpfhp, place_spfhp
from ._mffd import place_mffd

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
    groups: list | Chains
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
    capacity = builder.capacity
    if isinstance(groups, Chains):
        groups.record(builder)
        groups = groups.tuples()
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
        counts=real, capacity=capacity, algorithm=name, alignment=alignment,
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
    # Packs to materialise: the ones split_to_target would split first — by the cost of the smaller LPT half
    # (the same for every pack of a template), then the fuller pack, then the pack index.
    small = np.asarray(
        [min(int(tc[o[t] + h].sum()) for h in lpt_halves(np.arange(t_size[t]), tc[o[t] : o[t + 1]])) if t_size[t] >= 2
         else -1 for t in range(t_size.shape[0])], dtype=np.int64,
    )  # fmt: skip
    chosen: list[int] = []
    for t in np.lexsort((plan.template_start, -t_cost, -small)).tolist():
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


__all__ = ["HISTOGRAM_ALGORITHMS", "plan_histogram"]
