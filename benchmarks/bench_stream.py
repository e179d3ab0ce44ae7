"""Streaming benchmark: planning throughput and memory of PackingStream, and data-parallel balance.

    python benchmarks/bench_stream.py [--samples 10_000_000] [--buffer 10000]

1. A synthetic stream of ``--samples`` lengths (lognormal(6.1, 1.1), clipped to [1, 4096]) through
   ``PackingStream(assemble=False, length_fn=int)`` with buffer 10,000: samples/s of windowing + planning
   (no tokenization, no tensors) and the peak RSS of the process (``ru_maxrss``) — memory is bounded by
   one window, not by the stream.
2. ``distribute`` of chitchat packs (qwen2.5 lengths, capacity 4096, BFD with ``pack_count_multiple=8``)
   over 8 ranks: max/mean cost, tokens and attention-aware.
"""

from __future__ import annotations

import argparse
import resource
import time

import numpy as np

from packwise.plan import distribute, plan_packs
from packwise.stream import PackingStream


def lengths_stream(n: int, seed: int = 0, chunk: int = 1_000_000):
    rng = np.random.default_rng(seed)
    for a in range(0, n, chunk):
        yield from np.clip(np.rint(rng.lognormal(6.1, 1.1, min(chunk, n - a))), 1, 4096).astype(np.int64).tolist()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--samples", type=int, default=10_000_000)
    ap.add_argument("--buffer", type=int, default=10_000)
    args = ap.parse_args()
    stream = PackingStream(
        lambda: lengths_stream(args.samples), capacity=4096, buffer_size=args.buffer, assemble=False, length_fn=int
    )
    t = time.perf_counter()
    packs = sequences = 0
    for pack in stream:
        packs += 1
        sequences += len(pack)
    dt = time.perf_counter() - t
    rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    print(f"| stream of {args.samples:,} samples, buffer {args.buffer:,} | value |")
    print("|---|---:|")
    print(f"| samples/s (windowing + BFD planning) | {sequences / dt:,.0f} |")
    print(f"| packs | {packs:,} |")
    print(f"| wall time (s) | {dt:.1f} |")
    print(f"| peak RSS (MB) | {rss:,.0f} |")

    from packwise.pipeline._demo import chitchat_input
    from packwise.pipeline._samples import tokenize_rows
    from packwise.tokenize import load_tokenizer

    samples, _ = tokenize_rows(chitchat_input(), load_tokenizer("qwen2.5"), loss_on="assistant", chat_template=None,
                               skip_bad_rows=False)  # fmt: skip
    plan = plan_packs(np.minimum(samples.lengths, 4096), capacity=4096, pack_count_multiple=8)
    print(f"\n| chitchat, {plan.num_packs} packs over 8 ranks | max/mean cost |")
    print("|---|---:|")
    for cost in ("tokens", "attention"):
        a = distribute(plan, num_ranks=8, cost=cost)
        print(f"| {cost} | {a.imbalance:.4f} |")


if __name__ == "__main__":
    main()
