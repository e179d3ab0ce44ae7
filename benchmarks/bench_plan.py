"""Planner benchmark: every algorithm vs the lower bound, its floor, a yardstick and installed peers, one run.

    python benchmarks/bench_plan.py                 # N = 1e5, 1e6, 1e7 + chitchat + peers
    python benchmarks/bench_plan.py --sizes 1e5,1e6 --no-chitchat
    python benchmarks/bench_plan.py --quick --json  # N = 1e5, 1e6; one JSON object

Lengths: lognormal(6.1, 1.1), rounded, clipped to [1, 4096] (seed 0); and the real chitchat conversation
lengths (qwen2.5 tokens) truncated to each capacity. BFD is timed interleaved with two baselines,
``--repeat`` times, medians and spreads of the per-repeat ratios:

* the planner's floor: one counting pass over the lengths (``np.bincount``) — any planner reads every length;
* a yardstick, not a floor: a bare stable radix argsort of the uint16 lengths (BFD need not sort the items:
  a length histogram is enough, and BFD beats that argsort from N = 3e7 up).

Targets: BFD ≤ 3× the argsort at 1 M, ≤ 1.3× at 10 M; peak traced memory ≤ 2.5× the int64 lengths. Peers
(extra ``bench``): seqpacker (Rust; ``obfd``), lightbinpack (C++; ``bfd``, ``ffd``, ``obfd``), TRL
``pack_dataset`` and ``binpacking``, each skipped with a note when it cannot be imported. Every peer's output
is validated before it is timed (every item once, no pack over capacity, at least L1 packs; TRL and
binpacking return lengths, not indices: their lengths must be the input's multiset), then it is timed
interleaved with packwise's BFD on the same lengths. An invalid output is reported, never timed.
"""

from __future__ import annotations

import argparse
import gc
import math
import statistics
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


class PeerError(RuntimeError):
    """A peer's output is not a valid packing of the lengths: it is reported, never timed."""


def check_packing(order, offsets, lengths: np.ndarray, capacity: int, name: str) -> int:
    """Raise :class:`PeerError` unless ``order`` (item indices, pack by pack, split at ``offsets``) is a
    permutation of every item with no pack over ``capacity`` and at least the L1 lower bound of packs; the
    pack count otherwise. ``offsets`` are CSR bounds (0 … N); split points without the ends are completed."""
    n = lengths.shape[0]
    order = np.asarray(order, dtype=np.int64)
    offsets = np.asarray(offsets, dtype=np.int64)
    if offsets.shape[0] == 0 or offsets[0] != 0:
        offsets = np.concatenate([[0], offsets])
    if offsets[-1] != order.shape[0]:
        offsets = np.concatenate([offsets, [order.shape[0]]])
    if order.shape[0] != n or not np.array_equal(np.sort(order), np.arange(n)):
        raise PeerError(f"{name}: not a permutation of the {n:,} items (got {order.shape[0]:,} indices)")
    if (np.diff(offsets) <= 0).any():
        raise PeerError(f"{name}: an empty pack or decreasing offsets")
    sums = np.add.reduceat(lengths[order], offsets[:-1])
    if (sums > capacity).any():
        raise PeerError(f"{name}: {int((sums > capacity).sum())} packs over capacity {capacity}")
    return check_count(offsets.shape[0] - 1, lengths, capacity, name)


def check_multiset(packs: list[list[int]], lengths: np.ndarray, capacity: int, name: str) -> int:
    """As :func:`check_packing` for a peer that returns the lengths of each pack, not item indices: the
    lengths packed are the multiset of the input lengths (every item once), no pack over capacity, ≥ L1."""
    flat = np.fromiter((x for p in packs for x in p), dtype=np.int64)
    if not np.array_equal(np.sort(flat), np.sort(lengths)):
        raise PeerError(f"{name}: the packed lengths are not the input lengths ({flat.shape[0]:,} of {len(lengths):,})")
    over = sum(1 for p in packs if sum(p) > capacity)
    if over:
        raise PeerError(f"{name}: {over} packs over capacity {capacity}")
    return check_count(len(packs), lengths, capacity, name)


