"""Reports on packed datasets: ``report.json``, ``report.md`` and PNG plots written next to the data;
one pack rendered for inspection; planner comparisons over algorithms and capacities.

Depends on plan, io and pipeline; matplotlib (the ``plot`` extra) and the tokenizer (the ``hf`` extra) are
imported only when used.
"""

from ._compare import compare_plans, lengths_from_packed, read_lengths
from ._files import (
    REPORT_FORMAT,
    REPORT_JSON,
    REPORT_MD,
    load_report,
    report_dict,
    report_from_metadata,
    report_markdown,
    write_report,
)
from ._inspect import pack_view, render_pack
from ._plots import PLOT_FILES, plot_dependency_error
from ._stats import PackStats, read_pack_stats

__all__ = [
    "PLOT_FILES",
    "REPORT_FORMAT",
    "REPORT_JSON",
    "REPORT_MD",
    "PackStats",
    "compare_plans",
    "lengths_from_packed",
    "load_report",
    "pack_view",
    "plot_dependency_error",
    "read_lengths",
    "read_pack_stats",
    "render_pack",
    "report_dict",
    "report_from_metadata",
    "report_markdown",
    "write_report",
]
