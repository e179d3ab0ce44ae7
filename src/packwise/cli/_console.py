"""Rich rendering shared by the CLI commands: progress bars on stderr, report tables on stdout."""

from __future__ import annotations

import contextlib
import os
import re
import sys
from collections.abc import Callable, Iterator
from typing import TYPE_CHECKING

from rich.console import Console

if TYPE_CHECKING:
    from rich.table import Table

#: Spaces at the end of a line (before any closing style codes).
_TRAILING = re.compile(r"[ \t]+((?:\x1b\[[0-9;]*m)*)$", re.MULTILINE)


class _Console(Console):
    """A rich ``Console`` whose output to a file or pipe has no trailing spaces: rich pads every table cell to
    its column's width, which a terminal hides but ``| tee``, diffs and CI logs keep."""

    def print(self, *objects, **kwargs) -> None:
        if self.is_terminal:
            super().print(*objects, **kwargs)
            return
        with self.capture() as captured:
            super().print(*objects, **kwargs)
        self.file.write(_TRAILING.sub(r"\1", captured.get()))
        self.file.flush()


# Piped or captured output (CI logs, `| tee`) gets 140 columns instead of rich's 80 so tables do not
# truncate their cells; a terminal or an explicit COLUMNS keeps rich's own width.
_WIDTH = None if sys.stdout.isatty() or os.environ.get("COLUMNS") else 140
out = _Console(width=_WIDTH)
err = Console(stderr=True, width=None if sys.stderr.isatty() or os.environ.get("COLUMNS") else 140)


@contextlib.contextmanager
def progress_bars(quiet: bool) -> Iterator[Callable[[str, int], Callable[[int], None]] | None]:
    """Yields ``start(stage, total) -> advance(n)`` (or None when quiet / not a terminal)."""
    if quiet:
        yield None
        return
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn  # lazy: 50 ms

    columns = (TextColumn("{task.description:>10}"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn())
    with Progress(*columns, console=err, transient=True, disable=not sys.stderr.isatty()) as progress:

        def start(stage: str, total: int) -> Callable[[int], None]:
            task = progress.add_task(stage, total=total)
            return lambda n: progress.advance(task, n)

        yield start


def _n(x: int) -> str:
    return f"{x:,}"


def _count(x: int, noun: str) -> str:
    """``1 sample``, ``2 samples``, ``1,000 tokens``."""
    return f"{x:,} {noun}{'' if x == 1 else 's'}"


def _avoided(x: int) -> str:
    """Padding avoided by packing; negative when the packs hold more slots (one short sample, say)."""
    return _count(x, "token") if x >= 0 else f"none ({_count(-x, 'token')} more)"


def _pct(a: float, b: float) -> str:
    return f"{100.0 * a / b:.2f} %" if b else "-"


def report_table(report, output: str | None = None) -> Table:
    """The pack report as one rich table (same figures as ``--json``)."""
    from rich.table import Table

    r, m = report, report.metrics
    t = Table(title=f"packwise pack — {r.input}", show_header=False, title_justify="left", box=None, pad_edge=False)
    t.add_column(style="bold cyan", no_wrap=True)
    t.add_column()
    rows = [
        ("settings", f"capacity {_n(r.capacity)} · {r.algorithm} · overflow {r.overflow} · loss on {r.loss_on}"),
        ("tokenizer", f"{r.tokenizer} ({r.tokenizer_fingerprint})" if r.tokenizer else "none (pre-tokenized)"),
        ("rows", f"{_n(r.rows_read)} read · {_n(r.rows_skipped)} skipped (bad) · {_count(r.samples, 'sample')}"),
        ("tokens read", _n(r.tokens_read)),
        ("truncated", f"{_count(r.tokens_truncated, 'token')} in {_count(r.samples_truncated, 'sample')}"),
        (
            "split",
            f"{_count(r.samples_split, 'sample')} into {_count(r.pieces_added, 'extra sequence')} (no token lost)",
        ),
        ("dropped", f"{_count(r.tokens_dropped, 'token')} in {_count(r.samples_dropped, 'sample')}"),
        ("tokens packed", f"{_n(r.tokens_packed)} ({_pct(r.tokens_packed, r.tokens_read)} of read)"),
        (
            "loss tokens",
            f"{_n(r.loss_tokens_packed)} packed of {_n(r.loss_tokens_read)} "
            f"({_n(r.loss_tokens_truncated + r.loss_tokens_dropped)} cut, "
            f"{_n(r.loss_tokens_masked_at_boundary)} masked at boundaries)",
        ),
        ("packs", f"{_n(r.packs)} (lower bound {_n(m.lower_bound_packs)}, +{m.excess_packs_pct:.3f} %)"),
        ("packs w/o loss", f"{_n(r.packs_without_loss)} (no target token: an HF mean loss over them is NaN)"),
        ("sequences", f"{_n(r.sequences_packed)} (up to {m.max_sequences_in_pack} per pack)"),
        ("utilisation", f"{m.utilisation:.4f} (fill min {m.fill_min:.3f}, balance {m.fill_balance:.3f})"),
        (
            "padding avoided",
            f"{_avoided(m.padding_avoided_vs_longest)} vs pad-to-longest (batch {m.batch_size}), "
            f"{_avoided(m.padding_avoided_vs_capacity)} vs pad-to-capacity",
        ),
        (
            "speed-up",
            f"{m.speedup_vs_longest:.2f}× vs pad-to-longest (ceiling {m.speedup_ceiling_vs_longest:.2f}×), "
            f"{m.speedup_vs_capacity:.2f}× vs pad-to-capacity (ceiling {m.speedup_ceiling:.2f}×)",
        ),
        ("plan hash", r.plan_hash[:16]),
    ]
    if r.drop_fields:
        rows.insert(3, ("fields dropped", f"{', '.join(r.drop_fields)} ({_count(r.field_values_dropped, 'value')})"))
    if r.timings:
        # the Ray engine applies the overflow policy on its workers, inside its tokenize step
        steps = {} if "overflow" in r.timings else {"tokenize": "tokenize+overflow"}
        rows.append(("time", " · ".join(f"{steps.get(k, k)} {v:.2f}s" for k, v in r.timings.items())))
    if output:
        rows.append(("output", output))
    for k, v in rows:
        t.add_row(k, v)
    return t