def check_count(packs: int, lengths: np.ndarray, capacity: int, name: str) -> int:
    l1 = -(-int(lengths.sum()) // capacity)
    if packs < l1:
        raise PeerError(f"{name}: {packs:,} packs, below the lower bound L1 = {l1:,}: the count is wrong")
    return packs


def peer_runs(lengths: np.ndarray, capacity: int, quick: bool) -> list[tuple[str, str, object, object]]:
    """(peer, note, run, packs_of) for each peer at this N: ``run()`` is what is timed, ``packs_of(out)``
    validates its output and counts the packs (raising :class:`PeerError`); ``run`` is None when skipped."""
    n = lengths.shape[0]
    rows = []
    try:
        import seqpacker

        packer = seqpacker.Packer(capacity, strategy="obfd")

        def seqpacker_packs(out):
            order, offsets = out  # offsets: split points of order (issue 29: len(offsets) - 1 was P - 2)
            return check_packing(order, offsets, lengths, capacity, "seqpacker")

        rows.append(("seqpacker obfd (Rust)", "Packer.pack_flat, int64 numpy input",
                     lambda: packer.pack_flat(lengths), seqpacker_packs))  # fmt: skip
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

            def lbp_packs(bins, name=name):
                order = [i for b in bins for i in b]
                offsets = np.cumsum([0, *(len(b) for b in bins)])
                return check_packing(order, offsets, lengths, capacity, f"lightbinpack.{name}")

            rows.append((f"lightbinpack.{name} (C++)", "list input", lambda f=fn: f(as_list, capacity), lbp_packs))
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
            rows.append((f"binpacking (first {m:,})", f"on the first {m:,} only: its time is NOT of N",
                         lambda: binpacking.to_constant_volume(sub, capacity),
                         lambda bins: check_multiset(bins, lengths[:m], capacity, "binpacking")))  # fmt: skip
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

    def run():
        return pack_dataset(ds, capacity, strategy="bfd", map_kwargs={"keep_in_memory": True})

    def packs_of(packed):
        if "seq_lengths" not in packed.column_names:
            raise PeerError(f"trl.pack_dataset: no seq_lengths column to validate (columns {packed.column_names})")
        return check_multiset(packed["seq_lengths"], lengths, capacity, "trl.pack_dataset")

    return ("trl.pack_dataset (bfd)", "1000-row windows (datasets.map default)", run, packs_of)


def time_peers(rep: Report, lengths: np.ndarray, cap: int, repeat: int, quick: bool) -> None:
    """Each peer validated once (untimed), then timed interleaved with packwise's BFD: medians, spreads."""
    n = lengths.shape[0]
    rep.say("\n| peer | note | peer s (spread) | packwise BFD s (spread) | packwise speed-up | packs |")
    rep.say("|---|---|---:|---:|---:|---:|")
    for name, note, run, packs_of in peer_runs(lengths, cap, quick):
        if run is None:
            rep.say(f"| {name} | {note} | – | – | – | – |")
            rep.note(f"N={n:,} {name}: {note}")
            continue
        try:
            packs = packs_of(run())
        except PeerError as e:
            rep.say(f"| {name} | **invalid output, not timed**: {e} | – | – | – | – |")
            rep.note(f"N={n:,} {name}: invalid output, not timed: {e}")
            continue
        t = interleaved({"peer": run, "packwise": lambda: plan_packs(lengths, capacity=cap)}, repeat)
        pr, pw = t["peer"], t["packwise"]
        ratios = [a / b for a, b in zip(pr["runs"], pw["runs"])]
        rep.say(f"| {name} | {note} | {pr['median']:.3f} ({pr['min']:.3f}–{pr['max']:.3f}) | {pw['median']:.3f} "
                f"({pw['min']:.3f}–{pw['max']:.3f}) | {statistics.median(ratios):.1f}× | {packs:,} |")  # fmt: skip
        rep.figure(
            f"{name} N={n:,} (validated: permutation, ≤ C, ≥ L1; {packs:,} packs)",
            pr["median"],
            unit="s",
            baseline="packwise BFD s (interleaved)",
            baseline_value=pw["median"],
            ratio=statistics.median(ratios),
            ratio_means="median of per-pair peer time / packwise time (packwise speed-up); spread: of those ratios",
            spread=(min(ratios), max(ratios)),
        )


def synthetic(rep: Report, sizes: list[int], repeat: int, with_peers: bool, quick: bool) -> None:
    cap = 4096
    for n in sizes:
        lengths = lognormal(n, cap)
        l1 = -(-int(lengths.sum()) // cap)
        key = lengths.astype(np.uint16)
        t = interleaved(
            {
                "count": lambda x=lengths: np.bincount(x, minlength=cap + 1),
                "argsort": lambda key=key: np.argsort(key, kind="stable"),
                "bfd": lambda x=lengths: plan_packs(x, capacity=cap),
            },
            repeat,
        )
        count, base, bfd = t["count"], t["argsort"], t["bfd"]
        check_packing(bfd["out"].order, bfd["out"].offsets, lengths, cap, "packwise BFD")
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
        for name, floor, label, means in (
            ("count", count, "a counting pass (np.bincount of the lengths): the planner's floor",
             "BFD time / one counting pass over the lengths: what any planner must at least read"),
            ("argsort", base, "a stable radix argsort of the uint16 lengths: a yardstick, not a floor",
             "BFD time / argsort time (a yardstick: BFD need not sort items, and beats it from 3e7 up)"),
        ):  # fmt: skip
            ratios = [a / b for a, b in zip(bfd["runs"], floor["runs"])]
            rep.figure(
                f"BFD N={n:,} vs {label}",
                bfd["median"],
                unit="s",
                baseline=f"{name} s",
                baseline_value=floor["median"],
                ratio=statistics.median(ratios),
                ratio_means=f"median of per-repeat ratios; {means}; spread: of those ratios",
                target=TARGET_VS_ARGSORT.get(n) if name == "argsort" else None,
                spread=(min(ratios), max(ratios)),
            )
        bfd_time = bfd["median"]
        rep.say(f"\n### lognormal(6.1, 1.1), N = {n:,}, C = {cap}, L1 = {l1:,}\n")
        rep.say(f"same run, interleaved, medians: counting pass (the floor) = {count['median']:.4f} s; stable radix "
                f"argsort of N uint16 lengths (a yardstick) = {base['median']:.4f} s\n")  # fmt: skip
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
            time_peers(rep, lengths, cap, 1 if n >= 10_000_000 else repeat, quick)


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
    ap.add_argument("--sizes", help="comma-separated N (default 1e5,1e6,1e7; --quick: 1e5,1e6)")
    ap.add_argument("--no-peers", action="store_true")
    ap.add_argument("--no-chitchat", action="store_true")
    add_common(ap)
    args = ap.parse_args()
    if args.quick:
        args.no_chitchat = True
    args.sizes = args.sizes or ("1e5,1e6" if args.quick else "1e5,1e6,1e7")
    rep = Report("plan", args)
    sizes = [int(float(s)) for s in args.sizes.split(",") if s]
    synthetic(rep, sizes, args.repeat, not args.no_peers, args.quick)
    if not args.no_chitchat:
        chitchat(rep, args.repeat)
    rep.finish()


if __name__ == "__main__":
    main()
