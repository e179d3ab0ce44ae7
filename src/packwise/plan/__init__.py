"""Planning: decide which sequences share a pack. numpy only — no torch, no pyarrow.

Notation: ``N`` sequences, ``P`` packs, ``T`` tokens, ``C`` capacity (tokens per pack).

``__all__`` is the user API. The other names imported here (marked ``noqa: F401``) are the layer API: what
config, stream, report and the integrations import from the planner instead of reaching into ``plan._*``.

Example:
    >>> from packwise.plan import plan_packs
    >>> plan = plan_packs([3, 7, 2, 5], capacity=8)
    >>> [p.tolist() for p in plan.packs()], plan.metrics().utilisation
    ([[1], [3, 0], [2]], 0.708333...)
"""

from ._align import align_lengths, alignment_multiple  # noqa: F401
from ._api import (  # noqa: F401
    ALGORITHM_OPTIONS,
    ALGORITHMS,
    ALIASES,
    MAX_CAPACITY,
    RANDOMIZED,
    Algorithm,
    as_lengths,
    check_algorithm_options,
    plan_packs,
    resolve_algorithm,
)
from ._bfd_items import ITEM_PATH_MAX  # noqa: F401
from ._cost import ComputeCost, causal_pairs  # noqa: F401
from ._distribute import Cost, RankAssignment, assign_to_ranks, distribute, pack_costs  # noqa: F401
from ._flat import aranges, gather_index, mask_boundaries, segment_layout  # noqa: F401
from ._histogram import HistogramPlan
from ._histogram_plan import HISTOGRAM_ALGORITHMS, plan_histogram  # noqa: F401
from ._plan import PackingMetrics, PackPlan
from ._window import plan_window  # noqa: F401

__all__ = [
    "HistogramPlan",
    "PackPlan",
    "PackingMetrics",
    "alignment_multiple",
    "distribute",
    "plan_histogram",
    "plan_packs",
]
