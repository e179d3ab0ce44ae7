"""plan_histogram at internet scale: 1e9 sequences planned from ``counts[length]`` (never the 1e9 array).

    python benchmarks/bench_plan_histogram.py                 # N = 1e9, C = 4096, every histogram planner
    python benchmarks/bench_plan_histogram.py --n 1e7 --check # also plan_packs on the expanded 1e7 lengths
    python benchmarks/bench_plan_histogram.py --quick --json  # N = 1e6 with --check; one JSON object

Lengths: lognormal(6.1, 1.1) clipped to [1, C] (``bench_plan.py``'s distribution); the histogram is one
multinomial draw of N over the exact bin probabilities, so the 1e9 lengths never exist. ``--check`` expands
the histogram (N must fit in memory) and compares pack counts and plan hashes with ``plan_packs``.
balanced_greedy_knapsack is left out above 1e8 (its loads diverge, so its groups grow with N: about 300 s at
1e9 here); name it with ``--algorithm`` to run it anyway. Figures: each planner's seconds and packs over the
L1 lower bound (ceil(tokens / C)); with ``--check``, ``plan_packs`` on the expanded lengths is the baseline
timed in the same run (ratio = histogram / plan_packs seconds) and the plans must be identical (target).
"""

from __future__ import annotations

import argparse
import math
import time

import numpy as np
from _harness import Report

from packwise.plan import HISTOGRAM_ALGORITHMS, plan_histogram, plan_packs


def lognormal_counts(n: int, capacity: int, mu: float = 6.1, sigma: float = 1.1, seed: int = 0) -> np.ndarray:
    edges = np.arange(0.5, capacity + 1.5)
    cdf = np.array([0.5 * (1 + math.erf((math.log(e) - mu) / (sigma * math.sqrt(2)))) for e in edges])
    p = np.diff(cdf)
    p[-1] += 1 - cdf[-1]  # lengths over C are clipped to C
    p /= p.sum()
    return np.concatenate([[0], np.random.default_rng(seed).multinomial(n, p)]).astype(np.int64)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--n", type=float, default=1e9)
    ap.add_argument("--capacity", type=int, default=4096)
    ap.add_argument("--algorithm", default="")
    ap.add_argument("--check", action="store_true")
    ap.add_argument("--json", action="store_true", help="print one JSON object (figures, baselines, ratios, pass/fail)")
    ap.add_argument("--quick", action="store_true", help="N = 1e6 with --check: under a minute")
    args = ap.parse_args()
    args.repeat = 1
    if args.quick:
        args.n, args.check = min(args.n, 1e6), True
    rep = Report("plan_histogram", args)
    n = int(args.n)
    counts = lognormal_counts(n, args.capacity)
    names = args.algorithm.split(",") if args.algorithm else list(HISTOGRAM_ALGORITHMS)
    if not args.algorithm and n > 10**8:
        names.remove("balanced_greedy_knapsack")
    rep.say(f"N = {n:,}, C = {args.capacity}, tokens = {int((np.arange(counts.shape[0]) * counts).sum()):,}")
    lengths = np.repeat(np.arange(counts.shape[0]), counts) if args.check else None
    if lengths is not None:
        np.random.default_rng(1).shuffle(lengths)
    for name in names:
        t = time.perf_counter()
        hp = plan_histogram(counts, capacity=args.capacity, algorithm=name)
        dt = time.perf_counter() - t
        s = hp.summary()
        rep.figure(
            f"{name}: packs over the L1 lower bound",
            s["excess_packs_pct"],
            unit=f"% ({s['num_packs']:,} packs, L1 {s['lower_bound_packs']:,}, {s['templates']:,} templates)",
        )
        if lengths is None:
            rep.figure(f"{name}: plan_histogram time", dt, unit="s")
            continue
        t = time.perf_counter()
        ref = plan_packs(lengths, capacity=args.capacity, algorithm=name)
        dt_ref = time.perf_counter() - t
        same = ref.plan_hash() == hp.expand(lengths).plan_hash()
        rep.figure(
            f"{name}: plan_histogram time",
            dt,
            unit="s",
            baseline="plan_packs on the expanded lengths, s",
            baseline_value=dt_ref,
            ratio_means="histogram / plan_packs seconds (lower is better)",
        )
        rep.figure(f"{name}: same plan as plan_packs", int(same), unit="(1 = identical plan hash)", target=">= 1")
    rep.finish()


if __name__ == "__main__":
    main()
