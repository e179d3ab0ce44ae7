"""Training-step throughput: padded batches vs packed with isolation (each backend) vs packed without.

    python benchmarks/bench_train.py                          # CPU, tiny Llama (4 layers, hidden 256)
    python benchmarks/bench_train.py --device cuda --dtype bfloat16 --layers 8 --hidden 1024   # lent GPU

Samples: real chitchat conversation lengths (qwen2.5 + ChatML) truncated to the capacity (2048), with
random token ids; the same samples in every mode, one run. Throughput counts *real* tokens (no padding)
per second of forward + backward + optimizer step.

- padded: batches of ``round(N / P)`` samples (as many as a pack holds on average), right-padded to the
  longest, with an attention mask (HF sdpa);
- packed + isolation: BFD packs at capacity 2048, one ``[1, T]`` row per step via ``PackedDataCollator``
  and ``use_packed_attention(backend=...)`` — every backend available on the device;
- packed, no isolation: the same rows fed as plain causal sequences (what "packing" without boundaries
  costs — and it trains on cross-document attention).

``--model nemotron_h`` (a tiny hybrid: Mamba2 + attention layers, ``hybrid_override_pattern`` ``M*`` repeated)
times padded vs packed + isolation (attention per document, every Mamba2 mixer once per document: the exact
path of ``packwise/integrations/hf/_mixers.py``) vs packed with the mixers run over the whole row (attention
isolated, the mixer state leaking across documents: what the per-document reset costs), interleaved.
"""

from __future__ import annotations

import argparse
import statistics
import time

import numpy as np
import torch
from _harness import Report, add_common

from packwise.attention import available_backends
from packwise.hf import PackedDataCollator, use_packed_attention
from packwise.plan import plan_packs


def chitchat_lengths(capacity: int) -> np.ndarray:
    from packwise.pipeline._demo import chitchat_input
    from packwise.pipeline._samples import tokenize_rows
    from packwise.text import load_tokenizer

    samples, _ = tokenize_rows(
        chitchat_input(), load_tokenizer("qwen2.5"), loss_on="assistant", chat_template=None, skip_bad_rows=False
    )
    return np.minimum(samples.lengths, capacity)


