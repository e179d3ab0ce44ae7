"""Planner benchmark: every algorithm vs the lower bound, a bare argsort and installed peers, in one run.

    python benchmarks/bench_plan.py                 # N = 1e5, 1e6, 1e7 + chitchat + peers
    python benchmarks/bench_plan.py --sizes 1e5,1e6 --no-chitchat
    python benchmarks/bench_plan.py --quick --json  # N = 1e5, 1e6; one JSON object

Lengths: lognormal(6.1, 1.1), rounded, clipped to [1, 4096] (seed 0); and the real chitchat conversation
lengths (qwen2.5 tokens) truncated to each capacity. BFD and the baseline — a bare stable argsort of the
lengths (what any exact BFD/FFD assignment must at least do) — are timed interleaved, ``--repeat`` times,
medians. Targets: BFD ≤ 3× the argsort at 1 M, ≤ 1.3× at 10 M; peak traced memory ≤ 2.5× the int64
lengths. Peers (extra ``bench``): seqpacker (Rust; ``obfd``), lightbinpack (C++; ``bfd``, ``ffd``, ``obfd``),
TRL ``pack_dataset`` and ``binpacking``, each skipped with a note when it cannot be imported.
"""

from __future__ import annotations

import argparse
import gc
import math
import time
import tracemalloc

import numpy as np
from _harness import Report, add_common, interleaved

from packwise.plan import ALGORITHMS, plan_packs

ITEM_LEVEL = {"first_fit_shuffle", "balanced_greedy_knapsack"}  # O(N log) Python steps: skipped at 1e7
TARGET_VS_ARGSORT = {1_000_000: "<= 3", 10_000_000: "<= 1.3"}


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


def peers(
    lengths: np.ndarray, capacity: int, repeat: int, quick: bool
) -> list[tuple[str, str, float | None, int | None]]:
    """(peer, note, seconds, packs) for each peer at this N."""
    n = lengths.shape[0]
    rows = []
    try:
        import seqpacker

        packer = seqpacker.Packer(capacity, strategy="obfd")
        t, (_, offsets) = best_time(lambda: packer.pack_flat(lengths), repeat)
        rows.append(("seqpacker obfd (Rust)", "Packer.pack_flat, int64 numpy input", t, len(offsets) - 1))
    except ImportError:
        rows.append(("seqpacker", "not installed (pip install seqpacker; no wheel for this platform, the sdist needs Rust)", None, None))  # fmt: skip
    try:
        import lightbinpack

        as_list = lengths.tolist()
        for name in ("bfd", "ffd", "obfd"):
            fn = getattr(lightbinpack, name, None)
            if fn is None:
                rows.append((f"lightbinpack.{name}", "not in this lightbinpack version", None, None))
                continue
            t, bins = best_time(lambda f=fn: f(as_list, capacity), repeat)
            rows.append((f"lightbinpack.{name} (C++)", "list input", t, len(bins)))
    except ImportError:
        rows.append(
            ("lightbinpack", "not installed (pip install lightbinpack==0.1.1; compiles C++ ~3 min)", None, None)
        )
    if not quick and n <= 1_000_000:
        try:
            rows.append(_trl(lengths, capacity))
        except ImportError:
            rows.append(("trl.pack_dataset", "not installed", None, None))
    if not quick and n <= 100_000:
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


