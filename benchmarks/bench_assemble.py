"""Assembly benchmark: assemble_pack + collate_packs throughput vs a bare torch.cat, one core, one run.

    python benchmarks/bench_assemble.py [--packs 2000] [--batch 8]

Chitchat-like packs: lognormal(6.1, 1.1) lengths clipped to [1, 4096] (chitchat conversations under qwen2.5:
median 412, mean 884 tokens), planned with BFD at capacity 4096. Each sequence carries ``input_ids``,
``labels`` and one side column (``mm_token_type_ids``). The baseline is ``torch.cat`` of the same three
tensors per pack — the least any assembler must do.
"""

from __future__ import annotations

import argparse
import time

import numpy as np
import torch

from packwise.assemble import assemble_pack, collate_packs
from packwise.plan import plan_packs


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--packs", type=int, default=2000)
    ap.add_argument("--batch", type=int, default=8)
    ap.add_argument("--repeat", type=int, default=3)
    args = ap.parse_args()
    torch.set_num_threads(1)
    rng = np.random.default_rng(0)
    lengths = np.clip(np.rint(rng.lognormal(6.1, 1.1, args.packs * 6)), 1, 4096).astype(np.int64)
    plan = plan_packs(lengths, capacity=4096)
    packs = []
    for members in plan.packs()[: args.packs]:
        packs.append(
            [
                {
                    "input_ids": torch.randint(0, 150_000, (int(lengths[i]),)),
                    "labels": torch.randint(0, 150_000, (int(lengths[i]),)),
                    "mm_token_type_ids": torch.zeros(int(lengths[i]), dtype=torch.int64),
                }
                for i in members.tolist()
            ]
        )
    tokens = sum(int(lengths[m].sum()) for m in plan.packs()[: args.packs])

    def bare():
        for seqs in packs:
            for key in ("input_ids", "labels", "mm_token_type_ids"):
                torch.cat([s[key] for s in seqs])

    def packwise_path():
        for b in range(0, len(packs), args.batch):
            collate_packs([assemble_pack(seqs) for seqs in packs[b : b + args.batch]])

    def best(fn):
        times = []
        for _ in range(args.repeat):
            t = time.perf_counter()
            fn()
            times.append(time.perf_counter() - t)
        return min(times)

    t_bare, t_pw = best(bare), best(packwise_path)
    print(f"{len(packs)} packs, {tokens:,} tokens, {tokens / len(packs):.0f} tokens and "
          f"{sum(len(p) for p in packs) / len(packs):.1f} sequences per pack, batches of {args.batch}, 1 thread")  # fmt: skip
    print("| path | tokens/s | ratio to torch.cat |")
    print("|---|---:|---:|")
    print(f"| torch.cat of input_ids, labels, side column (baseline) | {tokens / t_bare / 1e6:.1f} M | 1.00 |")
    print(f"| assemble_pack + collate_packs | {tokens / t_pw / 1e6:.1f} M | {t_bare / t_pw:.2f} |")


if __name__ == "__main__":
    main()
