"""``packwise verify`` in-process on the tiny random Llama (fast settings)."""

from __future__ import annotations

import json

from packwise.cli import main


def test_verify_tiny_llama_json(capsys):
    rc = main(
        [
            "verify",
            "--model",
            "tiny-llama",
            "--attn",
            "sdpa,eager",
            "--num-docs",
            "2",
            "--max-tokens",
            "24",
            "--raw",
            "--json",
        ]
    )
    payload = json.loads(capsys.readouterr().out)
    assert rc == 0 and payload["isolated"] is True
    assert len(payload["packwise"]) == 8  # 2 paths x use_cache on/off x eval/train
    assert all(r["max_abs_diff"] <= 1e-5 for r in payload["packwise"])
    # the plain HF path with default settings leaks, and is reported, without failing the command
    assert [r["isolated"] for r in payload["raw"]] == [False, False]
    assert all(r["max_abs_diff"] > 1e-3 for r in payload["raw"])


def test_verify_rejects_unknown_path(capsys):
    assert main(["verify", "--attn", "magic"]) == 1
    assert "unknown path(s) ['magic']" in capsys.readouterr().err


def test_verify_tiny_qwen25_vl_mixes_text_and_image_documents(capsys):
    rc = main(
        ["verify", "--model", "tiny-qwen2.5-vl", "--attn", "sdpa", "--num-docs", "4", "--max-tokens", "48", "--json"]
    )
    payload = json.loads(capsys.readouterr().out)
    assert rc == 0 and payload["isolated"] is True
    assert all(r["max_abs_diff"] <= 1e-5 for r in payload["packwise"])
    assert all(r["grad_max_rel_diff"] is None or r["grad_max_rel_diff"] <= 1e-4 for r in payload["packwise"])
