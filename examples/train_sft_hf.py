"""Fine-tune a causal LM on packed chitchat conversations with ``transformers.Trainer`` — and prove step-0 parity.

    python examples/train_sft_hf.py --model smollm2 --max-steps 4            # the real SmolLM2-135M, CPU
    python examples/train_sft_hf.py --model tiny-llama --max-steps 20        # random tiny Llama, ~2 min on 2 cores
    python examples/train_sft_hf.py --model smollm2 --trl                    # the same collator in trl.SFTTrainer

What it does:

1. tokenizes chitchat conversations with the model's tokenizer and chat template and packs them offline with
   ``packwise.pack_dataset`` (BFD, capacity ``--capacity``) into an HF ``Dataset`` of packs;
2. step-0 parity: on the first pack, computes the loss and gradient norm packed (one ``[1, T]`` row,
   ``PackedDataCollator`` + ``use_packed_attention``) and unpacked (the same sequences right-padded into
   ``[N, L]`` with an attention mask), both normalised by the same global token count;
3. trains ``--max-steps`` steps packed and ``--max-steps`` steps padded (the same sequences per step), logging
   loss, and saves ``loss.png``.

The last line printed is one JSON object with ``step0_loss_packed``, ``step0_loss_padded``,
``step0_grad_norm_packed``, ``step0_grad_norm_padded``, ``tokens_per_s_packed``, ``tokens_per_s_padded``.

The tokens/s figures are this run's wall clock, not a benchmark: real (non-padding) tokens per second of the
training steps (forward + backward + optimizer) after the first step of each run (warm-up), one run per mode,
one after the other, under whatever else the machine is doing. On a CPU with a tiny model the packed path can
come out slower (per-document attention, few steps); ``benchmarks/bench_train.py`` measures throughput.
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

import numpy as np
import torch


def padded_collate(features: list[dict]) -> dict:
    """The sequences of the given packs, right-padded into ``[N, L]`` (the unpacked baseline)."""
    seqs = []
    for f in features:
        cuts = np.cumsum(f["seq_lengths"])[:-1]
        seqs += list(zip(np.split(np.asarray(f["input_ids"]), cuts), np.split(np.asarray(f["labels"]), cuts)))
    width = max(len(ids) for ids, _ in seqs)
    ids = torch.zeros(len(seqs), width, dtype=torch.long)
    labels = torch.full((len(seqs), width), -100, dtype=torch.long)
    mask = torch.zeros(len(seqs), width, dtype=torch.long)
    for r, (i, lab) in enumerate(seqs):
        ids[r, : len(i)] = torch.from_numpy(i.astype(np.int64))
        labels[r, : len(i)] = torch.from_numpy(lab.astype(np.int64))
        mask[r, : len(i)] = 1
    return {"input_ids": ids, "labels": labels, "attention_mask": mask}


def loss_and_grad_norm(model, batch: dict, num_items: int) -> tuple[float, float]:
    """HF loss with a global normaliser (what Trainer passes as num_items_in_batch) and the gradient norm."""
    model.zero_grad(set_to_none=True)
    loss = model(**batch, num_items_in_batch=torch.tensor(num_items)).loss
    loss.backward()
    norm = torch.sqrt(sum((p.grad.double() ** 2).sum() for p in model.parameters() if p.grad is not None))
    model.zero_grad(set_to_none=True)
    return float(loss.detach()), float(norm)


def build_dataset(args, tokenizer):
    from packwise import pack_dataset
    from packwise.files._read import RawInput
    from packwise.pipeline._demo import chitchat_conversations

    convs = chitchat_conversations()[: args.samples]
    raw = RawInput(name=f"chitchat[:{args.samples}]", kind="messages", rows=[{"messages": c} for c in convs])
    # BFD (the default) is deterministic: no seed to pass
    table, report = pack_dataset(raw, capacity=args.capacity, tokenizer=tokenizer)
    import datasets

    return datasets.Dataset(table), report


def _timed(collator, real: list[int], held: list[int]):
    """``collator`` that records each batch's real tokens and the tokens it holds (padding included)."""

    def collate(features):
        batch = collator(features)
        real.append(int(sum(sum(f["seq_lengths"]) for f in features)))
        held.append(int(batch["input_ids"].numel()))
        return batch

    return collate


