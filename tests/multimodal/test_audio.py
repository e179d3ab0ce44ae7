"""Audio (Qwen2-Audio / Qwen2.5-Omni thinker): decoding, features, placeholder tokens, Omni MRoPE against the
model's own rope index, audio features as media (never per-token) through assemble/collate, and packed-vs-alone
isolation of text, image and audio documents on a tiny random Qwen2.5-Omni thinker."""

from __future__ import annotations

import io
import wave

import numpy as np
import pytest
import torch

pytest.importorskip("soundfile")

from packwise.assemble import assemble_pack, collate_packs
from packwise.multimodal import AudioSpec, audio_features, encode_media_chat, load_audio, omni_position_ids

AUD, AB, AE = 151646, 151647, 151648


def wav_bytes(seconds: float, rate: int = 16000, channels: int = 1) -> bytes:
    t = np.arange(int(rate * seconds)) / rate
    pcm = (0.3 * np.sin(2 * np.pi * 440 * t) * 32767).astype("<i2")
    buf = io.BytesIO()
    with wave.open(buf, "wb") as w:
        w.setnchannels(channels)
        w.setsampwidth(2)
        w.setframerate(rate)
        w.writeframes(np.repeat(pcm, channels).tobytes())
    return buf.getvalue()


def test_load_audio_wav_flac_stereo_and_resampling(tmp_path):
    import soundfile

    assert load_audio(wav_bytes(0.5)).shape == (8000,)
    assert load_audio(wav_bytes(0.5, rate=8000)).shape == (8000,)  # resampled to 16 kHz
    stereo = load_audio(wav_bytes(0.25, channels=2))
    assert stereo.shape == (4000,) and stereo.dtype == np.float32
    path = tmp_path / "a.flac"
    soundfile.write(path, np.zeros(1600, dtype=np.float32), 16000)
    assert load_audio(path).shape == (1600,)
    with pytest.raises(ValueError, match="does not exist"):
        load_audio(tmp_path / "missing.wav")
    with pytest.raises(ValueError, match="cannot be decoded"):
        load_audio(b"not audio at all", where="row 3")
    with pytest.raises(ValueError, match=r"lasts 31.0 s > 30 s"):
        load_audio(wav_bytes(31.0))


def test_features_and_tokens_follow_the_models_rule():
    spec = AudioSpec()
    feats, mask = audio_features([np.zeros(16000, np.float32), np.zeros(4000, np.float32)])
    assert feats.shape == (2, 128, 3000) and mask.sum(-1).tolist() == [100, 25]
    # ((f - 1) // 2 + 1 - 2) // 2 + 1: 100 frames -> 25 tokens, 25 -> 6, 3000 -> 750
    assert [spec.tokens(f) for f in (100, 25, 3000)] == [25, 6, 750]


@pytest.fixture(scope="module")
def tok():
    from packwise.text import load_tokenizer

    return load_tokenizer("qwen2.5")


def test_encode_media_chat_counts_audio_tokens_and_mrope(tok):
    wave_ = np.zeros(16000, np.float32)
    chat = [{"role": "user", "content": [{"type": "text", "text": "Hear:"}, {"type": "audio"}]},
            {"role": "assistant", "content": "Silence."}]  # fmt: skip
    f = encode_media_chat(chat, tok, audios=[wave_])
    ids = f["input_ids"]
    assert int((ids == AUD).sum()) == 25 and int((ids == AB).sum()) == 1 == int((ids == AE).sum())
    assert torch.equal(f["mm_token_type_ids"] == 3, ids == AUD)
    assert (f["labels"][ids == AUD] == -100).all()  # audio tokens are inputs, never targets
    assert f["position_ids"].shape == (3, ids.shape[0])
    with pytest.raises(ValueError, match=r"expected a text part"):
        encode_media_chat(chat, tok)  # an audio part without a clip


def test_audio_features_are_media_not_per_token_columns():
    a = {"input_ids": torch.arange(6), "input_features": torch.ones(1, 128, 3000),
         "feature_attention_mask": torch.ones(1, 3000, dtype=torch.int64)}  # fmt: skip
    b = {"input_ids": torch.arange(4)}
    pack = assemble_pack([a, b], alignment=4)
    assert pack.columns == {} and pack.media["input_features"].shape == (1, 128, 3000)
    other = assemble_pack([{**a, "input_ids": torch.arange(3)}])
    batch = collate_packs([assemble_pack([b]), pack, other])  # a text-only pack first
    assert batch["input_features"].shape == (2, 128, 3000) and batch["feature_attention_mask"].shape == (2, 3000)


@pytest.mark.slow
def test_omni_mrope_equals_the_models_own_and_packing_is_isolated(tok):
    """Our Omni positions equal the thinker's own get_rope_index; text, image, audio and image + audio documents
    packed give the alone logits, loss and gradients (sdpa path; ``packwise verify`` runs every path)."""
    from packwise.hf import use_packed_attention
    from packwise.verify import check_equivalence
    from packwise.verify._models import load_omni_documents, tiny_omni_model

    net = tiny_omni_model(len(tok))
    docs = load_omni_documents(tok, num_docs=4, max_tokens=40)
    assert [sorted(k for k in d if k in ("pixel_values", "input_features")) for d in docs] == [
        [], ["pixel_values"], ["input_features"], ["input_features", "pixel_values"]]  # fmt: skip
    d = docs[3]
    ids = d["input_ids"][None]
    own, _ = net.model.get_rope_index(
        ids, d["image_grid_thw"], None, torch.ones_like(ids), False, d["feature_attention_mask"].sum(-1), None
    )
    ours = omni_position_ids(d["input_ids"], image_grid_thw=d["image_grid_thw"],
                             feature_attention_mask=d["feature_attention_mask"])  # fmt: skip
    assert torch.equal(own[:, 0], ours)
    assert len(set(ours[0].tolist())) < ours.shape[1]  # image tokens share temporal positions: real MRoPE
    report = check_equivalence(use_packed_attention(net, backend="sdpa"), docs, atol=1e-5)
    assert report.isolated, report
    assert report.max_abs_diff <= 1e-5 and report.grad_max_rel_diff <= 1e-4 and report.perturbation_max_abs_diff == 0
