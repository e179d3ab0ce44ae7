"""Pack-count constraints: at least ``min_packs`` packs, a multiple of ``pack_count_multiple``.

Data-parallel ranks must run the same number of micro-batches (NeMo-RL #718 / PR #748). NeMo-RL reaches
the target by appending empty bins and moving single sequences into them, which leaves tiny packs;
packwise instead splits a pack into two halves balanced by the LPT rule, repeatedly, until the target is
met — each time the pack (or piece of one) whose *smaller* half holds the most aligned tokens (ties: the
fuller pack, then the lowest pack index). Splitting the fullest pack instead would cut ``[99, 1]`` into a
1-token crumb where ``[30, 30, 30]`` gives ``[60, 30]``. Each half keeps the relative order of its
sequences; the first half takes the pack's place and the second follows it. Never adds empty packs,
never drops a sequence; raises when N is smaller than the target.
"""

from __future__ import annotations

import heapq

import numpy as np


def pack_count_target(num_packs: int, min_packs: int | None, multiple: int | None) -> int:
    target = max(num_packs, min_packs or 0)
    if multiple:
        target = -(-target // multiple) * multiple
    return target


def split_to_target(
    order: np.ndarray, offsets: np.ndarray, costs: np.ndarray, target: int, *, why: str
) -> tuple[np.ndarray, np.ndarray]:
    p = offsets.shape[0] - 1
    n = order.shape[0]
    if target <= p:
        return order, offsets
    if n < target:
        raise ValueError(
            f"cannot make {target} packs from {n} sequences ({why}); every pack needs at least one "
            f"sequence: lower min_packs / pack_count_multiple or plan more sequences"
        )
    sizes = np.diff(offsets)
    pack_cost = np.add.reduceat(costs[order], offsets[:-1]) if p else np.zeros(0, dtype=np.int64)
    # Lazy max-heap on the smaller half: (-key, not exact, -cost, pack, uid). An unevaluated piece's key is
    # the bound cost // 2 (a smaller half never holds more); it is evaluated when it reaches the top.
    heap: list = []
    pieces: dict[int, list[int]] = {}  # pack -> piece uids in order
    arrays: dict[int, np.ndarray] = {}
    halves: dict[int, tuple[np.ndarray, np.ndarray]] = {}
    uid = 0
    for pack in np.flatnonzero(sizes >= 2).tolist():
        arrays[uid] = order[offsets[pack] : offsets[pack + 1]]
        cost = int(pack_cost[pack])
        heap.append((-(cost // 2), 1, -cost, pack, uid))
        uid += 1
    heapq.heapify(heap)
    for _ in range(target - p):
        while True:
            _, lazy, neg_cost, pack, cur = heapq.heappop(heap)
            if not lazy:
                break
            a, b = halves[cur] = lpt_halves(arrays[cur], costs)
            heapq.heappush(heap, (-min(int(costs[a].sum()), int(costs[b].sum())), 0, neg_cost, pack, cur))
        a, b = halves.pop(cur)
        arrays.pop(cur)
        slots = pieces.setdefault(pack, [cur])
        slot = slots.index(cur)
        slots[slot : slot + 1] = [uid, uid + 1]
        for arr in (a, b):
            arrays[uid] = arr
            if arr.shape[0] >= 2:
                cost = int(costs[arr].sum())
                heapq.heappush(heap, (-(cost // 2), 1, -cost, pack, uid))
            uid += 1
    chunks = []
    sizes_out = []
    prev = 0
    for pack in sorted(pieces):
        chunks.append(order[offsets[prev] : offsets[pack]])
        sizes_out.append(sizes[prev:pack])
        for piece in pieces[pack]:
            chunks.append(arrays[piece])
            sizes_out.append(np.asarray([arrays[piece].shape[0]]))
        prev = pack + 1
    chunks.append(order[offsets[prev] :])
    sizes_out.append(sizes[prev:])
    new_sizes = np.concatenate(sizes_out).astype(np.int64)
    new_offsets = np.zeros(new_sizes.shape[0] + 1, dtype=np.int64)
    np.cumsum(new_sizes, out=new_offsets[1:])
    return np.concatenate(chunks).astype(np.int64), new_offsets


def lpt_halves(members: np.ndarray, costs: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Two halves of ``members`` balanced by the LPT rule (largest cost first onto the lighter half; ties: the
    first half), each in the members' order.

    Example:
        >>> [h.tolist() for h in lpt_halves(np.arange(3), np.array([30, 30, 30]))]
        [[0, 2], [1]]
    """
    c = costs[members]
    loads = [0, 0]
    side = np.empty(members.shape[0], dtype=bool)
    for i in np.lexsort((np.arange(members.shape[0]), -c)).tolist():
        s = int(loads[1] < loads[0])
        side[i] = bool(s)
        loads[s] += int(c[i])
    return members[~side], members[side]
