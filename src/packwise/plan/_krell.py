"""Shortest-pack-first and longest-pack-first histogram packing (SPFHP, LPFHP).

Source: M. M. Krell, M. Kosec, S. P. Perez, A. Fitzgibbon, "Efficient Sequence Packing without
Cross-contamination: Accelerating Large Language Models without Impacting Performance", arXiv 2107.02027
(2021), and Graphcore's published ``spfhp.py`` / ``lpfhp.py``. Our reading, re-implemented on the shared
group engine:

- both walk the length histogram from the longest length to the shortest and keep open packs in stacks
  keyed by free space (most recently stored group first);
- SPFHP (worst fit): each sequence goes to the open pack with the *most* free space, one sequence per pack
  per step; when nothing fits, every remaining sequence of that length opens its own pack;
- LPFHP (best fit): each sequence goes to the open pack with the *least* free space that fits, as many
  copies as fit (Graphcore's ``distribute=True``); when nothing fits, new packs take as many copies as fit.
  With lowest-index ties instead of stacks this is BFD.

A pack is closed when full or when it holds ``max_sequences_per_pack`` sequences. No worst-case bound is
published; Krell et al. report 99.6 % (SPFHP) and 99.8 % (LPFHP) efficiency on Wikipedia at 512 tokens
with at most 12 sequences per pack. Complexity O(N) + O(E log C) Python steps; deterministic; never
splits or drops.

Measured (``benchmarks/bench_plan.py``; lognormal(6.1, 1.1) lengths clipped to [1, 4096], C = 4096, N = 1 M
unless stated):
spfhp: 186,075 packs (+0.2365 % over L1 = 185,636), N = 10 M: 1,856,526 (+0.206 %), chitchat 780 for L1 = 776;
lpfhp: 185,640 (+0.0022 %), N = 10 M: 1,852,744, chitchat 776 = L1.
"""

from __future__ import annotations

from ._engine import HistogramBuilder
from ._fit_decreasing import place_decreasing


def place_spfhp(builder: HistogramBuilder, *, max_seqs: int) -> list:
    return place_decreasing(builder, max_seqs=max_seqs, policy="worst_lifo_one")


def place_lpfhp(builder: HistogramBuilder, *, max_seqs: int) -> list:
    return place_decreasing(builder, max_seqs=max_seqs, policy="best_lifo")
