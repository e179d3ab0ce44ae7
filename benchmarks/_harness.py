"""Shared benchmark harness: interleaved repeats, medians with spreads, and one JSON report per script.

Every figure is measured against a baseline timed *in the same run*, interleaved with it (A B A B A B),
so a busier machine moves both. A figure carries its value, its baseline, the ratio, the target and
whether the target was met; ``--json`` prints the whole report as one JSON object on stdout (tables go
to stderr then), ``--quick`` shrinks every size so a script runs in under a minute.
"""

from __future__ import annotations

import argparse
import contextlib
import gc
import json
import math
import os
import platform
import statistics
import sys
import time
from collections.abc import Callable
from datetime import datetime, timezone


def add_common(ap: argparse.ArgumentParser) -> None:
    ap.add_argument("--json", action="store_true", help="print one JSON object (figures, baselines, ratios, pass/fail)")
    ap.add_argument("--quick", action="store_true", help="small sizes: the whole script in under a minute")
    ap.add_argument("--repeat", type=int, default=3, help="interleaved repeats; figures are medians")


def interleaved(
    fns: dict[str, Callable[[], object]], repeat: int, *, before: Callable[[], object] | None = None
) -> dict[str, dict]:
    """Run every function ``repeat`` times, interleaved (A B A B …); ``before`` runs at the start of each
    repeat (e.g. to note the load). ``{name: {median, min, max, runs, out}}`` in seconds."""
    times: dict[str, list[float]] = {k: [] for k in fns}
    outs: dict[str, object] = {}
    for _ in range(repeat):
        if before is not None:
            before()
        for name, fn in fns.items():
            gc.collect()
            t = time.perf_counter()
            outs[name] = fn()
            times[name].append(time.perf_counter() - t)
    return {
        k: {"median": statistics.median(v), "min": min(v), "max": max(v), "runs": v, "out": outs[k]}
        for k, v in times.items()
    }


class Report:
    """Figures of one benchmark run; printed as markdown (stderr with --json) and as one JSON object."""

    def __init__(self, name: str, args: argparse.Namespace) -> None:
        self.name, self.args = name, args
        self.figures: list[dict] = []
        self.notes: list[str] = []
        self.out = sys.stderr if args.json else sys.stdout

    def say(self, text: str = "") -> None:
        print(text, file=self.out, flush=True)

    def figure(
        self,
        name: str,
        value: float,
        *,
        unit: str,
        baseline: str | None = None,
        baseline_value: float | None = None,
        ratio: float | None = None,
        ratio_means: str = "",
        target: str | None = None,
        met: bool | None = None,
        spread: tuple[float, float] | None = None,
    ) -> dict:
        """Record one figure. ``ratio`` defaults to value / baseline_value; ``target`` like ``">= 0.5"``
        applies to the ratio when there is one, else to the value."""
        if ratio is None and baseline_value:
            ratio = value / baseline_value
        if target is not None and met is None:
            op, bound = target.split()
            x = ratio if ratio is not None else value
            met = {"<=": x <= float(bound), ">=": x >= float(bound), "<": x < float(bound), ">": x > float(bound)}[op]
        fig = {
            "figure": name,
            "value": _num(value),
            "unit": unit,
            "baseline": baseline,
            "baseline_value": _num(baseline_value),
            "ratio": _num(ratio),
            "ratio_means": ratio_means,
            "target": target,
            "pass": met,
        }
        if spread is not None:
            fig["spread"] = [_num(spread[0]), _num(spread[1])]
        self.figures.append(fig)
        return fig

    def note(self, text: str) -> None:
        self.notes.append(text)

    def table(self) -> None:
        self.say("\n| figure | value | baseline (same run) | ratio | target | met |")
        self.say("|---|---:|---|---:|---|---|")
        for f in self.figures:
            self.say(table_row(f))
        for n in self.notes:
            self.say(f"\n{n}")

    def finish(self) -> None:
        self.table()
        if self.args.json:
            print(
                json.dumps(
                    {
                        "benchmark": self.name,
                        "date": datetime.now(timezone.utc).isoformat(timespec="seconds"),
                        "machine": machine(),
                        "quick": bool(self.args.quick),
                        "repeat": self.args.repeat,
                        "figures": self.figures,
                        "notes": self.notes,
                        "all_targets_met": all(f["pass"] is not False for f in self.figures),
                    },
                    indent=2,
                )
            )


def table_row(f: dict) -> str:
    """One figure as a markdown row: figure | value (spread) | baseline | ratio | target | met."""
    base = f"{f['baseline']}: {_fmt(f['baseline_value'])}" if f["baseline"] else "–"
    met = {True: "yes", False: "**no**", None: "–"}[f["pass"]]
    ratio = _fmt(f["ratio"]) if f["ratio"] is not None else "–"
    spread = f" ({_fmt(f['spread'][0])}–{_fmt(f['spread'][1])})" if f.get("spread") else ""
    return (
        f"| {f['figure']} | {_fmt(f['value'])} {f['unit']}{spread} | {base} | {ratio} | {f['target'] or '–'} | {met} |"
    )


def machine() -> dict:
    import numpy as np

    info = {
        "python": platform.python_version(),
        "numpy": np.__version__,
        "cpus": os.cpu_count(),
        "processor": _cpu_model() or platform.processor() or platform.machine(),
    }
    try:
        import torch

        info["torch"] = torch.__version__
    except ImportError:
        pass
    with contextlib.suppress(OSError):
        info["loadavg_1m"] = round(os.getloadavg()[0], 2)
    return info


def _cpu_model() -> str:
    with contextlib.suppress(OSError), open("/proc/cpuinfo") as f:
        for line in f:
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    return ""


def _num(x):
    if x is None:
        return None
    if isinstance(x, float) and not math.isfinite(x):
        return None
    return round(float(x), 6) if isinstance(x, float) else x


def _fmt(x) -> str:
    if x is None:
        return "–"
    if isinstance(x, int) or (isinstance(x, float) and x.is_integer() and abs(x) >= 1000):
        return f"{int(x):,}"
    if abs(x) >= 100:
        return f"{x:,.0f}"
    if abs(x) >= 1:
        return f"{x:.2f}"
    return f"{x:.4f}"
