"""Deal packs to data-parallel ranks: the same number of micro-batches per rank, balanced compute.

Source of the heuristic: Graham's LPT rule ("Bounds on multiprocessing timing anomalies", SIAM J. Appl.
Math. 17(2), 1969) with a cardinality constraint — packs sorted by cost, largest first (ties: lowest
index), each to the least-loaded rank that still has room for one more pack. Every rank gets exactly
``P / num_ranks`` packs, so no rank waits for a micro-batch the others do not have (NeMo-RL #718); nothing
is dropped — a pack count that is not a multiple of ``num_ranks`` is an error whose fix is to plan with
``pack_count_multiple=num_ranks``.

Costs: ``tokens`` = Σ l over the pack's sequences; ``attention`` = Σ (l + k·l²) with
``k = 1 / (6·hidden_size)``: per layer a sequence of l tokens costs about 24·l·h² FLOPs in the dense layers
and 4·l²·h in attention (Narayanan et al., "Efficient Large-Scale Language Model Training on GPU Clusters
Using Megatron-LM", SC 2021), so attention adds l²/(6h) token-equivalents; or any ``callable`` mapping a
pack's ``(n,)`` int64 lengths to a cost — :class:`~packwise.plan.ComputeCost` is one: training FLOPs from
plain numbers (dense and active-expert weights, attention pairs with the window), which
``packwise.hf.model_cost(config)`` reads off a Transformers config.
"""

from __future__ import annotations

import heapq
from collections.abc import Callable
from typing import Literal

import numpy as np

from ._plan import PackPlan

Cost = Literal["tokens", "attention"]
Order = Literal["largest_first", "plan"]


class RankAssignment(list):
    """``list[list[int]]`` of pack indices per rank, plus ``costs`` (per rank) and ``imbalance`` (max/mean)."""

    costs: list[float]
    imbalance: float


def pack_costs(
    pack_lengths: list[np.ndarray], cost: Cost | Callable = "tokens", *, hidden_size: int = 4096
) -> np.ndarray:
    """``(P,)`` float64 cost of each pack from its sequences' lengths (tokens).

    Raises:
        ValueError: an unknown cost name or ``hidden_size < 1``.

    Example:
        >>> pack_costs([np.array([4, 4]), np.array([8])], "attention", hidden_size=2).tolist()
        [10.666666666666666, 13.333333333333332]
    """
    if callable(cost):
        return np.asarray([float(cost(np.asarray(p, dtype=np.int64))) for p in pack_lengths], dtype=np.float64)
    if cost == "tokens":
        return np.asarray([float(np.sum(p)) for p in pack_lengths], dtype=np.float64)
    if cost == "attention":
        if hidden_size < 1:
            raise ValueError(f"hidden_size must be >= 1, got {hidden_size}")
        k = 1.0 / (6.0 * hidden_size)
        return np.asarray([float(np.sum(p) + k * np.sum(np.square(p, dtype=np.float64))) for p in pack_lengths])
    raise ValueError(f"unknown cost {cost!r}; use 'tokens', 'attention' or a callable")


def assign_to_ranks(costs, *, num_ranks: int, order: Order = "largest_first", tie_break=None) -> RankAssignment:
    """LPT with equal counts: pack indices per rank (see the module docstring).

    Args:
        costs: ``(P,)`` cost per pack; ``P`` must be a multiple of ``num_ranks``.
        num_ranks: data-parallel ranks.
        order: each rank's packs by decreasing cost (``largest_first``: the caching allocator sees the
            biggest micro-batch first — NeMo-RL PR #3476) or by pack index (``plan``).
        tie_break: ``(P,)`` secondary key for equal costs (default: pack index).

    Raises:
        ValueError: ``num_ranks < 1``, or ``P`` not a multiple of ``num_ranks``.

    Example:
        >>> a = assign_to_ranks([5, 4, 3, 3, 2, 1], num_ranks=2)
        >>> list(a), a.costs, a.imbalance
        ([[0, 3, 5], [1, 2, 4]], [9.0, 9.0], 1.0)
    """
    costs = np.asarray(costs, dtype=np.float64)
    if isinstance(num_ranks, bool) or not isinstance(num_ranks, (int, np.integer)) or num_ranks < 1:
        raise ValueError(f"num_ranks must be an integer >= 1, got {num_ranks!r}")
    p = costs.shape[0]
    if p % num_ranks:
        raise ValueError(
            f"{p} packs cannot give {num_ranks} ranks the same number of micro-batches; plan with "
            f"pack_count_multiple={num_ranks} (plan_packs(..., pack_count_multiple={num_ranks})) — nothing is dropped"
        )
    per = p // num_ranks
    secondary = np.arange(p) if tie_break is None else np.asarray(tie_break)
    ranked = np.lexsort((secondary, -costs))
    heap = [(0.0, r) for r in range(num_ranks)]
    members: list[list[int]] = [[] for _ in range(num_ranks)]
    loads = [0.0] * num_ranks
    for i in ranked.tolist():
        load, r = heapq.heappop(heap)
        members[r].append(i)
        loads[r] = load + costs[i]
        if len(members[r]) < per:
            heapq.heappush(heap, (loads[r], r))
    if order == "plan":
        members = [sorted(m) for m in members]
    elif order != "largest_first":
        raise ValueError(f"unknown order {order!r}; use 'largest_first' or 'plan'")
    out = RankAssignment(members)
    out.costs = [float(x) for x in loads]
    mean = sum(loads) / num_ranks if num_ranks else 0.0
    out.imbalance = float(max(loads) / mean) if mean else 1.0
    return out


def distribute(
    plan: PackPlan,
    *,
    num_ranks: int,
    cost: Cost | Callable = "tokens",
    order: Order = "largest_first",
    hidden_size: int = 4096,
) -> RankAssignment:
    """Pack indices per data-parallel rank: equal counts, balanced cost (LPT), imbalance reported.

    Args:
        plan: the plan; plan it with ``pack_count_multiple=num_ranks`` so the count divides evenly.
        num_ranks: data-parallel ranks.
        cost: ``tokens``, ``attention`` (k = 1/(6·hidden_size)) or a callable on a pack's lengths, e.g. a
            :class:`~packwise.plan.ComputeCost` (``packwise.hf.model_cost(config)``).
        order: ``largest_first`` or ``plan`` within each rank.
        hidden_size: model width for the attention-aware cost.

    Returns:
        A :class:`RankAssignment` (a ``list[list[int]]`` with ``costs`` and ``imbalance`` = max/mean).

    Raises:
        ValueError: the pack count is not a multiple of ``num_ranks`` (names the fix), bad arguments.

    Example:
        >>> from packwise.plan import plan_packs
        >>> plan = plan_packs([7, 1, 6, 2, 5, 3, 4, 4], capacity=8, pack_count_multiple=2)
        >>> a = distribute(plan, num_ranks=2)
        >>> sorted(i for r in a for i in r) == list(range(plan.num_packs)), a.imbalance
        (True, 1.0)
    """
    lengths = plan.lengths[plan.order]
    per_pack = np.split(lengths, plan.offsets[1:-1]) if plan.num_packs else []
    return assign_to_ranks(pack_costs(per_pack, cost, hidden_size=hidden_size), num_ranks=num_ranks, order=order)