def train(model, dataset, collator, args, out_dir: Path, name: str) -> tuple[list[float], dict]:
    """Train ``--max-steps`` steps; the losses and the timing of each step (``seconds``, ``real_tokens``,
    ``tokens``: per step, in order)."""
    from transformers import Trainer, TrainerCallback, TrainingArguments

    timing = {"seconds": [], "real_tokens": [], "tokens": []}

    class StepTimer(TrainerCallback):
        def on_step_begin(self, *_, **__):
            self.start = time.perf_counter()

        def on_step_end(self, *_, **__):
            timing["seconds"].append(time.perf_counter() - self.start)

    targs = TrainingArguments(
        output_dir=str(out_dir / name), per_device_train_batch_size=1, max_steps=args.max_steps,
        learning_rate=args.lr, logging_steps=1, report_to=[], save_strategy="no", use_cpu=args.device == "cpu",
        remove_unused_columns=False, dataloader_num_workers=0, seed=args.seed, disable_tqdm=True,
        lr_scheduler_type="constant", optim="adamw_torch",
    )  # fmt: skip
    collate = _timed(collator, timing["real_tokens"], timing["tokens"])
    trainer = Trainer(model=model, args=targs, train_dataset=dataset, data_collator=collate, callbacks=[StepTimer()])
    trainer.train()
    losses = [h["loss"] for h in trainer.state.log_history if "loss" in h]
    return losses, timing


def _rate(timing: dict) -> tuple[float, int]:
    """Real tokens/s over the steps after the first (warm-up; every step when there is one), and how many."""
    skip = 1 if len(timing["seconds"]) > 1 else 0
    seconds = timing["seconds"][skip:]
    return sum(timing["real_tokens"][skip : skip + len(seconds)]) / sum(seconds), len(seconds)