def make_model(args):
    from transformers import LlamaConfig, LlamaForCausalLM, NemotronHConfig, NemotronHForCausalLM

    torch.manual_seed(0)
    if args.model == "nemotron_h":
        cfg = NemotronHConfig(
            vocab_size=args.vocab, hidden_size=args.hidden, intermediate_size=args.hidden * 4,
            hybrid_override_pattern="M*" * max(1, args.layers // 2), num_attention_heads=args.heads,
            num_key_value_heads=max(1, args.heads // 2), head_dim=args.hidden // args.heads,
            mamba_num_heads=args.hidden * 2 // 32, mamba_head_dim=32, ssm_state_size=16, n_groups=1,
            max_position_embeddings=args.capacity, use_cache=False,
        )  # fmt: skip
        return NemotronHForCausalLM(cfg).to(device=args.device, dtype=getattr(torch, args.dtype))
    cfg = LlamaConfig(
        vocab_size=args.vocab, hidden_size=args.hidden, intermediate_size=args.hidden * 4, num_hidden_layers=args.layers,
        num_attention_heads=args.heads, num_key_value_heads=max(1, args.heads // 2), max_position_embeddings=args.capacity,
    )  # fmt: skip
    return LlamaForCausalLM(cfg).to(device=args.device, dtype=getattr(torch, args.dtype))


def run(model, batches, args) -> float:
    opt = torch.optim.SGD(model.parameters(), lr=1e-4)
    model.train()
    for b in batches[: args.warmup]:
        model(**b).loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=True)
    if args.device == "cuda":
        torch.cuda.synchronize()
    t = time.perf_counter()
    for b in batches[args.warmup :]:
        model(**b).loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=True)
    if args.device == "cuda":
        torch.cuda.synchronize()
    return time.perf_counter() - t


def whole_row_mixers(model) -> None:
    """Undo the per-document mixer path (attention stays isolated): each mixer's class forward over the row."""

    def whole_row(self, *args, **kwargs):
        for key in ("cu_seq_lens_q", "cu_seq_lens_k", "max_length_q", "max_length_k"):
            kwargs.pop(key, None)
        return type(self).forward(self, *args, **kwargs)

    patched = [m for m in model.modules() if getattr(m.__dict__.get("forward"), "_packwise", False)]
    assert patched, "no per-document mixer to undo"
    for m in patched:
        m.forward = whole_row.__get__(m)


def to_device(batch: dict, device: str) -> dict:
    return {k: v.to(device) if isinstance(v, torch.Tensor) else v for k, v in batch.items()}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--device", default="cpu")
    ap.add_argument("--dtype", default="float32")
    ap.add_argument("--capacity", type=int, default=2048)
    ap.add_argument("--samples", type=int, default=32, help="samples drawn from chitchat (all modes train on them)")
    ap.add_argument("--warmup", type=int, default=1)
    ap.add_argument("--layers", type=int, default=4)
    ap.add_argument("--hidden", type=int, default=256)
    ap.add_argument("--heads", type=int, default=8)
    ap.add_argument("--vocab", type=int, default=32000)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--model", choices=("llama", "nemotron_h"), default="llama", help="tiny model family")
    add_common(ap)
    args = ap.parse_args()
    if args.quick:
        args.samples, args.layers, args.hidden, args.vocab = min(args.samples, 16), 2, 128, 8000
    rep = Report("train", args)

    rng = np.random.default_rng(args.seed)
    all_lengths = chitchat_lengths(args.capacity)
    pool = rng.permutation(all_lengths)[: args.samples]
    plan = plan_packs(pool, capacity=args.capacity)
    packs = [plan.packs()[i] for i in rng.permutation(plan.num_packs)]  # random pack order
    used = np.concatenate(packs)
    lengths = pool[used]
    docs = [torch.from_numpy(rng.integers(0, args.vocab, int(n))) for n in lengths]
    bounds = np.concatenate([[0], np.cumsum([len(p) for p in packs])])
    real_timed = int(sum(len(d) for d in docs[bounds[args.warmup] :]))

    collate = PackedDataCollator()
    packed = [
        to_device(collate([{"input_ids": d} for d in docs[a:b]]), args.device) for a, b in zip(bounds, bounds[1:])
    ]
    bs = max(1, round(len(docs) / len(packs)))
    padded = []
    for i in range(0, len(docs), bs):
        group = docs[i : i + bs]
        width = max(len(d) for d in group)
        ids = torch.zeros(len(group), width, dtype=torch.long)
        mask = torch.zeros(len(group), width, dtype=torch.long)
        for r, d in enumerate(group):
            ids[r, : len(d)], mask[r, : len(d)] = d, 1
        labels = ids.masked_fill(mask == 0, -100)
        padded.append(to_device({"input_ids": ids, "attention_mask": mask, "labels": labels}, args.device))
    warm_docs = int(bounds[args.warmup])
    padded_timed_tokens = int(sum(len(d) for d in docs[(warm_docs // bs) * bs :]))
    padded_warmup = warm_docs // bs

    if args.model == "nemotron_h":
        hybrid(args, rep, packed, padded, real_timed, padded_timed_tokens, padded_warmup, docs, packs, bs)
        return
    runs: dict[str, list[float]] = {}
    for _ in range(args.repeat):  # modes in the same order every repeat, a fresh model each time
        model = make_model(args)
        model.set_attn_implementation("sdpa")
        a = argparse.Namespace(**{**vars(args), "warmup": padded_warmup})
        runs.setdefault("padded (sdpa + attention mask)", []).append(padded_timed_tokens / run(model, padded, a))
        no_iso = [{"input_ids": b["input_ids"], "labels": b["labels"]} for b in packed]
        runs.setdefault("packed, no isolation (plain causal row)", []).append(real_timed / run(model, no_iso, args))
        for backend in available_backends(args.device, getattr(torch, args.dtype)):
            if backend == "flex" and args.device == "cpu":
                continue  # flex_attention has no backward on CPU
            use_packed_attention(model, backend=backend)
            runs.setdefault(f"packed + isolation ({backend})", []).append(real_timed / run(model, packed, args))
    results = {k: statistics.median(v) for k, v in runs.items()}
    base = results["padded (sdpa + attention mask)"]
    unmasked = results["packed, no isolation (plain causal row)"]
    iso = {k: v for k, v in results.items() if k.startswith("packed + isolation")}
    best = max(iso, key=iso.get)
    rep.say(f"{args.device} {args.dtype}, Llama {args.layers} layers × {args.hidden} hidden, vocab {args.vocab}, capacity "
            f"{args.capacity}; {len(docs)} samples in {len(packs)} packs ({len(packs) - args.warmup} timed, {real_timed:,} "
            f"real tokens); padded batch size {bs}; threads {torch.get_num_threads()}; medians of {args.repeat}")  # fmt: skip
    for k, v in results.items():
        rep.figure(
            f"{k} real tokens/s",
            v,
            unit="tokens/s",
            baseline="padded tokens/s",
            baseline_value=base,
            ratio_means="mode / padded (higher is better)",
            target=">= 1.0" if k == best else None,
            spread=(min(runs[k]), max(runs[k])),
        )
    rep.figure(
        f"isolation overhead of the best backend ({best}) vs packing without boundaries",
        100 * (1 - iso[best] / unmasked),
        unit="%",
        ratio_means="absolute",
    )
    rep.finish()


def hybrid(args, rep, packed, padded, real_timed, padded_timed_tokens, padded_warmup, docs, packs, bs) -> None:
    """Nemotron-H: padded vs packed + isolation (exact) vs packed with whole-row mixers (leaky), interleaved."""
    names = ("padded (sdpa + attention mask)", "packed + isolation (exact mixers)", "packed, whole-row mixers (leaky)")
    runs: dict[str, list[float]] = {k: [] for k in names}
    a = argparse.Namespace(**{**vars(args), "warmup": padded_warmup})
    for _ in range(args.repeat):  # the three modes in the same order every repeat, fresh models
        model = make_model(args)
        model.set_attn_implementation("sdpa")
        runs[names[0]].append(padded_timed_tokens / run(model, padded, a))
        model = use_packed_attention(make_model(args))
        runs[names[1]].append(real_timed / run(model, packed, args))
        whole_row_mixers(model)
        runs[names[2]].append(real_timed / run(model, packed, args))
    med = {k: statistics.median(v) for k, v in runs.items()}
    rep.say(f"{args.device} {args.dtype}, Nemotron-H {args.layers} layers (M* pattern) × {args.hidden} hidden, vocab "
            f"{args.vocab}, capacity {args.capacity}; {len(docs)} samples in {len(packs)} packs ({len(packs) - args.warmup} "
            f"timed, {real_timed:,} real tokens); padded batch size {bs}; threads {torch.get_num_threads()}; medians "
            f"of {args.repeat}")  # fmt: skip
    for k in names:
        rep.figure(
            f"{k} real tokens/s", med[k], unit="tokens/s", baseline="padded tokens/s", baseline_value=med[names[0]],
            ratio_means="mode / padded (higher is better)", target=">= 1.3" if k == names[1] else None,
            spread=(min(runs[k]), max(runs[k])),
        )  # fmt: skip
    ratios = [e / w for e, w in zip(runs[names[1]], runs[names[2]])]
    rep.figure(
        "exact per-document mixers vs whole-row (leaky) mixers, tokens/s ratio", statistics.median(ratios), unit="x",
        ratio_means="exact / leaky per repeat (1.0 = the reset is free)", spread=(min(ratios), max(ratios)),
    )  # fmt: skip
    rep.finish()


if __name__ == "__main__":
    main()
