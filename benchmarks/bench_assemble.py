"""Assembly benchmark: batch tensors from sequences vs a bare torch.cat of the same columns, one core, one run.

    python benchmarks/bench_assemble.py [--packs 2000] [--batch 8] [--labels hf|random] [--json] [--quick]

Chitchat-like packs: lognormal(6.1, 1.1) lengths clipped to [1, 4096] (chitchat conversations under qwen2.5:
median 412, mean 884 tokens), planned with BFD at capacity 4096. Each sequence carries ``input_ids``,
``labels`` and one side column (``mm_token_type_ids``). Labels are SFT labels (default, ``--labels hf``): the
tokens themselves with -100 on each sequence's first third, the prompt span (the fused path's label check
reads them twice more), or, with ``--labels random``, random token ids (no label is negative, so that check
stops after one ``min``: a flattering case, not the headline). Tensors come from seeded generators. Baselines, timed interleaved with the paths:

- ``torch.cat`` of the same three tensors per pack (the least a pack assembler must do);
- ``torch.cat`` of the same three tensors per *batch* (the least a batch assembler must do; stricter).

- the *design floor* of a fused assembler with ``assemble_batch``'s outputs and value checks: per batch, each
  sequence's length read once (``numel``), the three columns copied once (one ``torch.cat`` each), the three
  generated columns written once (positions: one ``np.concatenate`` of cached ``arange`` views, int64;
  ``seq_idx``: one ``repeat``, int32; the padding mask: one ``zeros``, bool) and the two value checks' reads
  (one ``min`` over the ids, one over the labels). Per token it reads the 24 source bytes and 16 bytes for
  the checks and writes 37 bytes, where the cat reads 24 and writes 24; no validation of keys, dtypes or
  label conventions, no small tensors (``cu_seqlens``, ...), no ``[1, T]`` wrapping, no dict.

Paths: ``assemble_pack`` + ``collate_packs`` (two steps, two copies of every column) and, when present,
``assemble_batch`` (one fused step). Targets: fused ≥ 0.5× the per-pack cat and ≥ 100 M tokens/s.

Every path is timed twice in each run: wall clock (the harness, ``--repeat`` interleaved repeats) and this
thread's CPU time (``time.thread_time``, which a shared machine's preemption does not inflate) over
``--repeat × --rounds`` more rounds, every path back to back in each round (the order reversed every other
round); the CPU-time ratios are the median of the per-round ratios, with their spread.
"""

from __future__ import annotations

import argparse
import statistics
import time

import numpy as np
import torch
from _harness import Report, add_common, interleaved

