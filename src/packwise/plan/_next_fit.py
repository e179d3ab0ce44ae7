"""Next fit (``concatenative``): keep the input order, close the pack when the next sequence does not fit.

Source: D. S. Johnson, "Near-optimal bin packing algorithms", PhD thesis, MIT, 1973; NeMo-RL's
``ConcatenativePacker``. Guarantee: NF(I) <= 2 OPT(I) - 1. The only planner here that preserves the
input order (use it when order carries meaning, e.g. curriculum or already-shuffled streams).

Vectorised: ``next[i]``, the first sequence that no longer fits a pack starting at ``i``, comes from one
``searchsorted`` over the cumulative lengths; the pack starts are the chain ``0 -> next[0] -> ...``,
followed in O(P) scalar steps. Complexity O(N log N) numpy + O(P) Python steps; deterministic; never
splits or drops.

Measured (``benchmarks/bench_plan.py``; lognormal(6.1, 1.1) lengths clipped to [1, 4096], C = 4096, N = 1 M
unless stated):
next_fit: 226,100 packs (+21.80 % over L1 = 185,636); N = 10 M: 2,254,542 (+21.69 %); chitchat (qwen2.5, C =
4096): 964 packs for L1 = 776.
"""

from __future__ import annotations

import numpy as np


def plan_next_fit(costs: np.ndarray, capacity: int, max_seqs: int) -> tuple[np.ndarray, np.ndarray]:
    n = costs.shape[0]
    order = np.arange(n, dtype=np.int64)
    if n == 0:
        return order, np.zeros(1, dtype=np.int64)
    ends = np.cumsum(costs)
    nxt = np.searchsorted(ends, ends - costs + capacity, side="right")
    if max_seqs < n:
        np.minimum(nxt, np.arange(max_seqs, n + max_seqs), out=nxt)
    starts = [0]
    cur = int(nxt[0])
    while cur < n:
        starts.append(cur)
        cur = int(nxt[cur])
    offsets = np.asarray([*starts, n], dtype=np.int64)
    return order, offsets
