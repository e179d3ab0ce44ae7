"""The conformance matrix: every family ISOLATED or REFUSED, never leaking — and controls that prove the
check catches a feature that is not honoured (sliding window, softcap, encoder attention)."""

from __future__ import annotations

import pytest
import torch

import packwise.integrations.hf._attention as hf_attention
from packwise.hf import PackingRefused, use_packed_attention
from packwise.verify._families import family_model
from packwise.verify._matrix import MATRIX, conformance_row, run_matrix

REFUSED = {"kimi_linear"}
ISSUE_FAMILIES = {
    "llama", "qwen2", "qwen3", "qwen3_moe", "mistral", "gemma2", "gemma3", "phi3", "gpt_oss", "olmo2", "roberta",
    "bamba", "nemotron_h", "qwen3_next", "qwen2_5_vl", "smollm2",
}  # fmt: skip


@pytest.mark.parametrize("family", ["mistral", "gemma2"])
def test_fast_tier_isolated(family):
    (row,) = run_matrix([family])
    assert row.verdict == "ISOLATED", row
    assert row.max_abs_diff <= 1e-5 and row.loss_abs_diff <= 1e-5 and row.grad_max_rel_diff <= 1e-4
    assert row.eager_max_abs_diff <= 1e-4 and row.generate is True


def test_stateful_mixer_without_a_per_document_path_refused_by_name():
    model = family_model("kimi_linear", 64)
    mixer = "KimiLinearDeltaAttention"
    with pytest.raises(PackingRefused, match=f"{mixer} in model type 'kimi_linear' carries state along the sequence"):
        use_packed_attention(model)
    with pytest.raises(PackingRefused):  # allow does not override a known-stateful mixer
        use_packed_attention(model, allow=[mixer])


@pytest.mark.parametrize(
    ("feature", "family"), [("window", "mistral"), ("softcap", "gemma2")], ids=["window", "softcap"]
)
def test_control_feature_ignored_is_caught(monkeypatch, feature, family):
    real = hf_attention.varlen_attention

    def drop(*args, **kwargs):
        kwargs[feature] = None
        return real(*args, **kwargs)

    monkeypatch.setattr(hf_attention, "varlen_attention", drop)
    torch.manual_seed(0)
    model = family_model(family, 256)
    with torch.no_grad():  # sharpen attention so the softcap (5.0) binds: tiny random scores are ~1e-3
        for name, p in model.named_parameters():
            if "q_proj" in name or "k_proj" in name:
                p.mul_(40)
    g = torch.Generator().manual_seed(1)
    docs = [torch.randint(1, 256, (n,), generator=g) for n in (40, 13, 57)]
    row = conformance_row(family, model, docs)
    assert row.verdict == "LEAK" and row.max_abs_diff > 1e-2, row


def test_backend_that_cannot_honour_a_feature_is_refused():
    with pytest.raises(PackingRefused, match=r"Gemma2Config.attn_logit_softcapping=5.0: backend 'sdpa'"):
        use_packed_attention(family_model("gemma2", 64), backend="sdpa")
    with pytest.raises(PackingRefused, match=r"attention sinks .* backend 'flex'"):
        use_packed_attention(family_model("gpt_oss", 64), backend="flex")


def test_unknown_module_refused_with_opt_in():
    class FancyMixer(torch.nn.Module):
        def forward(self, x):
            return x

    model = family_model("llama", 64)
    model.model.layers[0].fancy = FancyMixer()
    with pytest.raises(PackingRefused) as info:
        use_packed_attention(model)
    assert "FancyMixer" in str(info.value) and "allow=['FancyMixer']" in str(info.value)
    assert "packwise verify --model PATH --allow FancyMixer" in str(info.value)
    assert use_packed_attention(model, allow=["FancyMixer"]) is model


@pytest.mark.slow
def test_encoder_control_whole_row_attention_leaks(monkeypatch):
    """Without the per-document bidirectional path a packed RoBERTa leaks (the issue measured 1e-2)."""
    monkeypatch.setattr("packwise.integrations.hf._api.ENCODERS", {})
    (row,) = run_matrix(["roberta"])
    assert row.verdict == "LEAK" and row.max_abs_diff > 1e-3, row


@pytest.mark.slow
def test_full_matrix():
    families = [f for f in MATRIX if f != "smollm2"]  # SmolLM2: tests/isolation/test_real_model.py
    rows = {r.family: r for r in run_matrix(families)}
    assert ISSUE_FAMILIES - {"smollm2"} <= set(rows)
    for family, row in rows.items():
        expected = "REFUSED" if family in REFUSED else "ISOLATED"
        assert row.verdict == expected, row
        if expected == "ISOLATED":
            assert row.max_abs_diff <= 1e-5 and row.grad_max_rel_diff <= 1e-4 and row.eager_max_abs_diff <= 1e-4
            assert row.generate in (True, None)  # the same tokens as the unpatched model (None: encoders)


def test_verify_cli_refused_model_exits_3(capsys):
    import json

    from packwise.cli import main

    rc = main(["verify", "--model", "kimi_linear", "--num-docs", "2", "--max-tokens", "16", "--no-grads", "--json"])
    payload = json.loads(capsys.readouterr().out)
    assert rc == 3 and payload["verdict"] == "REFUSED" and payload["isolated"] is False
    assert set(payload["refused"]) == {"eager", "sdpa", "flex", "packwise"}
    assert all("KimiLinearDeltaAttention in model type 'kimi_linear'" in r for r in payload["refused"].values())


@pytest.mark.slow
def test_verify_cli_partly_refused_paths_still_prove_the_rest(capsys):
    from packwise.cli import main

    rc = main(["verify", "--model", "gemma2", "--attn", "sdpa,packwise", "--num-docs", "2", "--max-tokens", "24"])
    out = capsys.readouterr().out
    assert rc == 0 and "ISOLATED" in out
    assert "REFUSED packwise/sdpa: Gemma2Config.attn_logit_softcapping=5.0" in out


def test_encoder_refuses_documents_at_the_wrong_first_position():
    from packwise.hf import PackedDataCollator, position_offset

    model = use_packed_attention(family_model("roberta", 64))
    assert position_offset(model) == 2  # RoBERTa: pad_token_id (1) + 1
    rows = [{"input_ids": [5, 6, 7]}, {"input_ids": [8, 9]}]
    with pytest.raises(
        ValueError, match=r"documents start at position ids \[0\] .* PackedDataCollator\(position_offset=2\)"
    ):
        model(**{k: v for k, v in PackedDataCollator()(rows).items() if k != "labels"})
    batch = PackedDataCollator(position_offset=2)(rows)
    assert batch["position_ids"].tolist() == [[2, 3, 4, 2, 3]]
    assert model(**{k: v for k, v in batch.items() if k != "labels"}).logits.shape == (1, 5, 64)
