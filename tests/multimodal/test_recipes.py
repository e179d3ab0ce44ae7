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
