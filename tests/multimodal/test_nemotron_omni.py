"""Nemotron-Omni (``nemotron_h_omni``: RADIO vision + Parakeet audio + NemotronH hybrid MoE LM): its inputs
(image patches and grids, mel frames and masks, placeholder tokens, 1-D positions) against the model's own rules,
the media through the collator, and packed-vs-alone isolation of text, image, audio and image+audio documents on
the tiny random model — with the leak controls (no packwise; BatchNorm in train mode) that show the check bites."""

from __future__ import annotations

import json

import numpy as np
import pytest
import torch

pytest.importorskip("transformers")

from packwise.hf import PackedDataCollator
from packwise.multimodal import NemotronOmniSpec, encode_nemotron_chat, nemotron_audio, nemotron_images

IMG, AUD = 151655, 151646


@pytest.fixture(scope="module")
def tok():
    from packwise.text import load_tokenizer

    return load_tokenizer("qwen2.5")


def test_image_patches_follow_the_processor_layout():
    from PIL import Image

    # 64x64 grey (128) -> 4x4 patches of 16 px; every value (128/255 - mean_c) / std_c, channel-major per patch
    pv, grid = nemotron_images([Image.new("RGB", (64, 64), (128, 128, 128))])
    assert tuple(pv.shape) == (16, 768) and grid.tolist() == [[4, 4]]
    want = [(128 / 255 - 0.48145466) / 0.26862954, (128 / 255 - 0.4578275) / 0.26130258]
    assert pv[0, 0].item() == pytest.approx(want[0], abs=1e-5) and pv[0, 256].item() == pytest.approx(want[1], abs=1e-5)
    # the processor's grid rule: 128x96 -> round(8.5), round(6.5) = 8 x 6 patches = 48 <= 64, both even
    assert NemotronOmniSpec().grid(96, 128) == (6, 8) and NemotronOmniSpec().grid(1000, 1000) == (8, 8)
    # a half-left-white image: patch (0, 0) is white, patch (0, 3) black
    img = np.zeros((64, 64, 3), np.uint8)
    img[:, :32] = 255
    pv, _ = nemotron_images([Image.fromarray(img)])
    assert pv[0, 0].item() == pytest.approx((1 - 0.48145466) / 0.26862954, abs=1e-5)
    assert pv[3, 0].item() == pytest.approx(-0.48145466 / 0.26862954, abs=1e-5)


def test_audio_tokens_and_frames_follow_the_model():
    spec = NemotronOmniSpec()
    # 8000 samples -> 1 + 8000 // 160 = 51 mel frames -> 26 -> 13 -> 7 after three stride-2 stages
    assert [spec.audio_tokens(n) for n in (8000, 16000, 20000, 160)] == [7, 13, 16, 1]
    f, m = nemotron_audio([np.zeros(8000, np.float32), np.zeros(16000, np.float32)])
    assert tuple(f.shape) == (2, 201, 80) and m.sum(-1).tolist() == [50, 100]  # the extractor marks L // hop
    with pytest.raises(ValueError, match="audio clip 0: 40000 samples; a clip needs 1 to 32000"):
        nemotron_audio([np.zeros(40000, np.float32)])


def test_encode_counts_placeholders_and_positions_restart(tok):
    from PIL import Image

    chat = [{"role": "user", "content": [{"type": "image"}, {"type": "audio"}, {"type": "text", "text": "Hi?"}]},
            {"role": "assistant", "content": "Yes."}]  # fmt: skip
    f = encode_nemotron_chat(chat, tok, images=[Image.new("RGB", (64, 64))], audios=[np.zeros(8000, np.float32)])
    assert int((f["input_ids"] == IMG).sum()) == 4 and int((f["input_ids"] == AUD).sum()) == 7
    assert f["mm_token_type_ids"].tolist().count(1) == 4 and f["mm_token_type_ids"].tolist().count(3) == 7
    assert f["position_ids"].tolist() == list(range(f["input_ids"].numel()))
    assert tok.decode(f["labels"][f["labels"] != -100]).startswith("Yes.")
    with pytest.raises(ValueError, match="1 image and 0 audio parts for 1 images, 1 clips"):
        encode_nemotron_chat([{"role": "user", "content": [{"type": "image"}]}], tok,
                             images=[Image.new("RGB", (64, 64))], audios=[np.zeros(800, np.float32)])  # fmt: skip


