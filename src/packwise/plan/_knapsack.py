"""Greedy knapsack and balanced greedy knapsack.

``greedy_knapsack`` — source: LLaMA-Factory's ``greedy_knapsack`` (processor_utils) and Megatron-LM's
``examples/multimodal/data_loading/knapsacks.py``, also NeMo-RL's ``GreedyKnapsackPacker``. Fill one pack
at a time: repeatedly add the largest remaining sequence that fits (ties: lowest index); when nothing
fits, close the pack and open the next. No constant-factor worst-case guarantee is published; in
practice it matches FFD closely. Planned on the histogram: a filled pack's pattern is repeated on as
many identical packs as the counts allow (exactly what the next packs would choose), so the work is
O(N + patterns · log C). Deterministic; never splits or drops.

``balanced_greedy_knapsack`` — source: Megatron-LM's ``balanced_greedy_knapsack`` (same file), ported to
NeMo-RL. Pre-allocate ``K = ceil(sum/C) + delta`` empty packs, visit sequences longest first (ties:
lowest index) and give each to the least-loaded pack (ties: lowest pack index); when it does not fit
there, append a new empty pack and give it that one. This is Graham's LPT rule for balancing loads
(Graham, "Bounds on multiprocessing timing anomalies", SIAM J. Appl. Math. 17(2), 1969), so it trades
pack count for even fills. ``delta`` (default 0; Megatron-LM uses 20, Nemotron launch scripts 5) is the
number of extra packs over the lower bound. Packs left empty are removed (Megatron-LM returns them).
Grouped on identical loads, but loads diverge quickly, so the cost is O(N log P) Python steps.

Measured (``benchmarks/bench_plan.py``; lognormal(6.1, 1.1) lengths clipped to [1, 4096], C = 4096, N = 1 M
unless stated):
greedy_knapsack: 185,640 packs (+0.0022 % over L1 = 185,636), N = 10 M: 1,852,744 (+0.0023 %), chitchat 776 =
L1; balanced_greedy_knapsack (delta 0): 186,758 (+0.604 %), chitchat 777 for L1 = 776.
"""

from __future__ import annotations

import heapq

from ._engine import HistogramBuilder, PresentLengths, fill_pattern, split_group


def place_greedy_knapsack(builder: HistogramBuilder, *, max_seqs: int) -> list:
    present = PresentLengths(builder.counts)
    groups = []
    capacity = builder.capacity
    while present.total:
        pattern, reps = fill_pattern(present, capacity, max_seqs, present.total)
        start = builder.new_bins(reps)
        events = tuple(builder.event(length, start, reps, mult) for length, mult in pattern)
        groups.append((start, reps, events))
    return groups


def place_balanced_greedy_knapsack(builder: HistogramBuilder, *, max_seqs: int, delta: int, total_cost: int) -> list:
    capacity = builder.capacity
    heap: list = []
    closed: list = []
    if builder.n:
        k = -(-total_cost // capacity) + delta
        start = builder.new_bins(k)
        heap.append((0, start, [start, k, 0, 0, ()]))
    counts = builder.counts
    for length in range(capacity, 0, -1):
        c = counts[length]
        while c:
            if not heap or heap[0][0] + length > capacity:
                start = builder.new_bins(1)
                heapq.heappush(heap, (0, start, [start, 1, 0, 0, ()]))
                continue
            group = heapq.heappop(heap)[2]
            t = min(c, group[1])
            if t < group[1]:
                head = split_group(group, t)
                heapq.heappush(heap, (group[2], group[0], group))
            else:
                head = group
            e = builder.event(length, head[0], t, 1)
            head[2] += length
            head[3] += 1
            head[4] = (*head[4], e)
            if head[3] < max_seqs:
                heapq.heappush(heap, (head[2], head[0], head))
            else:
                closed.append(head)
            c -= t
    return [(g[0], g[1], g[4]) for g in closed] + [(g[0], g[1], g[4]) for _, _, g in heap]
