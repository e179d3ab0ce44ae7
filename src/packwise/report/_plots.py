"""The report's PNG plots (matplotlib, imported lazily; the ``plot`` extra).

Figures are drawn with matplotlib's object API on an Agg canvas: no pyplot, no global backend switch, so
writing a report never changes the backend of the caller's interactive session. Margins are fixed (no
constrained or tight layout: measuring every label cost about as much as drawing the figure, issue 29), and
``packwise pack`` imports matplotlib on a background thread while it tokenizes (:func:`preload`).
"""

from __future__ import annotations

import os
import threading
from pathlib import Path

import numpy as np

from ._stats import FILL_BINS, LENGTH_BINS, PackStats, histogram

#: Plot name -> file name, in the order they are written.
PLOT_FILES = {
    "lengths": "report-lengths.png",
    "fill": "report-fill.png",
    "tokens": "report-tokens.png",
    "speedup": "report-speedup.png",
}
PLOT_TITLES = {
    "report-lengths.png": "Packed sequence lengths",
    "report-fill.png": "Pack fill",
    "report-tokens.png": "Tokens processed",
    "report-speedup.png": "Speed-up ceiling",
}
SIZE_IN, DPI = (7.0, 4.2), 100
#: Fixed subplot margins (fractions of the figure): room for 6-character tick labels and the axis labels.
MARGINS = {"left": 0.12, "right": 0.97, "bottom": 0.13, "top": 0.92}
#: Titles at a fixed height: with ``y`` given, matplotlib skips placing them by measuring the axes again.
TITLE = {"y": 1.0}
PACKED, BASE, CAP, EDGE = "#2a9d8f", "#8d99ae", "#d62828", "#264653"


def plot_dependency_error() -> str | None:
    """Why the plots cannot be drawn (matplotlib missing), or None when they can.

    Example:
        >>> plot_dependency_error() is None  # matplotlib is installed here
        True
    """
    try:
        import matplotlib  # noqa: F401
    except ImportError:
        return "matplotlib is not installed; pip install 'packwise[plot]' and run `packwise report PATH`"
    return None


def _import_matplotlib() -> None:
    try:
        from matplotlib.backends.backend_agg import FigureCanvasAgg  # noqa: F401
        from matplotlib.figure import Figure  # noqa: F401
        from matplotlib.ticker import EngFormatter, MaxNLocator  # noqa: F401
    except ImportError:  # plot_dependency_error() says so when the plots are drawn
        pass


def preload() -> threading.Thread:
    """Import matplotlib (about 1 s of CPU, most of a report's cost) on a daemon thread, started while the
    caller does other work (``packwise pack`` starts it before tokenizing, whose Rust threads release the
    GIL); :func:`write_plots` joins it. Without matplotlib the thread just ends.

    Example:
        >>> t = preload()
        >>> t.join(); t.is_alive()
        False
    """
    global _PRELOAD
    thread = threading.Thread(target=_import_matplotlib, name="packwise-plot-import", daemon=True)
    thread.start()
    _PRELOAD = thread
    return thread


_PRELOAD: threading.Thread | None = None


def _figure():
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    fig = Figure(figsize=SIZE_IN, dpi=DPI)
    FigureCanvasAgg(fig)
    fig.subplots_adjust(**MARGINS)
    return fig, fig.add_subplot()


def _save(fig, path: Path) -> None:
    tmp = path.with_name(f".{path.name}.tmp-{os.getpid()}")
    try:
        # no "Software" key: the PNG bytes depend on the data only, like the rest of the output
        fig.savefig(tmp, format="png", metadata={"Software": None})
        os.replace(tmp, path)
    finally:
        tmp.unlink(missing_ok=True)


def _bars(ax, edges, counts, *, label: str) -> None:
    from matplotlib.ticker import MaxNLocator

    widths = np.diff(edges)
    ax.bar(edges[:-1], counts, width=widths, align="edge", color=PACKED, edgecolor="white", linewidth=0.6, label=label)
    ax.yaxis.set_major_locator(MaxNLocator(integer=True))


def plot_lengths(report, stats: PackStats):
    """(a) Histogram of packed sequence lengths (tokens), with the capacity as a vertical line."""
    fig, ax = _figure()
    c, n = report.capacity, int(stats.seq_lengths.shape[0])
    edges, counts = histogram(stats.seq_lengths, c, LENGTH_BINS)
    _bars(ax, edges, counts, label=f"{n:,} packed sequences")
    ax.axvline(c, color=CAP, linestyle="--", linewidth=1.6, label=f"capacity C = {c:,} tokens")
    cut = report.samples_truncated + report.samples_split
    if cut:
        ax.text(0.02, 0.97, f"{report.samples_truncated:,} truncated, {report.samples_split:,} split at C",
                transform=ax.transAxes, va="top", fontsize=9)  # fmt: skip
    mean = stats.seq_lengths.mean() if n else 0.0
    ax.set_title(f"Packed sequence lengths — mean {mean:,.1f} tokens", **TITLE)
    ax.set_xlabel(f"tokens per sequence (bins of {edges[1] - edges[0]:,})")
    ax.set_ylabel("sequences")
    ax.set_xlim(0, c * 1.04)
    ax.legend(loc="upper right", fontsize=9)
    return fig


