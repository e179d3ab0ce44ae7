"""Modified first-fit decreasing (MFFD).

Source: D. S. Johnson and M. R. Garey, "A 71/60 theorem for bin packing", Journal of Complexity 1(1),
1985, 65-106. Guarantee: MFFD(I) <= 71/60 OPT(I) + 31/6 (FFD: 11/9).

Size classes relative to the capacity C: large (C/2, C], medium (C/3, C/2], small (C/6, C/3],
tiny (0, C/6]. Steps:

1. every large sequence opens its own pack, longest first (the "A-packs");
2. forward over the A-packs: add the largest remaining medium sequence that fits (at most one);
3. backward over the A-packs that got no medium: if the two smallest remaining small sequences fit
   together, add the smallest small, then the largest remaining small that still fits;
4. forward over the A-packs: repeatedly add the largest remaining sequence of any class that fits;
5. pack what remains with FFD into new packs (by step 4 nothing remaining fits an A-pack).

Ties go to the lowest sequence index. ``max_sequences_per_pack`` is honoured in every step. NeMo-RL's
``ModifiedFirstFitDecreasingPacker`` uses the same classes but places leftovers by worst fit; we follow
the paper (FFD).

Planned on the histogram with groups of identical A-packs (see ``_engine``); the tests compare against an
item-by-item reference. Complexity O(N) + O(E log C) Python steps; deterministic; never splits or drops.

Measured (``benchmarks/bench_plan.py``; lognormal(6.1, 1.1) lengths clipped to [1, 4096], C = 4096, N = 1 M
unless stated):
modified_first_fit_decreasing: 185,640 packs (+0.0022 % over L1 = 185,636); N = 10 M: 1,852,744 (+0.0023 %);
chitchat (qwen2.5, C = 4096): 776 = L1.
"""

from __future__ import annotations

from ._engine import HistogramBuilder, PresentLengths, fill_pattern, split_group
from ._fit_decreasing import place_decreasing


def place_mffd(builder: HistogramBuilder, *, max_seqs: int) -> list:
    capacity = builder.capacity
    present = PresentLengths(builder.counts)
    counts = builder.counts
    a_groups: list[list] = []
    # 1. large sequences, one per pack.
    for length in range(capacity, capacity // 2, -1):
        c = counts[length]
        if c:
            start = builder.new_bins(c)
            e = builder.event(length, start, c, 1)
            present.take(length, c)
            a_groups.append([start, c, capacity - length, 1, (e,), False])
    medium_max, small_min, small_max = capacity // 2, capacity // 6 + 1, capacity // 3

    # 2. forward: the largest medium that fits, one per pack.
    out = []
    for group in a_groups:
        while group[1] and group[3] < max_seqs:
            medium = present.largest_at_most(min(group[2], medium_max))
            if medium is None or 3 * medium <= capacity:
                break
            t = min(group[1], counts[medium])
            head = split_group(group, t)
            present.take(medium, t)
            _add(builder, head, medium, t, 1)
            head[5] = True
            out.append(head)
        if group[1]:
            out.append(group)
    a_groups = out

    # 3. backward over packs without a medium: smallest small, then the largest small that fits.
    out = []
    for group in reversed(a_groups):
        tail: list[list] = []
        while group[1] and not group[5] and group[3] + 2 <= max_seqs:
            s1 = present.smallest_at_least(small_min)
            if s1 is None or s1 > small_max:
                break
            s2 = s1 if counts[s1] >= 2 else present.smallest_at_least(s1 + 1)
            if s2 is None or s2 > small_max or s1 + s2 > group[2]:
                break
            present.take(s1, 1)
            x = present.largest_at_most(min(group[2] - s1, small_max))
            if x is None:  # s2 fits, so a small length is present: never None
                raise RuntimeError(f"packwise internal error: MFFD found no small length <= {group[2] - s1}")
            present.take(x, 1)
            extra = min(group[1] - 1, counts[s1] // 2 if x == s1 else min(counts[s1], counts[x]))
            if extra:
                present.take(s1, extra)
                present.take(x, extra)
            reps = 1 + extra
            # The last ``reps`` packs of the group take the pattern, served last to first.
            head = [group[0] + group[1] - reps, reps, group[2], group[3], group[4], True]
            group[1] -= reps
            if x == s1:
                _add(builder, head, s1, reps, 2, reverse=True)
            else:
                _add(builder, head, s1, reps, 1, reverse=True)
                _add(builder, head, x, reps, 1, reverse=True)
            tail.append(head)
        out.extend(tail)
        if group[1]:
            out.append(group)
    a_groups = sorted(out)

    # 4. forward over all A-packs: largest remaining sequence that fits, repeatedly.
    done = []
    for group in a_groups:
        while group[1]:
            pattern, reps = fill_pattern(present, group[2], max_seqs - group[3], group[1])
            if not pattern:
                break
            head = split_group(group, reps)
            for length, mult in pattern:
                _add(builder, head, length, reps, mult)
            done.append(head)
        if group[1]:
            done.append(group)

    # 5. FFD on what is left, into new packs.
    groups = [(g[0], g[1], g[4]) for g in done]
    return groups + place_decreasing(builder, max_seqs=max_seqs, policy="first")


def _add(builder: HistogramBuilder, group: list, length: int, g: int, k: int, *, reverse: bool = False) -> None:
    e = builder.event(length, group[0], g, k, reverse=reverse)
    group[2] -= k * length
    group[3] += k
    group[4] = (*group[4], e)
