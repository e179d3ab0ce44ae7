"""Streaming benchmark: PackingStream planning throughput vs one global plan, memory, data-parallel balance.

    python benchmarks/bench_stream.py [--samples 10_000_000] [--buffer 10000] [--json] [--quick]

1. A synthetic stream of ``--samples`` lengths (lognormal(6.1, 1.1), clipped to [1, 4096], seed 0) through
   ``PackingStream(assemble=False, length_fn=int)`` with buffer 10,000: samples/s of windowing + planning
   (no tokenization, no tensors). Baseline, interleaved in the same run: one global BFD plan of the same
   lengths (``plan_packs`` on the whole array). Targets: ≥ 2 M samples/s and ≥ 0.05× the global rate.
2. Peak RSS of a fresh process that only streams (``VmHWM``): bounded by one window, not by the stream.
   Target < 500 MB.
   Also: the stream's floor (the source read in windows + ``length_fn``, no planning) and the planning of the
   windows alone, the stream's window planner vs ``plan_packs`` per window.
3. ``distribute`` of chitchat packs (qwen2.5 lengths, capacity 4096, BFD with ``pack_count_multiple=8``)
   over 8 ranks: max/mean cost, tokens and attention-aware (skipped with ``--quick``).
"""

from __future__ import annotations

import argparse
import itertools
import json
import resource
import subprocess
import sys
from pathlib import Path

import numpy as np
from _harness import Report, add_common, interleaved

from packwise.plan import distribute, plan_packs
from packwise.stream import PackingStream

try:  # the stream's window planner; absent in revisions before it (before_after.py runs this on both)
    from packwise.plan import plan_window
except ImportError:
    plan_window = None


def lengths_array(n: int, seed: int = 0, chunk: int = 1_000_000) -> np.ndarray:
    rng = np.random.default_rng(seed)
    parts = [np.clip(np.rint(rng.lognormal(6.1, 1.1, min(chunk, n - a))), 1, 4096) for a in range(0, n, chunk)]
    return np.concatenate(parts).astype(np.int64)


def lengths_stream(n: int, seed: int = 0, chunk: int = 1_000_000):
    rng = np.random.default_rng(seed)
    for a in range(0, n, chunk):
        yield from np.clip(np.rint(rng.lognormal(6.1, 1.1, min(chunk, n - a))), 1, 4096).astype(np.int64).tolist()


def run_stream(samples: int, buffer: int) -> tuple[int, int]:
    stream = PackingStream(
        lambda: lengths_stream(samples), capacity=4096, buffer_size=buffer, assemble=False, length_fn=int
    )
    packs = sequences = 0
    for pack in stream:
        packs += 1
        sequences += len(pack)
    return packs, sequences


def read_floor(samples: int, buffer: int) -> int:
    """What every stream pays before planning: the source read in windows and ``length_fn`` applied."""
    it, n = lengths_stream(samples), 0
    while window := list(itertools.islice(it, buffer)):
        n += np.fromiter(map(int, window), np.int64, len(window)).shape[0]
    return n


def plan_windows(lengths: np.ndarray, buffer: int, planner) -> int:
    return sum(planner(lengths[a : a + buffer]) for a in range(0, lengths.shape[0], buffer))


