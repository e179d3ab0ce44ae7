"""Planner benchmark: every algorithm vs the lower bound, and installed peers, in one run.

    python benchmarks/bench_plan.py                 # N = 1e5, 1e6, 1e7 + chitchat + peers
    python benchmarks/bench_plan.py --sizes 1e5,1e6 --no-chitchat

Lengths: lognormal(6.1, 1.1), rounded, clipped to [1, 4096] (seed 0); and the real chitchat conversation
lengths (qwen2.5 tokens) truncated to each capacity. Times are best-of-``--repeat`` wall seconds on one
process. The baseline measured in the same run is a bare stable argsort of the lengths (what any exact
BFD/FFD assignment must at least do); ratios are reported against it and against the peers: seqpacker,
lightbinpack, TRL ``pack_dataset`` and ``binpacking`` (extra ``bench``), each skipped with a note when it
cannot be imported.
"""

from __future__ import annotations

import argparse
import gc
import math
import time
import tracemalloc

import numpy as np

from packwise.plan import ALGORITHMS, plan_packs

ITEM_LEVEL = {"first_fit_shuffle", "balanced_greedy_knapsack"}  # O(N log) Python steps: skipped at 1e7


def lognormal(n: int, capacity: int = 4096, seed: int = 0) -> np.ndarray:
    rng = np.random.default_rng(seed)
    return np.clip(np.rint(rng.lognormal(6.1, 1.1, n)), 1, capacity).astype(np.int64)


def best_time(fn, repeat: int) -> tuple[float, object]:
    best, out = math.inf, None
    for _ in range(repeat):
        gc.collect()
        t = time.perf_counter()
        out = fn()
        best = min(best, time.perf_counter() - t)
    return best, out


def peak_memory(fn) -> int:
    gc.collect()
    tracemalloc.start()
    fn()
    peak = tracemalloc.get_traced_memory()[1]
    tracemalloc.stop()
    return peak


def peers(lengths: np.ndarray, capacity: int, repeat: int, l1: int) -> list[tuple[str, str, float | None, int | None]]:
    """(peer, note, seconds, packs) for each peer at this N."""
    n = lengths.shape[0]
    rows = []
    try:
        import seqpacker  # noqa: F401

        rows.append(("seqpacker", "installed but not wired: no stable API known here", None, None))
    except ImportError:
        rows.append(("seqpacker", "not installable here (no wheel; sdist needs crates.io)", None, None))
    try:
        import lightbinpack

        as_list = lengths.tolist()
        for name in ("bfd", "ffd"):
            t, bins = best_time(lambda f=getattr(lightbinpack, name): f(as_list, capacity), repeat)
            rows.append((f"lightbinpack.{name}", "C++ extension, list input", t, len(bins)))
    except ImportError:
        rows.append(("lightbinpack", "not installed (pip install lightbinpack; compiles ~3 min)", None, None))
    if n <= 1_000_000:
        try:
            rows.append(_trl(lengths, capacity))
        except ImportError:
            rows.append(("trl.pack_dataset", "not installed", None, None))
    if n <= 100_000:
        try:
            import binpacking

            m = min(n, 10_000)
            sub = lengths[:m].tolist()
            t, bins = best_time(lambda: binpacking.to_constant_volume(sub, capacity), 1)
            rows.append((f"binpacking (first {m:,})", f"extrapolated ×{n // m} to N", t * n / m, None))
        except ImportError:
            rows.append(("binpacking", "not installed", None, None))
    return rows


def _trl(lengths: np.ndarray, capacity: int):
    import datasets
    import pyarrow as pa
    from trl import pack_dataset

    offsets = np.zeros(lengths.shape[0] + 1, dtype=np.int64)
    np.cumsum(lengths, out=offsets[1:])
    values = pa.array(np.zeros(int(offsets[-1]), dtype=np.int8))
    ds = datasets.Dataset(pa.table({"input_ids": pa.LargeListArray.from_arrays(pa.array(offsets), values)}))
    datasets.disable_progress_bars()
    t = time.perf_counter()
    packed = pack_dataset(ds, capacity, strategy="bfd", map_kwargs={"keep_in_memory": True})
    return ("trl.pack_dataset (bfd)", "1000-row windows (datasets.map default)", time.perf_counter() - t, len(packed))


