"""Reports on packed datasets: ``report.json``, ``report.md`` and PNG plots written next to the data;
one pack rendered for inspection; planner comparisons over algorithms and capacities.

Depends on plan, io and pipeline; matplotlib (the ``plot`` extra) and the tokenizer (the ``hf`` extra) are
imported only when used.

``__all__`` is the user API; the other names imported here (``noqa: F401``) are the layer API the CLI uses.
"""

from ._compare import (  # noqa: F401
    compare_plans,
    lengths_from_packed,
    parse_algorithms,
    parse_capacities,
    read_lengths,
)
from ._files import (  # noqa: F401
    REPORT_FORMAT,
    REPORT_JSON,
    REPORT_MD,
    load_report,
    report_dict,
    report_from_metadata,
    report_markdown,
    write_report,
)
from ._inspect import pack_view, render_pack  # noqa: F401
from ._plots import PLOT_FILES, plot_dependency_error, preload  # noqa: F401
from ._stats import PackStats, read_pack_stats  # noqa: F401

__all__ = ["compare_plans", "write_report"]
