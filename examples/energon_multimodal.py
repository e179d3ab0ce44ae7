"""Energon-owned multimodal packing for a Megatron consumer with context parallelism — and the offline equivalent.

    python examples/energon_multimodal.py --recipe qwen2.5-vl --cp 2              # image chats
    python examples/energon_multimodal.py --recipe omni --cp 2                    # image + audio chats
    python examples/energon_multimodal.py --recipe nemotron-omni --cp 2           # Nemotron-Omni inputs
    python examples/energon_multimodal.py --recipe qwen2.5-vl --samples 64 --long 4   # with over-long samples

What it does:

1. writes ``--samples`` chats to ``--workdir``: chitchat questions with real photos (scikit-image) and, for
   ``omni``, speech-like chirps (wav) — as WebDataset tar shards prepared with ``energon prepare`` and as
   the same rows in JSONL with the PNG/WAV files beside it;
2. Energon path: a ``TaskEncoder`` with :class:`packwise.integrations.energon.PackwiseTaskEncoderMixin`
   tokenizes each chat (``packwise.multimodal.encode_media_chat``: Qwen2.5-VL image tokens, Qwen2.5-Omni
   audio tokens, MRoPE from transformers' rope index; ``nemotron-omni``: ``encode_nemotron_chat``, RADIO
   patches + ``image_grid_hw``, Parakeet mel frames + ``input_features_mask``, 1-D positions) and packs every buffer; the alignment comes from the
   topology (``packwise.plan.alignment_multiple(cp=--cp)``) so every sequence splits evenly over the CP
   ranks; each batch becomes megatron-core ``PackedSeqParams`` and is sharded per CP rank;
3. offline path (the Qwen recipes): ``packwise pack`` on the JSONL (image and audio parts) with the same capacity
   and alignment;
4. prints the packing report of each: utilisation, packs, samples/s, overflow counts.

The last line printed is one JSON object: ``{"energon": {...}, "offline": {...} | null}``.
"""

from __future__ import annotations

import argparse
import io
import json
import subprocess
import sys
import tarfile
import time
import wave
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch
from megatron.energon import (
    Cooker,
    DefaultTaskEncoder,
    Sample,
    WorkerConfig,
    basic_sample_keys,
    get_loader,
    get_train_dataset,
    stateless,
)

from packwise.assemble import MEDIA_KEYS, shard_for_context_parallel, to_packed_seq_params
from packwise.integrations.energon import PackwiseTaskEncoderMixin
from packwise.multimodal import (
    AudioSpec,
    NemotronOmniSpec,
    VisionSpec,
    encode_media_chat,
    encode_nemotron_chat,
    load_audio,
)
from packwise.plan import alignment_multiple

VISION = VisionSpec(max_pixels=224 * 224)  # small photos keep the example fast on a CPU
NEMOTRON = NemotronOmniSpec()  # tiny-nemotron-h-omni's ids over the qwen2.5 vocabulary; <= 64 patches per image
PHOTOS = ("astronaut", "coffee", "chelsea", "camera", "rocket")


def chirp(seconds: float, freq: float) -> bytes:
    """A 16 kHz mono chirp as wav bytes (speech-like stand-in; ``espeak-ng -w out.wav "text"`` for real speech)."""
    t = np.arange(int(16000 * seconds)) / 16000
    pcm = (0.3 * np.sin(2 * np.pi * (freq + 300 * t) * t) * 32767).astype("<i2")
    buf = io.BytesIO()
    with wave.open(buf, "wb") as w:
        w.setnchannels(1)
        w.setsampwidth(2)
        w.setframerate(16000)
        w.writeframes(pcm.tobytes())
    return buf.getvalue()