def plot_fill(report, stats: PackStats):
    """(b) Histogram of pack fill: tokens per pack / capacity."""
    fig, ax = _figure()
    c, m = report.capacity, report.metrics
    edges, counts = histogram(stats.pack_tokens, c, FILL_BINS)
    _bars(ax, [e / c for e in edges], counts, label=f"{m.num_packs:,} packs")
    ax.axvline(m.utilisation, color=EDGE, linestyle=":", linewidth=1.6,
               label=f"utilisation {m.utilisation:.4f}")  # fmt: skip
    ax.axvline(1.0, color=CAP, linestyle="--", linewidth=1.6, label=f"full = {c:,} tokens")
    ax.set_title(f"Pack fill — min {m.fill_min:.3f}, balance {m.fill_balance:.3f}", **TITLE)
    ax.set_xlabel("pack fill (tokens per pack / capacity)")
    ax.set_ylabel("packs")
    ax.set_xlim(0, 1.04)
    ax.legend(loc="upper left", fontsize=9)
    return fig


def plot_tokens(report):
    """(c) Tokens processed: packed (P × C) vs pad-to-longest vs pad-to-capacity, with the real tokens."""
    fig, ax = _figure()
    m = report.metrics
    names = ["packed\n(P × C)", f"pad-to-longest\n(batch {m.batch_size})", "pad-to-capacity\n(N × C)"]
    values = [m.num_packs * m.capacity, m.pad_to_longest_tokens, m.pad_to_capacity_tokens]
    bars = ax.bar(names, values, color=[PACKED, BASE, BASE], edgecolor=EDGE, width=0.6)
    real = m.total_tokens
    labels = [f"{v:,}\n{v / real:.2f}× real" if real else f"{v:,}" for v in values]
    ax.bar_label(bars, labels=labels, padding=3, fontsize=9)
    ax.axhline(real, color=CAP, linestyle="--", linewidth=1.6, label=f"real tokens T = {real:,}")
    ax.set_ylim(0, max([*values, real, 1]) * 1.25)
    ax.set_title(f"Tokens processed — {m.num_sequences:,} sequences in {m.num_packs:,} packs", **TITLE)
    ax.set_ylabel("tokens")
    from matplotlib.ticker import EngFormatter

    ax.yaxis.set_major_formatter(EngFormatter(sep=" "))  # 17.5 M: short labels fit the fixed left margin
    ax.legend(loc="upper left", fontsize=9)
    return fig


def plot_speedup(report):
    """(d) Speed-up ceiling 1 / (1 − waste) of each baseline, with the speed-up packing achieved."""
    fig, ax = _figure()
    m = report.metrics
    t = m.total_tokens
    points = [
        ("pad-to-longest", m.pad_to_longest_tokens, m.speedup_ceiling_vs_longest, m.speedup_vs_longest, BASE),
        ("pad-to-capacity", m.pad_to_capacity_tokens, m.speedup_ceiling, m.speedup_vs_capacity, EDGE),
    ]
    wastes = [1.0 - t / base if base else 0.0 for _, base, *_ in points]
    w_max = min(0.995, max([0.9, *(w + 0.05 for w in wastes)]))
    w = np.linspace(0.0, w_max, 400)
    ax.plot(w, 1.0 / (1.0 - w), color=CAP, linewidth=1.6, label="ceiling = 1 / (1 − waste)")
    for (name, _, ceiling, achieved, color), waste in zip(points, wastes):
        ax.scatter([waste], [ceiling], s=60, color=color, zorder=3, label=f"{name} ceiling")
        ax.scatter([waste], [achieved], s=150, facecolors="none", edgecolors=color, linewidths=1.8, zorder=4,
                   label=f"{name}: packed achieves")  # fmt: skip
        ax.annotate(f"{name}\nwaste {100 * waste:.1f} % → ceiling {ceiling:.2f}×\npacked {achieved:.2f}×",
                    (waste, ceiling), textcoords="offset points", xytext=(-12, 10), ha="right", fontsize=9)  # fmt: skip
    y_top = max(3.0, *(p[2] for p in points), *(p[3] for p in points)) * 1.3
    ax.set_ylim(0.8, y_top)
    ax.set_xlim(0, w_max)
    ax.set_title(f"Speed-up ceiling — utilisation {m.utilisation:.4f}", **TITLE)
    ax.set_xlabel("waste of the baseline (padding / tokens processed)")
    ax.set_ylabel("speed-up (tokens processed)")
    ax.legend(loc="upper left", fontsize=8)
    return fig


def write_plots(out_dir, report, stats: PackStats) -> list[Path]:
    """Draw the four plots into ``out_dir`` (see :data:`PLOT_FILES`); returns the paths written.

    Raises:
        ImportError: matplotlib is missing (check :func:`plot_dependency_error` first).
    """
    if _PRELOAD is not None:
        _PRELOAD.join()  # matplotlib half-imported on the other thread: wait for it, never race it
    out_dir = Path(out_dir)
    figures = {
        "lengths": lambda: plot_lengths(report, stats),
        "fill": lambda: plot_fill(report, stats),
        "tokens": lambda: plot_tokens(report),
        "speedup": lambda: plot_speedup(report),
    }
    paths = []
    for name, draw in figures.items():
        path = out_dir / PLOT_FILES[name]
        _save(draw(), path)
        paths.append(path)
    return paths
