"""Item-by-item reference planners: slow, obvious, and the yardstick for the histogram fast paths."""

from __future__ import annotations


def _desc(lengths):
    return sorted(range(len(lengths)), key=lambda i: (-lengths[i], i))


def fit_decreasing(lengths, capacity, max_seqs=None, *, best=False):
    m = max_seqs or len(lengths) + 1
    bins = []  # [free, items]
    for i in _desc(lengths):
        length = lengths[i]
        fits = [b for b in range(len(bins)) if bins[b][0] >= length and len(bins[b][1]) < m]
        if fits:
            b = min(fits, key=lambda b: (bins[b][0], b)) if best else fits[0]
        else:
            bins.append([capacity, []])
            b = len(bins) - 1
        bins[b][0] -= length
        bins[b][1].append(i)
    return [items for _, items in bins]


def greedy_knapsack(lengths, capacity, max_seqs=None):
    m = max_seqs or len(lengths) + 1
    remaining = _desc(lengths)  # longest first, lowest index first
    bins = []
    while remaining:
        free, items = capacity, []
        while len(items) < m:
            pick = next((i for i in remaining if lengths[i] <= free), None)
            if pick is None:
                break
            remaining.remove(pick)
            items.append(pick)
            free -= lengths[pick]
        bins.append(items)
    return bins


def balanced_greedy_knapsack(lengths, capacity, max_seqs=None, delta=0):
    m = max_seqs or len(lengths) + 1
    if not lengths:
        return []
    k = -(-sum(lengths) // capacity) + delta
    loads = [0] * k
    bins = [[] for _ in range(k)]
    for i in _desc(lengths):
        open_bins = [b for b in range(len(bins)) if len(bins[b]) < m]
        b = min(open_bins, key=lambda b: (loads[b], b)) if open_bins else None
        if b is None or loads[b] + lengths[i] > capacity:
            loads.append(0)
            bins.append([])
            b = len(bins) - 1
        loads[b] += lengths[i]
        bins[b].append(i)
    return [b for b in bins if b]


def mffd(lengths, capacity, max_seqs=None):
    """Johnson & Garey (1985) MFFD, item by item (see src/packwise/plan/_mffd.py for the steps)."""
    m = max_seqs or len(lengths) + 1
    c = capacity
    remaining = _desc(lengths)
    bins = []  # [free, items, got_medium]
    for i in list(remaining):
        if 2 * lengths[i] > c:
            bins.append([c - lengths[i], [i], False])
            remaining.remove(i)

    def take(b, i):
        remaining.remove(i)
        b[0] -= lengths[i]
        b[1].append(i)

    for b in bins:  # 2. forward, one medium
        if len(b[1]) < m:
            pick = next((i for i in remaining if 3 * lengths[i] > c and lengths[i] <= b[0]), None)
            if pick is not None:
                take(b, pick)
                b[2] = True
    for b in reversed(bins):  # 3. backward, two smalls
        if b[2] or len(b[1]) + 2 > m:
            continue
        smalls = sorted(
            (i for i in remaining if 6 * lengths[i] > c and 3 * lengths[i] <= c), key=lambda i: (lengths[i], i)
        )
        if len(smalls) < 2 or lengths[smalls[0]] + lengths[smalls[1]] > b[0]:
            continue
        take(b, smalls[0])
        pick = next(i for i in remaining if 6 * lengths[i] > c and 3 * lengths[i] <= c and lengths[i] <= b[0])
        take(b, pick)
    for b in bins:  # 4. forward, largest that fits, repeatedly
        while len(b[1]) < m:
            pick = next((i for i in remaining if lengths[i] <= b[0]), None)
            if pick is None:
                break
            take(b, pick)
    rest = fit_decreasing([lengths[i] for i in remaining], capacity, max_seqs)  # 5. FFD on the rest
    return [b[1] for b in bins] + [[remaining[j] for j in pack] for pack in rest]


def next_fit(lengths, capacity, max_seqs=None):
    m = max_seqs or len(lengths) + 1
    bins, free = [], 0
    for i, length in enumerate(lengths):
        if not bins or length > free or len(bins[-1]) >= m:
            bins.append([])
            free = capacity
        bins[-1].append(i)
        free -= length
    return bins


def first_fit(lengths, capacity, order, max_seqs=None):
    m = max_seqs or len(lengths) + 1
    bins = []
    for i in order:
        fits = [b for b in range(len(bins)) if bins[b][0] >= lengths[i] and len(bins[b][1]) < m]
        if fits:
            b = fits[0]
        else:
            bins.append([capacity, []])
            b = len(bins) - 1
        bins[b][0] -= lengths[i]
        bins[b][1].append(i)
    return [items for _, items in bins]
