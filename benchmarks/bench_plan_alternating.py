"""BFD against the bare stable argsort at one N, two revisions in alternating processes (the 10 M row).

    python benchmarks/bench_plan_alternating.py --base main [--size 1e7] [--processes 3] [--repeat 5] [--json] [--quick]

Each process times ``plan_packs`` (BFD) and ``np.argsort(lengths.astype(np.uint16), kind="stable")``
interleaved ``--repeat`` times on lognormal(6.1, 1.1) lengths (seed 0, C = 4096); the processes alternate
base / head ``--processes`` times. Per side: the median over processes of the per-process median ratio, with
its spread. ``--base`` is extracted with ``git archive`` (as ``before_after.py`` does). Targets (#20): BFD
≤ 1.3× the argsort at 10 M, ≤ 3× at 1 M. ``--quick``: N = 1 M, 2 processes per side, 3 repeats.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

from _harness import Report
from before_after import ROOT, extract

CHILD = """
import gc, json, statistics, sys, time
import numpy as np
sys.path.insert(0, {bench!r})
from bench_plan import lognormal
from packwise.plan import plan_packs
x = lognormal({n}); key = x.astype(np.uint16)
plan_packs(x, capacity=4096)
a, b = [], []
for _ in range({repeat}):
    gc.collect(); t = time.perf_counter(); np.argsort(key, kind="stable"); a.append(time.perf_counter() - t)
    gc.collect(); t = time.perf_counter(); plan_packs(x, capacity=4096); b.append(time.perf_counter() - t)
print(json.dumps({{"argsort": statistics.median(a), "bfd": statistics.median(b)}}))
"""


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--base", required=True)
    ap.add_argument("--size", default="1e7")
    ap.add_argument("--processes", type=int, default=3)
    ap.add_argument("--repeat", type=int, default=5)
    ap.add_argument("--json", action="store_true", help="print one JSON object (figures, baselines, ratios, pass/fail)")
    ap.add_argument("--quick", action="store_true", help="N = 1 M, 2 processes per side, 3 repeats: under a minute")
    args = ap.parse_args()
    if args.quick:
        args.size, args.processes, args.repeat = str(min(float(args.size), 1e6)), 2, min(args.repeat, 3)
    n = int(float(args.size))
    code = CHILD.format(bench=str(ROOT / "benchmarks"), n=n, repeat=args.repeat)
    runs: dict[str, list[dict]] = {"base": [], "head": []}
    with tempfile.TemporaryDirectory() as tmp:
        sides = (("base", extract(args.base, Path(tmp))), ("head", ROOT / "src"))
        for _ in range(args.processes):
            for side, src in sides:
                env = {**os.environ, "PYTHONPATH": str(src), "OMP_NUM_THREADS": "1"}
                out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, check=True)
                runs[side].append(json.loads(out.stdout))
    rep = Report("plan_alternating", args)
    rep.say(f"N = {n:,}, {args.processes} alternating processes per side, {args.repeat} interleaved repeats each")
    target = "<= 1.3" if n >= 10_000_000 else "<= 3" if n >= 1_000_000 else None
    for side, rs in runs.items():
        ratios = [r["bfd"] / r["argsort"] for r in rs]
        rep.figure(
            f"BFD ({side}: {args.base if side == 'base' else 'working tree'}) vs the bare stable argsort",
            statistics.median(r["bfd"] for r in rs),
            unit="s",
            baseline="np.argsort(uint16, stable) s",
            baseline_value=statistics.median(r["argsort"] for r in rs),
            ratio=statistics.median(ratios),
            ratio_means="median over processes of the per-process median BFD / argsort (lower is better)",
            target=target if side == "head" else None,
            spread=(min(ratios), max(ratios)),
        )
    rep.finish()


if __name__ == "__main__":
    main()
