"""Audio parts through the offline pipeline: JSONL -> packwise pack -> Parquet -> PackedParquetDataset -> collator."""

from __future__ import annotations

import json

import numpy as np
import pytest
import soundfile
import torch
from PIL import Image

from packwise.assemble import collate_packs
from packwise.cli import main
from packwise.data import PackedParquetDataset
from packwise.multimodal import VisionSpec, audio_features, load_audio, omni_position_ids
from packwise.pipeline import pack_dataset

SPEC = VisionSpec(max_pixels=112 * 112)  # 112x112 -> 16 image tokens
AUDIO, BOS, EOS = 151646, 151647, 151648


@pytest.fixture(scope="module")
def media(tmp_path_factory):
    d = tmp_path_factory.mktemp("audio")
    t = np.arange(16000) / 16000
    soundfile.write(d / "one_second.wav", (0.3 * np.sin(2 * np.pi * 440 * t)).astype(np.float32), 16000)  # 25 tokens
    t = np.arange(4000) / 8000
    soundfile.write(
        d / "half.flac", (0.3 * np.sin(2 * np.pi * 300 * t)).astype(np.float32), 8000
    )  # 0.5 s: 50 frames -> 12 tokens
    # noise, not a flat colour: a flat image's vision q/k gradients are ~1e-12, pure float noise
    Image.fromarray(np.random.default_rng(0).integers(0, 256, (112, 112, 3), dtype=np.uint8)).save(d / "noise.png")
    return d


def chat(*parts, answer="Heard it."):
    content = [{"type": k, "path": p} if k != "text" else {"type": "text", "text": p} for k, p in parts]
    return {"messages": [{"role": "user", "content": content}, {"role": "assistant", "content": answer}]}


def write(path, rows):
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path


def test_audio_tokens_counted_and_written(media):
    rows = [
        chat(("audio", "one_second.wav"), ("text", "What is it?")),
        chat(("text", "plain")),
        chat(("image", "noise.png"), ("audio", "half.flac"), ("text", "Both?")),
    ]
    table, report = pack_dataset(write(media / "a.jsonl", rows), capacity=512, vision=SPEC)
    assert table.num_rows == 1
    ids = np.asarray(table.column("input_ids").to_pylist()[0])
    assert (ids == AUDIO).sum() == 25 + 12 and (ids == BOS).sum() == 2 == (ids == EOS).sum()
    assert (ids == SPEC.image_token_id).sum() == 16
    types = np.asarray(table.column("mm_token_type_ids").to_pylist()[0])
    assert (types == 3).sum() == 37 and (types == 1).sum() == 16
    labels = np.asarray(table.column("labels").to_pylist()[0])
    assert (labels[types > 0] == -100).all()  # media tokens are never targets
    order = table.column("source_index").to_pylist()[0]
    frames = dict(zip(order, [[], [], []]))
    per_seq = table.column("audios_per_sequence").to_pylist()[0]
    got = table.column("audio_frames").to_pylist()[0]
    k = 0
    for src, n in zip(order, per_seq):
        frames[src], k = got[k : k + n], k + n
    assert frames == {0: [100], 1: [], 2: [50]}
    assert table.column("audio_paths").to_pylist()[0] == [  # relative to the media root (the input's folder)
        {0: "one_second.wav", 2: "half.flac"}[s] for s in order if s != 1
    ]
    mm = report.multimodal
    assert (mm["images_packed"], mm["audio_packed"], mm["audio_dropped"]) == (1, 2, 0)
    assert report.tokens_packed == len(ids)


def test_parquet_roundtrip_features_and_omni_mrope(media, tmp_path):
    rows = [chat(("text", "hello")), chat(("audio", "one_second.wav"), ("text", "Hm?")),
            chat(("image", "noise.png"), ("audio", "half.flac"))]  # fmt: skip
    out = tmp_path / "out"
    src = write(media / "b.jsonl", rows)
    assert main(["pack", str(src), "-o", str(out), "--capacity", "512", "--max-pixels", str(112 * 112), "-q"]) == 0
    ds = PackedParquetDataset(out)
    pack = ds[0]
    feats, mask = pack.media["input_features"], pack.media["feature_attention_mask"]
    assert feats.shape == (2, 128, 3000) and mask.sum(-1).tolist() in ([100, 50], [50, 100])
    alone_f, _ = audio_features([load_audio(media / "one_second.wav")])
    k = mask.sum(-1).tolist().index(100)
    assert torch.equal(feats[k], alone_f[0])
    cu, clip = pack.cu_seqlens.tolist(), 0
    for a, b in zip(cu, cu[1:]):
        ids = pack.input_ids[a:b]
        n = int((ids == BOS).sum())
        g = pack.media["image_grid_thw"] if (ids == SPEC.image_token_id).any() else None
        alone = omni_position_ids(ids, image_grid_thw=g, feature_attention_mask=mask[clip : clip + n] if n else None)
        assert torch.equal(pack.position_ids[:, a:b], alone)
        clip += n
    batch = collate_packs([pack, ds[0]])
    assert batch["input_features"].shape == (4, 128, 3000) and batch["feature_attention_mask"].shape == (4, 3000)