def synthetic(rep: Report, sizes: list[int], repeat: int, with_peers: bool, quick: bool) -> None:
    cap = 4096
    for n in sizes:
        lengths = lognormal(n, cap)
        l1 = -(-int(lengths.sum()) // cap)
        key = lengths.astype(np.uint16)
        t = interleaved(
            {
                "argsort": lambda key=key: np.argsort(key, kind="stable"),
                "bfd": lambda x=lengths: plan_packs(x, capacity=cap),
            },
            repeat,
        )
        base, bfd = t["argsort"], t["bfd"]
        try:  # packwise's own stable argsort (packed-key sort), the floor of its BFD; absent in older revisions
            from packwise.plan._sort import sort_by_length

            own = interleaved({"sort": lambda x=lengths: sort_by_length(x, cap)}, repeat)["sort"]["median"]
            rep.figure(
                f"BFD N={n:,} vs packwise's own stable argsort (sort_by_length)",
                bfd["median"],
                unit="s",
                baseline="sort_by_length s",
                baseline_value=own,
                ratio_means="BFD time / the sort it starts with (lower is better)",
            )
        except ImportError:
            pass
        rep.figure(
            f"BFD N={n:,} vs a stable radix argsort",
            bfd["median"],
            unit="s",
            baseline="argsort s",
            baseline_value=base["median"],
            ratio_means="BFD time / argsort time (lower is better)",
            target=TARGET_VS_ARGSORT.get(n),
            spread=(bfd["min"], bfd["max"]),
        )
        bfd_time = bfd["median"]
        rep.say(f"\n### lognormal(6.1, 1.1), N = {n:,}, C = {cap}, L1 = {l1:,}\n")
        rep.say(f"baseline (same run): stable radix argsort of N uint16 lengths = {base['median']:.4f} s (median)\n")
        rep.say("| algorithm | time (s) | × argsort | packs | over L1 |")
        rep.say("|---|---:|---:|---:|---:|")
        for algo in ALGORITHMS:
            if (n >= 10_000_000 or (quick and n >= 1_000_000)) and algo in ITEM_LEVEL:
                rep.say(f"| {algo} | skipped | | | item-level O(N log C) Python: minutes at 1e7 |")
                continue
            if algo == "best_fit_decreasing":
                tt, plan = bfd_time, bfd["out"]
            else:
                reps = repeat if n <= 1_000_000 or algo == "first_fit_decreasing" else 1
                tt, plan = best_time(lambda a=algo: plan_packs(lengths, capacity=cap, algorithm=a), reps)
            pct = 100.0 * (plan.num_packs - l1) / l1
            rep.say(f"| {algo} | {tt:.3f} | {tt / base['median']:.2f} | {plan.num_packs:,} | {pct:+.4f} % |")
            if algo == "best_fit_decreasing":
                rep.figure(f"BFD N={n:,} packs over L1", pct, unit="%", ratio_means="absolute")
        if n >= 1_000_000:
            peak = peak_memory(lambda: plan_packs(lengths, capacity=cap))
            rep.figure(
                f"BFD N={n:,} peak traced memory vs the int64 lengths",
                peak / 2**20,
                unit="MiB",
                baseline="lengths MiB",
                baseline_value=lengths.nbytes / 2**20,
                ratio_means="peak / lengths (lower is better)",
                target="<= 2.5",
            )
        if with_peers:
            rep.say("\n| peer | note | time (s) | packwise BFD speed-up | packs |")
            rep.say("|---|---|---:|---:|---:|")
            for name, note, pt, packs in peers(lengths, cap, 1 if n >= 10_000_000 else repeat, quick):
                if pt is None:
                    rep.say(f"| {name} | {note} | – | – | – |")
                    rep.note(f"N={n:,} {name}: {note}")
                    continue
                p = f"{packs:,}" if packs is not None else "–"
                rep.say(f"| {name} | {note} | {pt:.3f} | {pt / bfd_time:.1f}× | {p} |")
                rep.figure(
                    f"{name} N={n:,}",
                    pt,
                    unit="s",
                    baseline="packwise BFD s",
                    baseline_value=bfd_time,
                    ratio_means="peer time / packwise time (packwise speed-up)",
                )


def chitchat(rep: Report, repeat: int) -> None:
    from packwise.pipeline._demo import chitchat_input
    from packwise.pipeline._samples import tokenize_rows
    from packwise.text import load_tokenizer

    samples, _ = tokenize_rows(
        chitchat_input(), load_tokenizer("qwen2.5"), loss_on="assistant", chat_template=None, skip_bad_rows=False
    )
    full = samples.lengths
    rep.say(f"\n### chitchat conversations (qwen2.5, ChatML), N = {full.shape[0]:,}, truncated to C\n")
    rep.say("| algorithm | " + " | ".join(f"C={c}: packs (over L1), ms" for c in (2048, 4096, 8192)) + " |")
    rep.say("|---|" + "---:|" * 3)
    for algo in ALGORITHMS:
        cells = []
        for cap in (2048, 4096, 8192):
            lengths = np.minimum(full, cap)
            l1 = -(-int(lengths.sum()) // cap)
            t, plan = best_time(lambda a=algo, x=lengths, c=cap: plan_packs(x, capacity=c, algorithm=a), repeat)
            cells.append(f"{plan.num_packs} ({plan.num_packs - l1:+d}), {1000 * t:.1f}")
        rep.say(f"| {algo} | " + " | ".join(cells) + " |")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--sizes", default="1e5,1e6,1e7")
    ap.add_argument("--no-peers", action="store_true")
    ap.add_argument("--no-chitchat", action="store_true")
    add_common(ap)
    args = ap.parse_args()
    if args.quick:
        args.sizes, args.no_chitchat = "1e5,1e6", True
    rep = Report("plan", args)
    sizes = [int(float(s)) for s in args.sizes.split(",") if s]
    synthetic(rep, sizes, args.repeat, not args.no_peers, args.quick)
    if not args.no_chitchat:
        chitchat(rep, args.repeat)
    rep.finish()


if __name__ == "__main__":
    main()
