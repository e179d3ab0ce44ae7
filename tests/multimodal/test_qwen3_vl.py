"""Qwen3-VL (interleaved MRoPE, deepstack, timestamped video frames): its video text and rope index, packed-vs-alone
isolation of text, image and video documents on the tiny random model (with the control that Qwen2.5-VL's
positions on a Qwen3-VL video document are caught), and a saved VLM checkpoint verified through its own auto class
(issue 28 item 5)."""

from __future__ import annotations

import json

import numpy as np
import pytest
import torch

pytest.importorskip("transformers")

from packwise.multimodal import VisionSpec, encode_media_chat, mrope_position_ids, qwen3_vl_position_ids

VID = 151656


@pytest.fixture(scope="module")
def tok():
    from packwise.text import load_tokenizer

    return load_tokenizer("qwen2.5")


def test_video_is_timestamped_per_temporal_patch_and_positions_are_qwen3s(tok):
    from PIL import Image

    frames = [Image.new("RGB", (64, 64), (i * 40, 0, 0)) for i in range(3)]  # 3 frames at 2 fps -> 2 patches
    chat = [{"role": "user", "content": [{"type": "video"}, {"type": "text", "text": "?"}]},
            {"role": "assistant", "content": "Red."}]  # fmt: skip
    f = encode_media_chat(chat, tok, videos=[frames], vision=VisionSpec(patch_size=16), rope="qwen3_vl")
    text = tok.decode(f["input_ids"])
    # frames (0, 1) -> 0.25 s, (2, 2 repeated) -> 1.0 s; 4x4 patches of 16 px -> 4 tokens per patch
    assert "<0.2 seconds><|vision_start|>" + "<|video_pad|>" * 4 + "<|vision_end|><1.0 seconds>" in text
    assert f["video_grid_thw"].tolist() == [[2, 4, 4]] and tuple(f["pixel_values_videos"].shape) == (32, 1536)
    assert "second_per_grid_ts" not in f
    pos = f["position_ids"]
    first = int((f["input_ids"] == VID).nonzero()[0])
    # every temporal patch is its own t=1 grid: both patches' tokens carry temporal position = their start
    t_rows = pos[0, f["input_ids"] == VID].tolist()
    assert t_rows[:4] == [first] * 4 and len(set(t_rows[4:])) == 1 and t_rows[4] > first + 2
    with pytest.raises(ValueError, match="rope='qwen3_vl' takes images and videos, not audio"):
        encode_media_chat(chat[1:], tok, audios=[np.zeros(1600, np.float32)], rope="qwen3_vl")
    with pytest.raises(ValueError, match="rope='qwen4'"):
        encode_media_chat(chat[1:], tok, rope="qwen4")


def test_image_positions_equal_qwen25s_rule():
    ids = torch.tensor([1, 151652, *[151655] * 6, 151653, 2])
    grid = torch.tensor([[1, 4, 6]])
    assert torch.equal(qwen3_vl_position_ids(ids, (ids == 151655).long(), grid),
                       mrope_position_ids(ids, (ids == 151655).long(), grid))  # fmt: skip


@pytest.mark.slow
def test_tiny_qwen3_vl_is_isolated_and_wrong_positions_are_caught(tok):
    from packwise.hf import use_packed_attention
    from packwise.verify import check_equivalence, load_model, load_multimodal_documents

    model, _ = load_model("tiny-qwen3-vl")
    assert type(model).__name__ == "Qwen3VLForConditionalGeneration"
    docs = load_multimodal_documents(tok, num_docs=4, max_tokens=40, rope="qwen3_vl")
    assert ["pixel_values" in d for d in docs] == [False, True, False, False] and "pixel_values_videos" in docs[3]
    use_packed_attention(model, backend="sdpa")
    r = check_equivalence(model, docs, check_grads=True)
    assert r.isolated and r.max_abs_diff <= 1e-5 and r.grad_max_rel_diff <= 1e-4
    wrong = [dict(d) for d in docs]  # text positions (no MRoPE) on the video document: its logits move
    wrong[3]["position_ids"] = torch.arange(docs[3]["input_ids"].numel()).expand(3, -1)
    bad = check_equivalence(model, wrong, check_grads=False, perturbation=False)
    assert not bad.isolated and bad.per_document_max_abs_diff[3] > 1e-4 and bad.per_document_max_abs_diff[0] <= 1e-5


@pytest.mark.slow
def test_verify_a_saved_vlm_checkpoint_with_its_own_auto_class(tmp_path, tok, capsys):
    from transformers import AutoModelForImageTextToText

    from packwise.cli import main
    from packwise.verify import load_model, tiny_config

    torch.manual_seed(0)
    AutoModelForImageTextToText.from_config(tiny_config("tiny-qwen3-vl", len(tok))).save_pretrained(tmp_path)
    tok.save_pretrained(tmp_path)
    model, _ = load_model(str(tmp_path))
    assert type(model).__name__ == "Qwen3VLForConditionalGeneration"  # AutoModelForCausalLM has no qwen3_vl entry
    rc = main(["verify", "--model", str(tmp_path), "--attn", "sdpa", "--num-docs", "2", "--max-tokens", "24",
               "--json"])  # fmt: skip
    payload = json.loads(capsys.readouterr().out)
    assert rc == 0 and payload["verdict"] == "ISOLATED" and all(r["max_abs_diff"] <= 1e-4 for r in payload["packwise"])
