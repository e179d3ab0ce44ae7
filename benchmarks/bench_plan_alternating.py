"""BFD against the bare stable argsort at one N, two revisions in alternating processes (the 10 M row).

    python benchmarks/bench_plan_alternating.py --base main [--size 1e7] [--processes 3] [--repeat 5] [--json]

Each process times ``plan_packs`` (BFD) and ``np.argsort(lengths.astype(np.uint16), kind="stable")``
interleaved ``--repeat`` times on lognormal(6.1, 1.1) lengths (seed 0, C = 4096); the processes alternate
base / head ``--processes`` times. Per side: the median over processes of the per-process median ratio, with
its spread. ``--base`` is extracted with ``git archive`` (as ``before_after.py`` does).
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
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args()
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
    result = {"size": n, "base": args.base, "loadavg_1m": round(os.getloadavg()[0], 2)}
    for side, rs in runs.items():
        ratios = [r["bfd"] / r["argsort"] for r in rs]
        result[side] = {
            "bfd_s": statistics.median(r["bfd"] for r in rs),
            "argsort_s": statistics.median(r["argsort"] for r in rs),
            "ratio": statistics.median(ratios),
            "spread": [min(ratios), max(ratios)],
        }
    if args.json:
        print(json.dumps(result, indent=2))
        return
    print(f"N = {n:,}, {args.processes} alternating processes per side, {args.repeat} interleaved repeats each")
    for side in ("base", "head"):
        r = result[side]
        lo, hi = r["spread"]
        print(
            f"{side}: BFD {r['bfd_s']:.4f} s, argsort {r['argsort_s']:.4f} s, BFD / argsort {r['ratio']:.2f} "
            f"({lo:.2f}–{hi:.2f})"
        )


if __name__ == "__main__":
    main()