def test_truncation_never_cuts_a_clip(media):
    row = chat(("text", "word " * 20), ("audio", str(media / "one_second.wav")), ("text", "x"))
    table, report = pack_dataset([row], capacity=40, vision=SPEC)
    ids = np.asarray(table.column("input_ids").to_pylist()[0])
    assert (ids == AUDIO).sum() == 0 and (ids == BOS).sum() == 0
    assert table.column("audio_paths").to_pylist() == [[]] if "audio_paths" in table.column_names else True
    assert report.multimodal["audio_dropped"] == 1 and report.samples_truncated == 1
    assert report.tokens_read == report.tokens_packed + report.tokens_truncated


@pytest.mark.parametrize(
    ("row", "message"),
    [
        (chat(("audio", "missing.wav")), "field 'messages[0].content[0].path' names audio"),
        (chat(("audio", "noise.png")), "noise.png, which cannot be used"),
    ],
)
def test_bad_audio_rows(media, row, message):
    path = write(media / "bad.jsonl", [row, chat(("text", "ok"))])
    with pytest.raises(ValueError, match=message.replace("[", r"\[").replace("]", r"\]").replace("'", ".")):
        pack_dataset(path, capacity=512, vision=SPEC)


@pytest.mark.slow  # loads the SmolLM2 GGUF tokenizer (~8 s)
def test_audio_needs_a_tokenizer_with_audio_tokens(media):
    path = write(media / "tok.jsonl", [chat(("audio", "one_second.wav"))])
    with pytest.raises(ValueError, match=r"image/audio parts need a tokenizer with Qwen2\.5's"):
        pack_dataset(path, capacity=512, tokenizer="smollm2")


@pytest.mark.slow  # tiny Omni thinker forward/backward (~10 s)
def test_offline_pack_isolated_on_tiny_omni(media, tmp_path):
    """Documents read back from the packed Parquet (features re-materialised from the recorded clips) give the
    alone logits, loss and gradients when packed, on the tiny Qwen2.5-Omni thinker."""
    from packwise.hf import use_packed_attention
    from packwise.text import load_tokenizer
    from packwise.verify import check_equivalence
    from packwise.verify._models import tiny_omni_model

    rows = [chat(("text", "hello there")), chat(("audio", "one_second.wav"), ("text", "Hm?")),
            chat(("image", "noise.png"), ("audio", "half.flac")), chat(("image", "noise.png"), ("text", "Colour?"))]  # fmt: skip
    out = tmp_path / "omni"
    src = write(media / "omni.jsonl", rows)
    assert main(["pack", str(src), "-o", str(out), "--capacity", "1024", "--max-pixels", str(112 * 112), "-q"]) == 0
    pack = PackedParquetDataset(out)[0]
    cu, clip, img, docs = pack.cu_seqlens.tolist(), 0, 0, []
    grids, patches = pack.media["image_grid_thw"], 0
    for a, b in zip(cu, cu[1:]):
        ids = pack.input_ids[a:b]
        doc = {
            "input_ids": ids,
            "labels": pack.labels[a:b],
            "mm_token_type_ids": pack.columns["mm_token_type_ids"][a:b].long(),
        }
        n_clip, n_img = int((ids == BOS).sum()), int((ids == SPEC.vision_start_token_id).sum())
        if n_clip:
            doc["input_features"] = pack.media["input_features"][clip : clip + n_clip]
            doc["feature_attention_mask"] = pack.media["feature_attention_mask"][clip : clip + n_clip]
        if n_img:
            g = grids[img : img + n_img]
            p = int(g.prod(dim=1).sum())
            doc["pixel_values"], doc["image_grid_thw"] = pack.media["pixel_values"][patches : patches + p], g
            patches += p
        clip, img = clip + n_clip, img + n_img
        docs.append(doc)
    assert sorted(k for d in docs for k in d if k in ("pixel_values", "input_features")) == [
        "input_features", "input_features", "pixel_values", "pixel_values"]  # fmt: skip
    net = tiny_omni_model(len(load_tokenizer("qwen2.5")))
    report = check_equivalence(use_packed_attention(net, backend="sdpa"), docs, atol=1e-5)
    assert report.isolated, report
    assert report.max_abs_diff <= 1e-5 and report.grad_max_rel_diff <= 1e-4