def photo(name: str, size: int) -> bytes:
    from PIL import Image
    from skimage import data

    img = getattr(data, name)()
    img = np.stack([img] * 3, -1) if img.ndim == 2 else img[..., :3]
    buf = io.BytesIO()
    Image.fromarray(img).resize((size, size * 3 // 4)).save(buf, format="PNG")
    return buf.getvalue()


def make_data(workdir: Path, *, recipe: str, samples: int, long: int) -> None:
    """Tar shards (+ ``energon prepare``) and the same rows as JSONL + PNG/WAV files."""
    from packwise.pipeline._demo import chitchat_conversations

    convs = chitchat_conversations()
    (workdir / "shards").mkdir(parents=True, exist_ok=True)
    (workdir / "images").mkdir(exist_ok=True)
    jsonl = []
    tars = [tarfile.open(workdir / "shards" / f"shard_{s}.tar", "w") for s in range(2)]  # noqa: SIM115 - closed below
    for i in range(samples):
        conv = convs[i % len(convs)]
        question = " ".join(m["content"] for m in conv[:-1])[:400]
        if i < long:
            question = "Describe everything you see, in detail. " * 60  # ~600 tokens: over the capacity
        files = {}
        if i % 4 != 3:  # a quarter of the chats are text-only
            files["png"] = photo(PHOTOS[i % len(PHOTOS)], 112 + 56 * (i % 3))
        if recipe in ("omni", "nemotron-omni") and i % 2 == 0:
            files["wav"] = chirp(0.5 + 0.25 * (i % 4), 200 + 10 * i)
        content = [{"type": "text", "text": question}]
        content += [{"type": "image"}] if "png" in files else []
        content += [{"type": "audio"}] if "wav" in files else []
        messages = [{"role": "user", "content": content}, {"role": "assistant", "content": conv[-1]["content"]}]
        files["json"] = json.dumps(messages).encode()
        for ext, payload in files.items():
            info = tarfile.TarInfo(f"{i:06d}.{ext}")
            info.size = len(payload)
            tars[i % 2].addfile(info, io.BytesIO(payload))
        parts = [{"type": "text", "text": question}]
        if "png" in files:
            (workdir / "images" / f"{i:06d}.png").write_bytes(files["png"])
            parts.append({"type": "image", "path": f"images/{i:06d}.png"})
        if "wav" in files:
            (workdir / "images" / f"{i:06d}.wav").write_bytes(files["wav"])
            parts.append({"type": "audio", "path": f"images/{i:06d}.wav"})
        if len(parts) == 1:
            parts = question
        jsonl.append({"messages": [{"role": "user", "content": parts}, messages[1]]})
    for tar in tars:
        tar.close()
    (workdir / "chats.jsonl").write_text("".join(json.dumps(r) + "\n" for r in jsonl))
    energon = Path(sys.executable).parent / "energon"
    subprocess.run(
        [str(energon), "prepare", "--non-interactive", "--split-parts", "train:shards/.*", "--sample-type",
         "CrudeWebdataset", "--force-overwrite", str(workdir)],
        check=True, capture_output=True,
    )  # fmt: skip


@dataclass
class ChatSample(Sample):
    messages: list
    image: bytes | None
    audio: bytes | None


@dataclass
class MediaSample(Sample):
    input_ids: torch.Tensor
    labels: torch.Tensor
    mm_token_type_ids: torch.Tensor | None
    position_ids: torch.Tensor | None
    pixel_values: torch.Tensor | None
    image_grid_thw: torch.Tensor | None
    input_features: torch.Tensor | None
    feature_attention_mask: torch.Tensor | None
    image_grid_hw: torch.Tensor | None = None  # Nemotron-Omni
    input_features_mask: torch.Tensor | None = None


@stateless
def cook(raw: dict) -> ChatSample:
    return ChatSample(
        **basic_sample_keys(raw), messages=json.loads(raw["json"]), image=raw.get("png"), audio=raw.get("wav")
    )


class MediaChatEncoder(PackwiseTaskEncoderMixin, DefaultTaskEncoder[ChatSample, MediaSample, dict, dict]):
    """Tokenize in ``preencode_sample`` (lengths for the planner), pack with packwise."""

    cookers = (Cooker(cook),)
    decoder = None  # raw bytes: decoded here with PIL / soundfile

    def __init__(self, *, capacity: int, alignment: int, rope: str, overflow: str):
        super().__init__()
        from packwise.text import load_tokenizer

        self.packing_capacity, self.packing_alignment, self.packing_overflow = capacity, alignment, overflow
        self.rope = rope
        self.tokenizer = load_tokenizer("qwen2.5")

    @stateless
    def preencode_sample(self, sample: ChatSample) -> MediaSample:
        from PIL import Image

        images = [Image.open(io.BytesIO(sample.image)).convert("RGB")] if sample.image else []
        audios = [load_audio(sample.audio, AudioSpec(), where=sample.__key__)] if sample.audio else []
        fields = dict.fromkeys(MediaSample.__dataclass_fields__.keys() - Sample.__dataclass_fields__.keys())
        if self.rope == "nemotron_h_omni":  # RADIO patches, Parakeet mel frames, 1-D positions
            encoded = encode_nemotron_chat(sample.messages, self.tokenizer, images=images, audios=audios,
                                           spec=NEMOTRON, where=sample.__key__)  # fmt: skip
            del encoded["mm_token_type_ids"]  # the model takes no token types (its placeholders are its ids)
        else:
            encoded = encode_media_chat(
                sample.messages, self.tokenizer, images=images, audios=audios, vision=VISION, rope=self.rope,
                where=sample.__key__,
            )  # fmt: skip
        fields.update(encoded)
        return MediaSample.derive_from(sample, **fields)


def run_energon(
    workdir: Path, *, capacity: int, cp: int, rope: str, overflow: str, workers: int, keep: list | None = None
) -> dict:
    """Pack through Energon; ``keep``: a list that receives every batch (a test feeds them to a model)."""
    alignment = alignment_multiple(cp=cp)
    encoder = MediaChatEncoder(capacity=capacity, alignment=alignment, rope=rope, overflow=overflow)
    ds = get_train_dataset(
        str(workdir), worker_config=WorkerConfig(rank=0, world_size=1, num_workers=workers), batch_size=2,
        shuffle_buffer_size=None, max_samples_per_sequence=None, packing_buffer_size=32, task_encoder=encoder,
        repeat=False,
    )  # fmt: skip
    start = time.perf_counter()
    samples = packs = real = 0
    counts: dict[str, int] = {}
    media: dict[str, list] = {}
    for batch in get_loader(ds):
        # What a Megatron forward takes, plus this rank's tokens. No multi-token prediction here (a multimodal
        # model; PackingConfig refuses consumer.multi_token_prediction with Energon packing, since MTP needs
        # cfg.packed_seq_params(batch)'s physical boundaries and the Energon batch carries no MTP flag).
        params = to_packed_seq_params(batch)
        shards = [shard_for_context_parallel(batch, cp_size=cp, cp_rank=r) for r in range(cp)]
        assert sum(s["input_ids"].shape[-1] for s in shards) == batch["input_ids"].shape[-1]
        cu_padded = params["cu_seqlens_q_padded"] if isinstance(params, dict) else params.cu_seqlens_q_padded
        assert int(cu_padded[-1]) == batch["input_ids"].shape[-1]  # the segments tile the row
        samples += sum(len(k) for k in batch["keys"])
        packs += len(batch["keys"])
        real += int(batch["cu_seqlens"][-1])
        for k, v in batch["packing_counts"].items():
            counts[k] = counts.get(k, 0) + v
        for k in MEDIA_KEYS:  # media rows per field, summed over the batches, with their trailing shape
            if k in batch:
                rows, *rest = batch[k].shape
                media[k] = [media.get(k, [0])[0] + rows, *rest]
        if keep is not None:
            keep.append(batch)
    seconds = time.perf_counter() - start
    return {
        "alignment": alignment, "samples": samples, "packs": packs, "real_tokens": real,
        "utilisation": round(real / (packs * capacity), 4), "samples_per_s": round(samples / seconds, 1),
        "seconds": round(seconds, 2), "overflow": counts, "media": media,
        # buffers / samples / packs seen by this process's encoder (the workers' own copies when --workers > 0)
        "encoder_counts": {k: encoder.packing_counts[k] for k in ("buffers", "samples", "packs")} if not workers else None,
    }  # fmt: skip


def run_offline(workdir: Path, *, capacity: int, cp: int, overflow: str) -> dict:
    out = workdir / "offline"
    cmd = [sys.executable, "-c", "from packwise.cli import run; run()", "pack", str(workdir / "chats.jsonl"), "-o", str(out),
           "--capacity", str(capacity), "--alignment", str(alignment_multiple(cp=cp)), "--overflow", overflow,
           "--max-pixels", str(VISION.max_pixels), "--tokenizer", "qwen2.5", "--overwrite", "--quiet"]  # fmt: skip
    start = time.perf_counter()
    subprocess.run(cmd, check=True, capture_output=True)
    seconds = time.perf_counter() - start
    report = json.loads((out / "report.json").read_text())
    m = report["metrics"]
    n = report["rows_read"]
    names = ("samples_truncated", "tokens_truncated", "loss_tokens_truncated", "samples_split", "pieces_added",
             "samples_dropped", "tokens_dropped", "loss_tokens_dropped", "loss_tokens_masked_at_boundary")  # fmt: skip
    mm = report["multimodal"]
    counts = {k: report[k] for k in names} | {"media_dropped": mm["images_dropped"] + mm.get("audio_dropped", 0)}
    return {
        "samples": n, "packs": m["num_packs"], "utilisation": round(m["utilisation"], 4),
        "samples_per_s": round(n / seconds, 1), "seconds": round(seconds, 2), "overflow": counts,
    }  # fmt: skip


def main(argv: list[str] | None = None) -> dict:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--recipe", choices=("qwen2.5-vl", "omni", "nemotron-omni"), default="qwen2.5-vl")
    p.add_argument("--samples", type=int, default=48)
    p.add_argument("--long", type=int, default=2, help="over-long samples (first N), to show the overflow counts")
    p.add_argument("--capacity", type=int, default=512)
    p.add_argument("--cp", type=int, default=2, help="context-parallel size: alignment = alignment_multiple(cp=...)")
    p.add_argument("--overflow", choices=("truncate", "split", "drop", "error"), default="truncate")
    p.add_argument("--workers", type=int, default=0)
    p.add_argument("--workdir", type=Path, default=Path("energon_multimodal_data"))
    p.add_argument("--no-offline", action="store_true", help="skip the offline CLI comparison")
    args = p.parse_args(argv)
    make_data(args.workdir, recipe=args.recipe, samples=args.samples, long=args.long)
    rope = {"omni": "qwen2_5_omni", "nemotron-omni": "nemotron_h_omni"}.get(args.recipe, "qwen2_5_vl")
    energon = run_energon(args.workdir, capacity=args.capacity, cp=args.cp, rope=rope, overflow=args.overflow,
                          workers=args.workers)  # fmt: skip
    print(f"energon  ({args.recipe}, cp={args.cp}, alignment {energon['alignment']}): {energon['samples']} samples "
          f"-> {energon['packs']} packs, utilisation {energon['utilisation']}, {energon['samples_per_s']} samples/s; "
          f"overflow {energon['overflow']}")  # fmt: skip
    offline = None
    if not args.no_offline and args.recipe != "nemotron-omni":  # the offline CLI packs Qwen media only
        offline = run_offline(args.workdir, capacity=args.capacity, cp=args.cp, overflow=args.overflow)
        print(f"offline  (packwise pack): {offline['samples']} samples -> {offline['packs']} packs, utilisation "
              f"{offline['utilisation']}, {offline['samples_per_s']} samples/s; overflow {offline['overflow']}")  # fmt: skip
    result = {"energon": energon, "offline": offline}
    print(json.dumps(result))
    return result


if __name__ == "__main__":
    main()
