"""Nemotron-Omni through the offline pipeline: JSONL chats with image and audio parts -> ``packwise pack
--media-family nemotron-omni`` -> Parquet -> PackedParquetDataset -> collate_packs -> the tiny ``nemotron_h_omni``
model, each document's logits equal to the document encoded by ``encode_nemotron_chat`` and run alone."""

from __future__ import annotations

import json

import numpy as np
import pytest
import soundfile
import torch
from PIL import Image

pytest.importorskip("transformers")
skimage_data = pytest.importorskip("skimage.data")

from packwise.assemble import collate_packs  # noqa: E402
from packwise.cli import main  # noqa: E402
from packwise.data import PackedParquetDataset  # noqa: E402
from packwise.multimodal import encode_nemotron_chat, load_audio  # noqa: E402
from packwise.pipeline import pack_dataset  # noqa: E402

IMG, AUD, AUD_S, AUD_E = 151655, 151646, 151647, 151648


@pytest.fixture(scope="module")
def media(tmp_path_factory):
    d = tmp_path_factory.mktemp("nemo")
    Image.fromarray(skimage_data.astronaut()).resize((128, 96)).save(d / "astro.png")  # -> 6 x 8 patches, 12 tokens
    t = np.arange(16000) / 16000  # 1 s at 16 kHz -> 100 mel frames -> 13 audio tokens
    soundfile.write(d / "tone.wav", (0.3 * np.sin(2 * np.pi * (300 + 200 * t) * t)).astype(np.float32), 16000)
    soundfile.write(d / "long.wav", np.zeros(48000, np.float32), 16000)  # 3 s: over the 2 s chunk
    return d


def chat(*parts, answer="Seen."):
    content = [{"type": k, "path": p} if k != "text" else {"type": "text", "text": p} for k, p in parts]
    return {"messages": [{"role": "user", "content": content}, {"role": "assistant", "content": answer}]}


ROWS = [chat(("text", "hello there")), chat(("image", "astro.png"), ("text", "What?")),
        chat(("audio", "tone.wav"), ("text", "Hm?")), chat(("image", "astro.png"), ("audio", "tone.wav"), ("text", "Both?"))]  # fmt: skip


def write(path, rows):
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path


def alone(row, media, tok):
    """The reference: the row encoded by encode_nemotron_chat with the media read directly."""
    [user, answer] = row["messages"]
    parts = [{"type": p["type"]} if p["type"] != "text" else p for p in user["content"]]
    images = [Image.open(media / p["path"]) for p in user["content"] if p["type"] == "image"]
    audios = [load_audio(media / p["path"]) for p in user["content"] if p["type"] == "audio"]
    return encode_nemotron_chat([{**user, "content": parts}, answer], tok, images=images, audios=audios)


@pytest.fixture(scope="module")
def packed(media, tmp_path_factory):
    out = tmp_path_factory.mktemp("nemo_out") / "out"
    src = write(media / "in.jsonl", ROWS)
    args = ["pack", str(src), "-o", str(out), "--capacity", "1024", "--media-family", "nemotron-omni", "-q"]
    assert main([*args, "--no-report"]) == 0
    return out


def test_pack_records_the_family_and_the_models_token_counts(packed):
    meta = json.loads((packed / "metadata.json").read_text())["multimodal"]
    assert meta["media_family"] == "nemotron-omni" and meta["nemotron_omni"]["patch_size"] == 16
    assert (meta["images_packed"], meta["audio_packed"]) == (2, 2) and "audio" not in meta  # no Whisper spec
    pack = PackedParquetDataset(packed)[0]
    ids = pack.input_ids
    # 2 images x (6 x 8 patches / 2²) = 24 image tokens; 2 clips x 13 (101 -> 51 -> 26 -> 13) audio tokens
    assert int((ids == IMG).sum()) == 24 and int((ids == AUD).sum()) == 26 and int((ids == AUD_S).sum()) == 2
    assert pack.media["image_grid_hw"].tolist() == [[6, 8], [6, 8]] and tuple(pack.media["pixel_values"].shape) == (
        96,
        768,
    )
    assert tuple(pack.media["input_features"].shape) == (2, 201, 80)
    assert pack.media["input_features_mask"].sum(-1).tolist() == [100, 100]
    assert pack.position_ids.dim() == 1  # 1-D, from 0 in every document
    cu = pack.cu_seqlens.tolist()
    assert all(pack.position_ids[a:b].tolist() == list(range(b - a)) for a, b in zip(cu, cu[1:]))


