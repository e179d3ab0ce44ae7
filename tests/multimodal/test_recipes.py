"""The Energon multimodal recipes run end to end on small data: Qwen2.5-VL images (Energon path and the offline
CLI agree on packs, utilisation and overflow counts) and Omni images + audio, both CP-aligned."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

import pytest

pytest.importorskip("megatron.energon")
pytest.importorskip("soundfile")
pytest.importorskip("skimage")

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "energon_multimodal.py"


def _recipe():
    spec = importlib.util.spec_from_file_location("energon_multimodal", EXAMPLE)
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses resolve their module
    spec.loader.exec_module(module)
    return module


@pytest.mark.slow
def test_qwen25_vl_recipe_matches_the_offline_cli(tmp_path, capsys):
    out = _recipe().main(["--recipe", "qwen2.5-vl", "--samples", "12", "--long", "2", "--cp", "2",
                          "--workdir", str(tmp_path / "vl")])  # fmt: skip
    energon, offline = out["energon"], out["offline"]
    assert energon["alignment"] == 4 and energon["samples"] == offline["samples"] == 12
    assert energon["packs"] == offline["packs"] and energon["utilisation"] == offline["utilisation"]
    assert energon["overflow"] == offline["overflow"] and energon["overflow"]["samples_truncated"] == 2
    assert "utilisation" in capsys.readouterr().out


@pytest.mark.slow
def test_omni_recipe_packs_images_and_audio_with_cp_alignment(tmp_path):
    out = _recipe().main(["--recipe", "omni", "--samples", "8", "--long", "1", "--cp", "4",
                          "--workdir", str(tmp_path / "omni")])  # fmt: skip
    energon, offline = out["energon"], out["offline"]
    assert energon["alignment"] == 8 and energon["samples"] == offline["samples"] == 8
    assert energon["overflow"]["samples_truncated"] >= 1 and 0 < energon["utilisation"] <= 1
    # the offline CLI packs the same image + audio chats (JSONL audio parts): same tokens, same cuts
    assert energon["overflow"] == offline["overflow"]


@pytest.mark.slow
def test_nemotron_omni_recipe_feeds_the_tiny_model(tmp_path):
    """Real ``energon prepare`` + loader with the Nemotron-Omni encoder: every batch carries the model's own inputs
    (RADIO patches + ``image_grid_hw``, mel frames + ``input_features_mask``, 1-D positions restarting per
    document) and the tiny ``nemotron_h_omni`` takes them: its placeholder checks pass and each packed document's
    logits equal the document run alone."""
    import torch

    from packwise.hf import use_packed_attention
    from packwise.verify import load_model

    recipe = _recipe()
    work = tmp_path / "nemotron"
    recipe.make_data(work, recipe="nemotron-omni", samples=8, long=1)
    batches = []
    out = recipe.run_energon(work, capacity=512, cp=4, rope="nemotron_h_omni", overflow="truncate", workers=0,
                             keep=batches)  # fmt: skip
    assert out["samples"] == 8 and out["alignment"] == 8 and out["overflow"]["samples_truncated"] == 1
    # 6 of 8 chats have a photo (112-224 px -> at most 8x8 = 64 patches of 16 px), 4 have a chirp (201 mel frames)
    assert out["media"]["image_grid_hw"] == [6, 2] and out["media"]["input_features"] == [4, 201, 80]
    assert out["media"]["pixel_values"][1] == 768 and out["media"]["input_features_mask"] == [4, 201]
    model, _ = load_model("tiny-nemotron-h-omni")
    use_packed_attention(model, backend="sdpa")
    keys = ("input_ids", "position_ids", "cu_seq_lens_q", "cu_seq_lens_k", "max_length_q", "max_length_k",
            "pixel_values", "image_grid_hw", "input_features", "input_features_mask")  # fmt: skip
    batch = batches[0]
    assert batch["position_ids"].dim() == 2 and int((batch["position_ids"][0] == 0).sum()) >= 2
    with torch.no_grad():
        packed = model(**{k: batch[k] for k in keys if k in batch}).logits[0]
        # every document alone, with its own media items (in pack order), against its slice of the pack
        real, starts = batch["cu_seqlens"].diff().tolist(), batch["cu_seqlens_padded"][:-1].tolist()  # CP-aligned
        img, aud, kinds = 0, 0, set()
        grids = batch.get("image_grid_hw", torch.zeros(0, 2, dtype=torch.long))
        rows = torch.cat([torch.zeros(1, dtype=torch.long), grids.prod(-1).cumsum(0)])
        for a, b in ((a, a + n) for a, n in zip(starts, real) if n):
            ids = batch["input_ids"][:, a:b]
            alone = {"input_ids": ids}
            hit = (ids[0] == 151655).long()
            n_img = int((hit.diff(prepend=hit[:1] * 0) == 1).sum())  # one placeholder run per image
            if n_img:
                alone.update(pixel_values=batch["pixel_values"][rows[img] : rows[img + n_img]],
                             image_grid_hw=grids[img : img + n_img])  # fmt: skip
                img, _ = img + n_img, kinds.add("image")
            if int((ids == 151646).sum()):
                alone.update(input_features=batch["input_features"][aud : aud + 1],
                             input_features_mask=batch["input_features_mask"][aud : aud + 1])  # fmt: skip
                aud, _ = aud + 1, kinds.add("audio")
            assert float((packed[a:b] - model(**alone).logits[0]).abs().max()) <= 1e-5
    assert kinds == {"image", "audio"} and img == grids.shape[0]
