"""``packwise report``: (re)write report.json, report.md and the plots of a packed dataset directory."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Annotated

import typer

from ._console import err, out, report_table


def report(
    path: Annotated[Path, typer.Argument(metavar="PATH", help="Output directory of `packwise pack`.")],
    plots: Annotated[bool, typer.Option(help="Draw the PNG plots (needs matplotlib: the plot extra).")] = True,
    json_out: Annotated[
        bool, typer.Option("--json", help="Print report.json (plus the files written) on stdout.")
    ] = False,
    quiet: Annotated[bool, typer.Option("--quiet", "-q", help="Print nothing.")] = False,
) -> None:
    """Rewrite report.json, report.md and the plots (report-*.png) of a packed dataset directory.

    Figures come from metadata.json and the Parquet shards, so they equal those of the original run. Without matplotlib (the plot extra) the plots are skipped and the JSON and Markdown still written.
    """
    from ..report import load_report, write_report

    rep = load_report(path)
    files = write_report(path, rep, plots=plots)
    data = json.loads(files[0].read_text())
    if json_out:
        out.print_json(json.dumps({**data, "files": [str(f) for f in files]}))
        return
    if quiet:
        return
    out.print(report_table(rep, str(path)))
    out.print(f"[bold cyan]report[/] {', '.join(f.name for f in files)} written to {path}", highlight=False)
    if data["plots_skipped"] and plots:
        err.print(f"[yellow]plots skipped:[/] {data['plots_skipped']}", highlight=False, soft_wrap=True)
