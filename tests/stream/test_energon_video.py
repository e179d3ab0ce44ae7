"""A Qwen2.5-VL video document packed by the Energon mixin with text and image documents: every video field
reaches the batch in step with its tokens, and the packed forward of the tiny Qwen2.5-VL equals each document
alone (logits)."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pytest
import torch

pytest.importorskip("megatron.energon")

from megatron.energon import DefaultTaskEncoder, Sample
from PIL import Image

from packwise.integrations.energon import PackwiseTaskEncoderMixin
from packwise.multimodal import VisionSpec, encode_media_chat

SPEC = VisionSpec(max_pixels=56 * 56)
FIELDS = ("mm_token_type_ids", "position_ids", "pixel_values", "image_grid_thw", "pixel_values_videos",
          "video_grid_thw", "second_per_grid_ts")  # fmt: skip


@dataclass
class VLSample(Sample):
    input_ids: torch.Tensor
    labels: torch.Tensor
    mm_token_type_ids: torch.Tensor | None
    position_ids: torch.Tensor | None
    pixel_values: torch.Tensor | None
    image_grid_thw: torch.Tensor | None
    pixel_values_videos: torch.Tensor | None
    video_grid_thw: torch.Tensor | None
    second_per_grid_ts: torch.Tensor | None


class VLEncoder(PackwiseTaskEncoderMixin, DefaultTaskEncoder[VLSample, VLSample, dict, dict]):
    packing_capacity = 256
    packing_alignment = 1


def test_video_document_packs_with_text_and_image_and_is_isolated():
    from packwise.hf import use_packed_attention
    from packwise.verify._models import load_model

    model, tok = load_model("tiny-qwen2.5-vl")
    rng = np.random.default_rng(0)
    noise = [Image.fromarray(rng.integers(0, 256, (56, 56, 3), dtype=np.uint8)) for _ in range(5)]

    def chat(part):
        content = [part, {"type": "text", "text": "What is it?"}] if part else "What is it?"
        return [{"role": "user", "content": content}, {"role": "assistant", "content": "Noise."}]

    docs = [
        encode_media_chat(chat(None), tok, vision=SPEC),
        encode_media_chat(chat({"type": "video"}), tok, videos=[noise[:3]], video_fps=[1.0], vision=SPEC),
        encode_media_chat(chat({"type": "image"}), tok, images=[noise[3]], vision=SPEC),
        encode_media_chat(chat({"type": "video"}), tok, videos=[noise], vision=SPEC),
    ]
    samples = [
        VLSample(
            __key__=f"d{i}",
            __restore_key__=(),
            input_ids=d["input_ids"],
            labels=d["labels"],
            **{k: d.get(k) for k in FIELDS},
        )
        for i, d in enumerate(docs)
    ]
    enc = VLEncoder()
    [group] = enc.select_samples_to_pack(samples)
    batch = enc.batch(list(enc.pack_selected_samples(group)))
    order = [int(k[1:]) for k in batch["keys"][0]]
    assert batch["video_grid_thw"].tolist() == [docs[i]["video_grid_thw"][0].tolist() for i in order if i in (1, 3)]
    assert torch.equal(
        batch["pixel_values_videos"], torch.cat([docs[i]["pixel_values_videos"] for i in order if i in (1, 3)])
    )
    assert batch["second_per_grid_ts"].tolist() == [{1: 2.0, 3: 1.0}[i] for i in order if i in (1, 3)]
    assert int((batch["mm_token_type_ids"] == 2).sum()) == 8 + 12  # grids (2, 4, 4) and (3, 4, 4): t·h·w / merge²
    net = use_packed_attention(model, backend="sdpa")
    # the batch's MRoPE rows (3, 1, T); transformers reads sequence starts from a text-position row in front
    text = torch.cat([torch.arange(docs[i]["input_ids"].shape[0]) for i in order])[None, None]
    positions = torch.cat([text, batch["position_ids"]])
    cu = torch.tensor([0, *np.cumsum([docs[i]["input_ids"].shape[0] for i in order])], dtype=torch.int32)
    assert torch.equal(batch["cu_seqlens"].to(torch.int32), cu)
    bounds = {"cu_seq_lens_q": cu, "cu_seq_lens_k": cu, "max_length_q": int(cu.diff().max()),
              "max_length_k": int(cu.diff().max())}  # fmt: skip
    with torch.no_grad():
        packed = net(input_ids=batch["input_ids"], position_ids=positions, **bounds,
                     mm_token_type_ids=batch["mm_token_type_ids"], pixel_values=batch["pixel_values"],
                     image_grid_thw=batch["image_grid_thw"], pixel_values_videos=batch["pixel_values_videos"],
                     video_grid_thw=batch["video_grid_thw"], second_per_grid_ts=batch["second_per_grid_ts"]).logits[0]  # fmt: skip
        start = 0
        for i in order:
            d = docs[i]
            media = {k: d[k] for k in ("pixel_values", "image_grid_thw", "pixel_values_videos", "video_grid_thw",
                                       "second_per_grid_ts") if k in d}  # fmt: skip
            alone = model(input_ids=d["input_ids"][None], mm_token_type_ids=d["mm_token_type_ids"][None],
                          attention_mask=torch.ones_like(d["input_ids"])[None], **media).logits[0]  # fmt: skip
            n = d["input_ids"].shape[0]
            assert (packed[start : start + n] - alone).abs().max() <= 1e-5, i
            start += n