def test_pack_equals_the_documents_encoded_alone(packed, media):
    from packwise.text import load_tokenizer

    tok = load_tokenizer("qwen2.5")
    pack = PackedParquetDataset(packed)[0]
    cu, img, clip, patches = pack.cu_seqlens.tolist(), 0, 0, 0
    for (a, b), src in zip(zip(cu, cu[1:]), pack.metadata["source_index"]):
        ref = alone(ROWS[src], media, tok)
        assert torch.equal(pack.input_ids[a:b], ref["input_ids"]) and torch.equal(pack.labels[a:b], ref["labels"])
        if "pixel_values" in ref:
            n = ref["pixel_values"].shape[0]
            assert torch.equal(pack.media["pixel_values"][patches : patches + n], ref["pixel_values"])
            assert torch.equal(pack.media["image_grid_hw"][img : img + 1], ref["image_grid_hw"])
            patches, img = patches + n, img + 1
        if "input_features" in ref:
            assert torch.equal(pack.media["input_features"][clip : clip + 1], ref["input_features"])
            assert torch.equal(pack.media["input_features_mask"][clip : clip + 1], ref["input_features_mask"])
            clip += 1
    assert (img, clip) == (2, 2)


def test_family_mismatch_and_video_and_long_clip_refused_by_name(packed, media):
    with pytest.raises(ValueError, match=r"packed with media_family='nemotron-omni' but media_family='qwen2.5-vl'"):
        PackedParquetDataset(packed, media_family="qwen2.5-vl")
    with pytest.raises(ValueError, match=r"media_family='whisper' is not one of qwen2.5-vl, nemotron-omni"):
        PackedParquetDataset(packed, media_family="whisper")
    from packwise.multimodal import VisionSpec

    spec = VisionSpec(media_family="nemotron-omni")
    video = {"messages": [{"role": "user", "content": [{"type": "video", "path": "astro.png"}]},
                          {"role": "assistant", "content": "x"}]}  # fmt: skip
    with pytest.raises(
        ValueError, match=r"video part, which packwise does not encode for media_family 'nemotron-omni'"
    ):
        pack_dataset(write(media / "video.jsonl", [video]), capacity=512, vision=spec)
    with pytest.raises(ValueError, match=r"long\.wav, which cannot be used .*48000 samples; a clip needs 1 to 32000"):
        pack_dataset(write(media / "long.jsonl", [chat(("audio", "long.wav"))]), capacity=512, vision=spec)
    with pytest.raises(ValueError, match=r"media_family='nemotron' is not one of qwen2.5-vl, nemotron-omni"):
        VisionSpec(media_family="nemotron")
    assert main(["pack", str(media / "in.jsonl"), "-o", str(media / "x"), "--media-family", "nemotron"]) == 2


@pytest.mark.slow  # tiny nemotron_h_omni forwards (~5 s)
def test_parquet_batch_feeds_tiny_nemotron_omni_isolated(packed, media):
    """A batch collated from the Parquet output, run packed on the tiny model: every document's logits equal the
    document (encoded alone from the raw chat) run alone, to 1e-5; without packwise's attention they leak."""
    from packwise.hf import use_packed_attention
    from packwise.text import load_tokenizer
    from packwise.verify._nemotron import tiny_nemotron_omni_model

    tok = load_tokenizer("qwen2.5")
    model = tiny_nemotron_omni_model(len(tok))
    pack = PackedParquetDataset(packed)[0]
    batch = collate_packs([pack])
    keys = ("input_ids", "position_ids", "pixel_values", "image_grid_hw", "input_features", "input_features_mask")
    inputs = {k: batch[k] for k in keys} | {"mm_token_type_ids": batch["mm_token_type_ids"].long()}
    cu = pack.cu_seqlens.tolist()
    with torch.no_grad():
        raw = model(**inputs, use_cache=False).logits[0]  # no packwise: one causal sequence, documents leak
        use_packed_attention(model, backend="sdpa")
        got = model(**inputs, **{k: batch[k] for k in ("cu_seq_lens_q", "cu_seq_lens_k", "max_length_q",
                                                       "max_length_k")}, use_cache=False).logits[0]  # fmt: skip
        diffs, leaks = [], []
        for (a, b), src in zip(zip(cu, cu[1:]), pack.metadata["source_index"]):
            ref = alone(ROWS[src], media, tok)
            one = {k: v for k, v in ref.items() if k not in ("labels", "position_ids")}
            one = {k: v[None] if k in ("input_ids", "mm_token_type_ids") else v for k, v in one.items()}
            want = model(**one, use_cache=False).logits[0]
            diffs.append((got[a:b] - want).abs().max().item())
            leaks.append((raw[a:b] - want).abs().max().item())
    assert len(diffs) == 4 and max(diffs) <= 1e-5, diffs
    assert sorted(leaks)[1] > 1e-3, leaks  # the control: every document after the first leaks without packwise


def test_truncation_keeps_a_clip_whole_and_counts_it(media):
    from packwise.multimodal import VisionSpec

    row = chat(("text", "word " * 20), ("audio", "tone.wav"), ("text", "x"))
    src = write(media / "trunc.jsonl", [row])
    table, report = pack_dataset(src, capacity=30, vision=VisionSpec(media_family="nemotron-omni"))
    ids = np.asarray(table.column("input_ids").to_pylist()[0])
    assert (ids == AUD).sum() == 0 and (ids == AUD_S).sum() == 0 and len(ids) <= 30
    assert report.multimodal["audio_dropped"] == 1 and report.samples_truncated == 1
    assert report.tokens_read == report.tokens_packed + report.tokens_truncated
