"""Planning: decide which sequences share a pack. numpy only — no torch, no pyarrow.

Notation: ``N`` sequences, ``P`` packs, ``T`` tokens, ``C`` capacity (tokens per pack).

Example:
    >>> from packwise.plan import plan_packs
    >>> plan = plan_packs([3, 7, 2, 5], capacity=8)
    >>> [p.tolist() for p in plan.packs()], plan.metrics().utilisation
    ([[1], [3, 0], [2]], 0.708333...)
"""

from ._align import align_lengths, alignment_multiple
from ._api import ALGORITHM_OPTIONS, ALGORITHMS, ALIASES, Algorithm, plan_packs, resolve_algorithm
from ._distribute import RankAssignment, assign_to_ranks, distribute, pack_costs
from ._histogram import HistogramPlan
from ._histogram_plan import HISTOGRAM_ALGORITHMS, plan_histogram
from ._plan import PackingMetrics, PackPlan

__all__ = [
    "ALGORITHMS",
    "ALGORITHM_OPTIONS",
    "ALIASES",
    "HISTOGRAM_ALGORITHMS",
    "Algorithm",
    "HistogramPlan",
    "PackPlan",
    "PackingMetrics",
    "RankAssignment",
    "align_lengths",
    "alignment_multiple",
    "assign_to_ranks",
    "distribute",
    "pack_costs",
    "plan_histogram",
    "plan_packs",
    "resolve_algorithm",
]