import packwise.assemble as pa
from packwise.plan import plan_packs


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--packs", type=int, default=2000)
    ap.add_argument("--batch", type=int, default=8)
    ap.add_argument("--labels", choices=("hf", "random"), default="hf", help="SFT labels (-100 prompts), or random ids")
    ap.add_argument("--rounds", type=int, default=5, help="CPU-time rounds per repeat (after the wall-clock repeats)")
    add_common(ap)
    args = ap.parse_args()
    if args.quick:
        args.packs = min(args.packs, 400)
    rep = Report("assemble", args)
    torch.set_num_threads(1)
    rng = np.random.default_rng(0)
    lengths = np.clip(np.rint(rng.lognormal(6.1, 1.1, args.packs * 6)), 1, 4096).astype(np.int64)
    plan = plan_packs(lengths, capacity=4096)
    torch.manual_seed(0)

    def sequence(n: int) -> dict:
        ids = torch.randint(0, 150_000, (n,))
        if args.labels == "hf":
            labels = ids.clone()
            labels[: n // 3] = -100
        else:
            labels = torch.randint(0, 150_000, (n,))
        return {"input_ids": ids, "labels": labels, "mm_token_type_ids": torch.zeros(n, dtype=torch.int64)}

    packs = [[sequence(int(lengths[i])) for i in members.tolist()] for members in plan.packs()[: args.packs]]
    tokens = sum(int(lengths[m].sum()) for m in plan.packs()[: args.packs])
    batches = [packs[b : b + args.batch] for b in range(0, len(packs), args.batch)]
    keys = ("input_ids", "labels", "mm_token_type_ids")

    def cat_per_pack():
        for seqs in packs:
            for key in keys:
                torch.cat([s[key] for s in seqs])

    def cat_per_batch():
        for batch in batches:
            for key in keys:
                torch.cat([s[key] for seqs in batch for s in seqs])

    def two_step():
        for batch in batches:
            pa.collate_packs([pa.assemble_pack(seqs) for seqs in batch])

    ranges = np.arange(4096)  # every segment's positions: a view of it (the lengths are clipped to 4096)
    views = [ranges[:n] for n in range(4097)]
    segments = np.arange(4096, dtype=np.int32)
    numel = torch.Tensor.numel
    low = np.minimum.reduce

    def design_floor():
        for batch in batches:
            seqs = [s for p in batch for s in p]
            ids = [s["input_ids"] for s in seqs]
            lens = list(map(numel, ids))
            row_ids = torch.cat(ids)
            low(row_ids.numpy())
            labels = torch.cat([s["labels"] for s in seqs])
            low(labels.numpy())
            torch.cat([s["mm_token_type_ids"] for s in seqs])
            np.concatenate([views[n] for n in lens])
            segments[: len(lens)].repeat(lens)
            np.zeros(row_ids.shape[0], dtype=bool)

    fns = {
        "cat_per_pack": cat_per_pack,
        "cat_per_batch": cat_per_batch,
        "design_floor": design_floor,
        "assemble_pack+collate_packs": two_step,
    }
    fused = getattr(pa, "assemble_batch", None)
    if fused is not None:

        def fused_path():
            for batch in batches:
                fused(batch)

        fns["assemble_batch"] = fused_path
    if fused is not None:  # both sides count the same tokens: the fused batches hold exactly the packs' tokens
        covered = sum(fused(batch)["total_tokens"] for batch in batches)
        if covered != tokens:
            raise SystemExit(f"assemble_batch covered {covered:,} tokens, the packs hold {tokens:,}")
    t = interleaved(fns, args.repeat)
    cpu: dict[str, list[float]] = {name: [] for name in fns}
    order = list(fns)
    for r in range(args.repeat * args.rounds):  # thread CPU time, every path back to back in each round
        for name in order if r % 2 == 0 else order[::-1]:
            start = time.thread_time()
            fns[name]()
            cpu[name].append(time.thread_time() - start)
    rep.say(
        f"{len(packs)} packs, {tokens:,} tokens, {tokens / len(packs):.0f} tokens and "
        f"{sum(len(p) for p in packs) / len(packs):.1f} sequences per pack, batches of {args.batch}, "
        f"{args.labels} labels, 1 thread; "
        f"medians of {args.repeat} interleaved repeats (wall clock), {args.repeat * args.rounds} rounds (CPU time)"
    )
    base = t["cat_per_pack"]["median"]
    for name, r in t.items():
        rate = tokens / r["median"] / 1e6
        target = None
        if name == "assemble_batch":
            target = ">= 0.5"
        rep.figure(
            f"{name} vs cat per pack",
            rate,
            unit="M tokens/s",
            baseline="cat_per_pack M tokens/s",
            baseline_value=tokens / base / 1e6,
            ratio=base / r["median"],
            ratio_means="baseline time / path time (higher is better)",
            target=target,
            spread=(tokens / r["max"] / 1e6, tokens / r["min"] / 1e6),
        )
    strict = t["cat_per_batch"]["median"]
    for name in ("assemble_pack+collate_packs", "assemble_batch"):
        if name in t:
            rep.figure(
                f"{name} vs cat per batch",
                tokens / t[name]["median"] / 1e6,
                unit="M tokens/s",
                baseline="cat_per_batch M tokens/s",
                baseline_value=tokens / strict / 1e6,
                ratio=strict / t[name]["median"],
                ratio_means="baseline time / path time (higher is better)",
            )
    if fused is not None:
        rate = tokens / t["assemble_batch"]["median"] / 1e6
        rep.figure("assemble_batch throughput", rate, unit="M tokens/s", target=">= 100", ratio_means="absolute")
        rep.figure(
            "assemble_batch speed-up over assemble_pack+collate_packs",
            t["assemble_pack+collate_packs"]["median"] / t["assemble_batch"]["median"],
            unit="×",
        )

        def cpu_vs(path: str, base: str, label: str, means: str, target: str | None = None):
            """A CPU-time figure of ``path`` against ``base``: median of per-round ratios; the rates' spread."""
            ratios = sorted(b / p for b, p in zip(cpu[base], cpu[path]))
            rates = sorted(tokens / x / 1e6 for x in cpu[path])
            rep.figure(
                label,
                statistics.median(rates),
                unit="M tokens/s",
                baseline=f"{base} M tokens/s (CPU time)",
                baseline_value=tokens / statistics.median(cpu[base]) / 1e6,
                ratio=statistics.median(ratios),
                ratio_means=means,
                target=target,
                spread=(rates[0], rates[-1]),
            )
            return ratios, rates

        ratios, rates = cpu_vs(
            "assemble_batch", "cat_per_pack", "assemble_batch vs cat per pack (CPU time)",
            "median over repeats of cat time / assemble_batch time, this thread's CPU time", target=">= 0.5",
        )  # fmt: skip
        rep.figure(
            "assemble_batch throughput (CPU time)",
            statistics.median(rates),
            unit="M tokens/s",
            target=">= 100",
            ratio_means="absolute",
            spread=(rates[0], rates[-1]),
        )
        cpu_vs(
            "design_floor", "cat_per_pack", "design floor vs cat per pack (CPU time)",
            "median over rounds of cat time / design_floor time: the most a fused path can reach",
        )  # fmt: skip
        floor, _ = cpu_vs(
            "assemble_batch", "design_floor", "assemble_batch vs the design floor (CPU time)",
            "median over rounds of design_floor time / assemble_batch time (1.0: nothing but the floor)",
        )  # fmt: skip
        rep.note(f"assemble_batch × design floor, CPU time, spread over rounds: {floor[0]:.3f}–{floor[-1]:.3f}")
        rep.note(f"assemble_batch × cat per pack, CPU time, per round: {', '.join(f'{r:.3f}' for r in ratios)}")
    else:
        rep.note("assemble_batch: not present in this packwise (fused path not built)")
    rep.finish()


if __name__ == "__main__":
    main()