def synthetic(sizes: list[int], repeat: int, with_peers: bool) -> None:
    cap = 4096
    for n in sizes:
        lengths = lognormal(n, cap)
        l1 = -(-int(lengths.sum()) // cap)
        key = lengths.astype(np.uint16)
        base, _ = best_time(lambda key=key: np.argsort(key, kind="stable"), repeat)
        print(f"\n### lognormal(6.1, 1.1), N = {n:,}, C = {cap}, L1 = {l1:,}\n")
        print(f"baseline (same run): stable radix argsort of N uint16 lengths = {base:.3f} s\n")
        print("| algorithm | time (s) | × argsort | packs | over L1 |")
        print("|---|---:|---:|---:|---:|")
        bfd_time = None
        for algo in ALGORITHMS:
            if n >= 10_000_000 and algo in ITEM_LEVEL:
                print(f"| {algo} | skipped | | | item-level O(N log C) Python: minutes at 1e7 |")
                continue
            reps = repeat if n <= 1_000_000 or algo in ("best_fit_decreasing", "first_fit_decreasing") else 1
            t, plan = best_time(lambda a=algo: plan_packs(lengths, capacity=cap, algorithm=a), reps)
            if algo == "best_fit_decreasing":
                bfd_time = t
            pct = 100.0 * (plan.num_packs - l1) / l1
            print(f"| {algo} | {t:.3f} | {t / base:.2f} | {plan.num_packs:,} | {pct:+.4f} % |")
        if n >= 10_000_000:
            peak = peak_memory(lambda: plan_packs(lengths, capacity=cap))
            print(f"\nBFD peak traced memory: {peak / 2**20:.0f} MiB = {peak / lengths.nbytes:.2f}× the int64 lengths")
        if with_peers:
            print("\n| peer | note | time (s) | packwise BFD speed-up | packs |")
            print("|---|---|---:|---:|---:|")
            for name, note, t, packs in peers(lengths, cap, 1 if n >= 10_000_000 else repeat, l1):
                if t is None:
                    print(f"| {name} | {note} | – | – | – |")
                else:
                    p = f"{packs:,}" if packs is not None else "–"
                    print(f"| {name} | {note} | {t:.3f} | {t / bfd_time:.1f}× | {p} |")


def chitchat(repeat: int) -> None:
    from packwise.pipeline._demo import chitchat_input
    from packwise.pipeline._samples import tokenize_rows
    from packwise.tokenize import load_tokenizer

    samples, _ = tokenize_rows(
        chitchat_input(), load_tokenizer("qwen2.5"), loss_on="assistant", chat_template=None, skip_bad_rows=False
    )
    full = samples.lengths
    print(f"\n### chitchat conversations (qwen2.5, ChatML), N = {full.shape[0]:,}, truncated to C\n")
    print("| algorithm | " + " | ".join(f"C={c}: packs (over L1), ms" for c in (2048, 4096, 8192)) + " |")
    print("|---|" + "---:|" * 3)
    for algo in ALGORITHMS:
        cells = []
        for cap in (2048, 4096, 8192):
            lengths = np.minimum(full, cap)
            l1 = -(-int(lengths.sum()) // cap)
            t, plan = best_time(lambda a=algo, x=lengths, c=cap: plan_packs(x, capacity=c, algorithm=a), repeat)
            cells.append(f"{plan.num_packs} ({plan.num_packs - l1:+d}), {1000 * t:.1f}")
        print(f"| {algo} | " + " | ".join(cells) + " |")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--sizes", default="1e5,1e6,1e7")
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--no-peers", action="store_true")
    ap.add_argument("--no-chitchat", action="store_true")
    args = ap.parse_args()
    sizes = [int(float(s)) for s in args.sizes.split(",") if s]
    synthetic(sizes, args.repeat, not args.no_peers)
    if not args.no_chitchat:
        chitchat(args.repeat)


if __name__ == "__main__":
    main()