def test_collator_carries_the_media_of_every_document(tok):
    from PIL import Image

    def doc(kind):
        parts = [{"type": kind}, {"type": "text", "text": "?"}]
        chat = [{"role": "user", "content": parts}, {"role": "assistant", "content": "A."}]
        media = {"images": [Image.new("RGB", (64, 64))]} if kind == "image" else {"audios": [np.ones(8000, np.float32)]}
        d = encode_nemotron_chat(chat, tok, **media)
        return {k: v for k, v in d.items() if k not in ("mm_token_type_ids", "position_ids")}

    batch = PackedDataCollator()([doc("image"), doc("audio"), doc("image")])
    assert tuple(batch["pixel_values"].shape) == (32, 768) and batch["image_grid_hw"].tolist() == [[4, 4], [4, 4]]
    assert tuple(batch["input_features"].shape) == (1, 201, 80) and batch["input_features_mask"].sum().item() == 50


@pytest.fixture(scope="module")
def omni(tok):
    from packwise.verify import load_model, load_nemotron_omni_documents

    model, _ = load_model("tiny-nemotron-h-omni")
    return model, load_nemotron_omni_documents(tok, num_docs=4, max_tokens=40)


@pytest.mark.slow
def test_tiny_nemotron_omni_is_isolated_and_the_controls_leak(omni):
    from packwise.hf import use_packed_attention
    from packwise.verify import check_equivalence

    model, docs = omni
    assert [sorted(k for k in d if k in ("pixel_values", "input_features")) for d in docs] == [
        [],
        ["pixel_values"],
        ["input_features"],
        ["input_features", "pixel_values"],
    ]
    raw = check_equivalence(model, docs, check_grads=False, perturbation=False)  # no packwise: mixers + attention
    assert not raw.isolated and min(raw.per_document_max_abs_diff[1:]) > 1e-2
    use_packed_attention(model, backend="sdpa")
    r = check_equivalence(model, docs, check_grads=True)
    assert r.isolated and r.max_abs_diff <= 1e-5 and r.grad_max_rel_diff <= 1e-4 and r.perturbation_max_abs_diff == 0
    # Parakeet's BatchNorm1d in train mode normalises over every clip of the row: refused, by name
    with pytest.raises(ValueError, match=r"audio_tower\.layers\.0\.conv\.norm \(BatchNorm1d\) is in train mode"):
        check_equivalence(model, docs, check_grads=False, train=True, perturbation=False)
    norms = [n for n, m in model.named_modules() if isinstance(m, torch.nn.BatchNorm1d)]
    r = check_equivalence(model, docs, check_grads=False, train=True, eval_modules=norms, perturbation=False)
    assert r.isolated and r.max_abs_diff <= 1e-5


@pytest.mark.slow
def test_verify_cli_tiny_nemotron_omni(capsys):
    from packwise.cli import main

    rc = main(["verify", "--model", "tiny-nemotron-h-omni", "--attn", "sdpa", "--num-docs", "4", "--max-tokens", "40",
               "--json"])  # fmt: skip
    payload = json.loads(capsys.readouterr().out)
    assert rc == 0 and payload["verdict"] == "ISOLATED" and payload["documents"] == [40, 39, 36, 57]
    assert payload["eval_in_train_mode"] == ["audio_tower.layers.0.conv.norm"]
    assert all(r["max_abs_diff"] <= 1e-5 for r in payload["packwise"])