def main(argv: list[str] | None = None) -> dict:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--model", default="smollm2", help="tiny-llama | tiny-qwen2 | smollm2 | PATH")
    ap.add_argument("--max-steps", type=int, default=4)
    ap.add_argument("--capacity", type=int, default=1024)
    ap.add_argument("--samples", type=int, default=64, help="chitchat conversations to pack")
    ap.add_argument("--lr", type=float, default=2e-5)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--device", default="cpu")
    ap.add_argument("--backend", default="auto", help="packwise attention backend (auto, sdpa, dense, flash, ...)")
    ap.add_argument("--output", default="out/train_sft_hf")
    ap.add_argument("--trl", action="store_true", help="also run the packed collator inside trl.SFTTrainer")
    args = ap.parse_args(argv)
    out_dir = Path(args.output)
    out_dir.mkdir(parents=True, exist_ok=True)

    from packwise.hf import PackedDataCollator, use_packed_attention
    from packwise.verify import load_model

    torch.manual_seed(args.seed)
    model, tok = load_model(args.model)
    dataset, report = build_dataset(args, tok)
    steps = min(args.max_steps, len(dataset))
    print(f"{report.packs} packs of ≤ {args.capacity} tokens from {report.samples} conversations "
          f"(utilisation {report.metrics.utilisation:.3f}); training {steps} steps each way")  # fmt: skip

    # step-0 parity on pack 0: identical weights, identical sequences, identical global normaliser
    use_packed_attention(model, backend=args.backend)
    # remove_unused_columns=False keeps pack_dataset's source_index (one value per document, not per token)
    collate = PackedDataCollator(drop_columns=("source_index",))  # dropped by name, counted in dropped_columns
    first = [dataset[0]]
    num_items = int(sum(1 for t in first[0]["labels"] if t != -100))
    loss_packed, norm_packed = loss_and_grad_norm(model, collate(first), num_items)
    model.set_attn_implementation("sdpa")
    loss_padded, norm_padded = loss_and_grad_norm(model, padded_collate(first), num_items)
    print(f"step 0: loss packed {loss_packed:.6f} padded {loss_padded:.6f} (rel Δ {abs(loss_packed - loss_padded) / abs(loss_padded):.2e}); "
          f"grad norm packed {norm_packed:.6f} padded {norm_padded:.6f}")  # fmt: skip

    state = {k: v.clone() for k, v in model.state_dict().items()}
    use_packed_attention(model, backend=args.backend)
    losses_packed, time_packed = train(model, dataset, collate, args, out_dir, "packed")
    model.load_state_dict(state)
    model.set_attn_implementation("sdpa")
    losses_padded, time_padded = train(model, dataset, padded_collate, args, out_dir, "padded")
    tokens = sum(time_packed["real_tokens"][:steps])  # the packs the Trainer visited (it shuffles)
    (rate_packed, timed), (rate_padded, _) = _rate(time_packed), _rate(time_padded)

    if args.trl:
        model.load_state_dict(state)
        from trl import SFTConfig, SFTTrainer

        use_packed_attention(model, backend=args.backend)
        cfg = SFTConfig(
            output_dir=str(out_dir / "trl"), max_steps=min(2, steps), per_device_train_batch_size=1, report_to=[],
            remove_unused_columns=False, dataset_kwargs={"skip_prepare_dataset": True}, use_cpu=args.device == "cpu",
            logging_steps=1, save_strategy="no", disable_tqdm=True,
        )  # fmt: skip
        trl_trainer = SFTTrainer(
            model=model, args=cfg, train_dataset=dataset, data_collator=collate, processing_class=tok
        )
        trl_trainer.train()
        print(
            "trl.SFTTrainer with PackedDataCollator:", [h["loss"] for h in trl_trainer.state.log_history if "loss" in h]
        )

    _plot(losses_packed, losses_padded, out_dir / "loss.png")
    result = {
        "model": args.model,
        "steps": steps,
        "real_tokens": tokens,
        "step0_loss_packed": loss_packed,
        "step0_loss_padded": loss_padded,
        "step0_loss_rel_diff": abs(loss_packed - loss_padded) / abs(loss_padded),
        "step0_grad_norm_packed": norm_packed,
        "step0_grad_norm_padded": norm_padded,
        "losses_packed": losses_packed,
        "losses_padded": losses_padded,
        "tokens_per_s_packed": rate_packed,
        "tokens_per_s_padded": rate_padded,
        "timed_steps": timed,
        "tokens_held_packed": sum(time_packed["tokens"][:steps]),
        "tokens_held_padded": sum(time_padded["tokens"][:steps]),
        "loss_plot": str(out_dir / "loss.png"),
    }
    print(f"tokens: packed rows hold {result['tokens_held_packed']:,}, padded batches {result['tokens_held_padded']:,} "
          f"(with padding) for the same {tokens:,} real tokens")  # fmt: skip
    print(f"this run's wall clock (not a benchmark: one run per mode, {timed} timed step(s) after a warm-up step, "
          f"under this machine's load; see benchmarks/bench_train.py): packed {rate_packed:.0f} real tokens/s, "
          f"padded {rate_padded:.0f} (packed/padded {rate_packed / rate_padded:.2f})")  # fmt: skip
    print(json.dumps(result))
    return result


def _plot(packed: list[float], padded: list[float], path: Path) -> None:
    try:
        from matplotlib.backends.backend_agg import FigureCanvasAgg
        from matplotlib.figure import Figure
    except ImportError:
        return
    fig = Figure(figsize=(6, 3.5))
    ax = fig.add_subplot()
    ax.plot(range(1, len(packed) + 1), packed, marker="o", label="packed (packwise)")
    ax.plot(range(1, len(padded) + 1), padded, marker="x", label="padded")
    ax.set_xlabel("step")
    ax.set_ylabel("training loss")
    ax.legend()
    fig.tight_layout()
    FigureCanvasAgg(fig).print_png(str(path))


if __name__ == "__main__":
    main()
