"""Data-parallel balance by compute: simulated step-time imbalance of ``distribute(cost=model_cost(config))``.

    python benchmarks/bench_balance.py [--micro-batches 4] [--json] [--quick]

Packs: BFD plans at capacity 4096 of (a) chitchat (the offline ``chitchat-dataset`` package, 4,018
conversations, qwen2.5 tokenizer + ChatML, truncated to 4096) and (b) lognormal(6.1, 1.1) lengths clipped to
[1, 4096] (40,000 samples, seed 0; 10,000 with ``--quick``). Cost: training FLOPs from
``packwise.hf.model_cost`` of a Llama-3-8B-shaped ``LlamaConfig`` (meta device: nothing allocated).

A step: ``ranks × micro_batches`` packs. The plan's packs are shuffled (seed 0) and cut into full steps; the
last ``P mod (ranks × micro_batches)`` packs (fewer than one step) open the next epoch's first step in a
multi-epoch run and are left out of the figure (their count is printed). A rank's step time is the FLOPs of
its packs; a step's imbalance is max/mean over ranks; the figure is the mean over steps (worst step beside
it). Baseline, same packs and steps: equal counts (pack ``i`` of a step to rank ``i % ranks``, what a
``DistributedSampler`` over packs does). Target: ≤ 2 % for ``distribute`` at 8 and 64 ranks.
Also printed: LPT on token counts (``cost="tokens"``), scored in FLOPs.

Also printed: the same with the plan made with ``pack_count_multiple = ranks × micro_batches`` (every step
full within one epoch). That repair splits packs to reach the multiple and the split-off packs are nearly
empty, so ranks that get one cannot be balanced under equal counts — the repair, not the partition, sets
that figure.
"""

from __future__ import annotations

import argparse

import numpy as np
from _harness import Report, add_common

from packwise.hf import model_cost
from packwise.plan import assign_to_ranks, pack_costs, plan_packs

CAPACITY = 4096


def llama_8b_cost():
    from transformers import LlamaConfig

    cfg = LlamaConfig(
        vocab_size=128256, hidden_size=4096, intermediate_size=14336, num_hidden_layers=32,
        num_attention_heads=32, num_key_value_heads=8, max_position_embeddings=8192,
    )  # fmt: skip
    return model_cost(cfg)


def chitchat_lengths() -> np.ndarray:
    from packwise.pipeline._demo import chitchat_input
    from packwise.pipeline._samples import tokenize_rows
    from packwise.text import load_tokenizer

    samples, _ = tokenize_rows(
        chitchat_input(), load_tokenizer("qwen2.5"), loss_on="assistant", chat_template=None, skip_bad_rows=False
    )
    return np.minimum(samples.lengths, CAPACITY)


def lognormal_lengths(n: int) -> np.ndarray:
    rng = np.random.default_rng(0)
    return np.clip(rng.lognormal(6.1, 1.1, n), 1, CAPACITY).astype(np.int64)


def step_imbalance(costs: np.ndarray, ranks: int, per_step: int, balanced, *, by=None) -> tuple[float, float]:
    """(mean, worst) max/mean - 1 in % of the rank FLOPs (``costs``) over the full steps of the shuffled packs;
    ``balanced``: LPT on ``by`` (default: the FLOPs themselves), else equal counts."""
    order = np.random.default_rng(0).permutation(costs.shape[0])
    out = []
    for s in range(0, costs.shape[0] - per_step + 1, per_step):
        idx = order[s : s + per_step]
        c = costs[idx]
        if balanced:
            key = c if by is None else by[idx]
            owner = np.empty(per_step, dtype=np.int64)
            for r, members in enumerate(assign_to_ranks(key, num_ranks=ranks)):
                owner[members] = r
        else:
            owner = np.arange(per_step) % ranks
        loads = np.bincount(owner, weights=c, minlength=ranks)
        out.append(100.0 * (loads.max() / loads.mean() - 1.0))
    return float(np.mean(out)), float(np.max(out))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    add_common(ap)
    ap.add_argument("--micro-batches", type=int, default=4, help="packs per rank per step")
    args = ap.parse_args()
    rep = Report("bench_balance", args)
    cost = llama_8b_cost()
    datasets = {"chitchat": chitchat_lengths(), "lognormal": lognormal_lengths(10_000 if args.quick else 40_000)}
    for data, lengths in datasets.items():
        for repair in (False, True):
            for ranks in (8, 64):
                per_step = ranks * args.micro_batches
                plan = plan_packs(lengths, capacity=CAPACITY, pack_count_multiple=per_step if repair else None)
                per_pack = np.split(plan.lengths[plan.order], plan.offsets[1:-1])
                costs = pack_costs(per_pack, cost)
                eq, eq_worst = step_imbalance(costs, ranks, per_step, balanced=False)
                lpt, lpt_worst = step_imbalance(costs, ranks, per_step, balanced=True)
                tok, _ = step_imbalance(costs, ranks, per_step, balanced=True, by=pack_costs(per_pack, "tokens"))
                steps, rest = divmod(plan.num_packs, per_step)
                how = f"pack_count_multiple={per_step}" if repair else f"{rest} packs to the next epoch"
                rep.figure(
                    f"{data}, {ranks} ranks × {args.micro_batches} packs, {steps} steps ({how}): step FLOPs max/mean "
                    f"- 1 (worst step {lpt_worst:.2f} %; equal-count worst {eq_worst:.2f} %; LPT by tokens {tok:.2f} %)",
                    lpt,
                    unit="%",
                    baseline="equal count",
                    baseline_value=eq,
                    met=None if repair else lpt <= 2.0,
                    ratio=None,
                    ratio_means="distribute % / equal-count %",
                    target=None if repair else "<= 2",
                )
    rep.note(
        f"cost: Llama-3-8B shape, {cost.per_token:.4g} FLOPs/token, {cost.per_pair * cost.full_layers:.4g} "
        "FLOPs per attended pair (all layers), training (× 3)"
    )
    rep.finish()


if __name__ == "__main__":
    main()