def peak_rss_mb() -> float:
    """This process's peak RSS: ``VmHWM`` (Linux; per address space, so a child started by a big parent does
    not inherit the parent's peak as ``ru_maxrss`` does across fork + exec), else ``ru_maxrss``."""
    try:
        for line in Path("/proc/self/status").read_text().splitlines():
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) / 1024
    except OSError:
        pass
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--samples", type=int, default=10_000_000)
    ap.add_argument("--buffer", type=int, default=10_000)
    ap.add_argument("--rss-only", action="store_true", help=argparse.SUPPRESS)
    add_common(ap)
    args = ap.parse_args()
    if args.rss_only:
        packs, _ = run_stream(args.samples, args.buffer)
        print(json.dumps({"rss_mb": peak_rss_mb(), "packs": packs}))
        return
    if args.quick:
        args.samples = min(args.samples, 1_000_000)
    rep = Report("stream", args)
    n = args.samples
    lengths = lengths_array(n)
    t = interleaved(
        {
            "stream": lambda: run_stream(n, args.buffer),
            "global_plan": lambda: plan_packs(lengths, capacity=4096),
            "read_floor": lambda: read_floor(n, args.buffer),
            "windows_plan_packs": lambda: plan_windows(lengths, args.buffer, lambda w: plan_packs(w, capacity=4096).num_packs),
            **({"windows_plan_window": lambda: plan_windows(lengths, args.buffer, lambda w: plan_window(w, 4096)[1].shape[0] - 1)}
               if plan_window is not None else {}),
        },
        args.repeat,
    )  # fmt: skip
    s, g = t["stream"], t["global_plan"]
    rep.say(f"stream of {n:,} samples, buffer {args.buffer:,}; medians of {args.repeat} interleaved repeats")
    rep.figure(
        "stream samples/s",
        n / s["median"],
        unit="samples/s",
        target=">= 2000000",
        spread=(n / s["max"], n / s["min"]),
        ratio_means="absolute",
    )
    rep.figure(
        "stream rate vs one global BFD plan",
        n / s["median"],
        unit="samples/s",
        baseline="global plan_packs samples/s",
        baseline_value=n / g["median"],
        ratio=g["median"] / s["median"],
        ratio_means="global time / stream time (higher is better)",
        target=">= 0.05",
    )
    rep.figure(
        "stream rate vs its floor (source read in windows + length_fn, no planning)",
        n / s["median"],
        unit="samples/s",
        baseline="floor samples/s",
        baseline_value=n / t["read_floor"]["median"],
        ratio=t["read_floor"]["median"] / s["median"],
        ratio_means="floor time / stream time (1 = planning and emitting cost nothing)",
    )
    w_old, w_new = t["windows_plan_packs"], t.get("windows_plan_window", t["windows_plan_packs"])
    windows = -(-n // args.buffer)
    rep.figure(
        f"planning {windows} windows: the stream's planner (plan_window) vs plan_packs per window",
        w_new["median"] / windows * 1e3,
        unit="ms/window",
        baseline="plan_packs ms/window",
        baseline_value=w_old["median"] / windows * 1e3,
        ratio=w_old["median"] / w_new["median"],
        ratio_means="plan_packs time / plan_window time (same packs: asserted)",
    )
    if w_old["out"] != w_new["out"]:
        raise SystemExit(f"plan_window made {w_new['out']} packs, plan_packs {w_old['out']}: not the same plan")
    packs = s["out"][0]
    global_packs = g["out"].num_packs
    rep.figure(
        "stream packs vs global BFD packs", packs, unit="packs", baseline="global packs", baseline_value=global_packs
    )
    child = subprocess.run(
        [sys.executable, __file__, "--rss-only", "--samples", str(n), "--buffer", str(args.buffer)],
        capture_output=True,
        text=True,
        check=True,
    )
    rss = json.loads(child.stdout.strip().splitlines()[-1])["rss_mb"]
    rep.figure("peak RSS of a process that only streams", rss, unit="MB", target="< 500", ratio_means="absolute")
    if not args.quick:
        from packwise.pipeline._demo import chitchat_input
        from packwise.pipeline._samples import tokenize_rows
        from packwise.text import load_tokenizer

        samples, _ = tokenize_rows(chitchat_input(), load_tokenizer("qwen2.5"), loss_on="assistant",
                                   chat_template=None, skip_bad_rows=False)  # fmt: skip
        plan = plan_packs(np.minimum(samples.lengths, 4096), capacity=4096, pack_count_multiple=8)
        for cost in ("tokens", "attention"):
            a = distribute(plan, num_ranks=8, cost=cost)
            rep.figure(
                f"chitchat {plan.num_packs} packs over 8 ranks, max/mean {cost} cost",
                a.imbalance,
                unit="",
                target="<= 1.02" if cost == "attention" else None,
                ratio_means="absolute",
            )
    rep.finish()


if __name__ == "__main__":
    main()
