"""Pack-count constraints: at least ``min_packs`` packs, a multiple of ``pack_count_multiple``.

Data-parallel ranks must run the same number of micro-batches (NeMo-RL #718 / PR #748). NeMo-RL reaches
the target by appending empty bins and moving single sequences into them, which leaves tiny packs;
packwise instead splits the *fullest* pack (by aligned tokens; ties: lowest pack index) into two halves
balanced by the LPT rule, repeatedly, until the target is met. Each half keeps the relative order of its
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
    splittable = np.flatnonzero(sizes >= 2)
    ranked = splittable[np.lexsort((splittable, -pack_cost[splittable]))].tolist()
    feed = 0
    heap: list = []  # (-cost, pack, uid)
    pieces: dict[int, list[int]] = {}  # pack -> piece uids in order
    arrays: dict[int, np.ndarray] = {}
    uid = 0
    for _ in range(target - p):
        nxt = ranked[feed] if feed < len(ranked) else None
        if nxt is not None and (not heap or (-int(pack_cost[nxt]), nxt) < (heap[0][0], heap[0][1])):
            feed += 1
            arrays[uid] = order[offsets[nxt] : offsets[nxt + 1]]
            pieces[nxt] = [uid]
            cur_pack, cur_uid = nxt, uid
            uid += 1
        else:
            _, cur_pack, cur_uid = heapq.heappop(heap)
        a, b = _halves(arrays.pop(cur_uid), costs)
        slot = pieces[cur_pack].index(cur_uid)
        pieces[cur_pack][slot : slot + 1] = [uid, uid + 1]
        for arr in (a, b):
            arrays[uid] = arr
            if arr.shape[0] >= 2:
                heapq.heappush(heap, (-int(costs[arr].sum()), cur_pack, uid))
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


def _halves(members: np.ndarray, costs: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    c = costs[members]
    loads = [0, 0]
    side = np.empty(members.shape[0], dtype=bool)
    for i in np.lexsort((np.arange(members.shape[0]), -c)).tolist():
        s = int(loads[1] < loads[0])
        side[i] = bool(s)
        loads[s] += int(c[i])
    return members[~side], members[side]
