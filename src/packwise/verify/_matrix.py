"""The conformance matrix: one row per model family — ISOLATED, REFUSED (with the reason) or a failure.

A row is ISOLATED when, with ``use_packed_attention(model, backend)``, every document's logits, the loss and
every parameter gradient packed equal the document alone (:func:`check_equivalence`), the patched model alone
equals the same model with transformers' own ``eager`` attention (so the features — windows, softcap,
sinks, scaling, encoder attention — are honoured, not merely applied the same way twice), and ``generate``
still runs. REFUSED rows are the ``PackingRefused`` reason ``use_packed_attention`` gave.
"""

from __future__ import annotations

import copy
import time
import types
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from typing import TYPE_CHECKING

import torch

from ._check import check_equivalence

if TYPE_CHECKING:
    from ..attention import Backend


@dataclass(frozen=True)
class ConformanceRow:
    """One family's result. ``verdict``: ISOLATED, REFUSED, LEAK (packed != alone) or WRONG (patched != eager).

    Attributes:
        family, model_type: the row's name and ``config.model_type``.
        verdict, reason: the outcome and, for REFUSED/LEAK/WRONG, why.
        max_abs_diff, loss_abs_diff, grad_max_rel_diff: packed vs alone (logits, loss, gradients).
        eager_max_abs_diff: patched model alone vs transformers' eager attention alone (max |Δlogit|).
        generate: ``generate`` ran after patching (None for encoders).
        seconds: wall time of the row (this machine, busy).
    """

    family: str
    model_type: str
    verdict: str
    reason: str = ""
    max_abs_diff: float | None = None
    loss_abs_diff: float | None = None
    grad_max_rel_diff: float | None = None
    eager_max_abs_diff: float | None = None
    generate: bool | None = None
    seconds: float = 0.0

    def to_dict(self) -> dict:
        return asdict(self)


def _alone(model, docs) -> list[torch.Tensor]:
    from ._check import _alone_batch, _docs

    with torch.no_grad():
        return [model(**_alone_batch(d), use_cache=False).logits[0] for d in _docs(docs)]


def conformance_row(
    family: str, model, docs, *, backend: Backend = "auto", atol: float = 1e-5, eager_atol: float = 1e-4
) -> ConformanceRow:
    """Check one (random-init or real) model; see the module docstring for the verdicts.

    Args:
        family: the row's name.
        model: an HF model (fp32, eval mode), not yet patched.
        docs: at least 2 documents (token id tensors or dicts, as :func:`check_equivalence` takes).
        backend: the packwise backend to patch with.
        atol: logit/loss tolerance of the isolation check (rtol 1.3e-6 per element).
        eager_atol: tolerance of patched vs eager alone (different kernels: reduction order differs).
    """
    from ..hf import PackingRefused, use_packed_attention

    start = time.perf_counter()
    model_type = str(getattr(model.config, "model_type", "?"))
    unpatched = copy.deepcopy(model)  # generate after patching must equal generate before, token for token
    try:
        use_packed_attention(model, backend=backend)
    except PackingRefused as e:
        return ConformanceRow(family, model_type, "REFUSED", e.reason, seconds=time.perf_counter() - start)
    r = check_equivalence(model, docs, atol=atol, check_grads=True, path=f"{family}/{backend}")
    patched = _alone(model, docs)
    model.set_attn_implementation("eager")
    eager = _alone(model, docs)
    use_packed_attention(model, backend=backend)
    eager_diff = max(float((a - b).abs().max()) for a, b in zip(patched, eager))
    gen = None
    if getattr(model.config, "is_decoder", True) and model_type not in ("roberta", "bert"):
        first = docs[0]["input_ids"] if isinstance(docs[0], dict) else torch.as_tensor(docs[0])
        out = model.generate(input_ids=first[:8][None], max_new_tokens=3, do_sample=False, pad_token_id=0)
        ref = unpatched.generate(input_ids=first[:8][None], max_new_tokens=3, do_sample=False, pad_token_id=0)
        gen = tuple(out.shape) == (1, min(8, first.numel()) + 3) and torch.equal(out, ref)
    verdict, reason = "ISOLATED", ""
    if not r.isolated:
        verdict, reason = "LEAK", f"packed != alone (max |Δlogit| {r.max_abs_diff:.1e})"
    elif eager_diff > eager_atol:
        verdict, reason = "WRONG", f"patched != eager attention alone (max |Δlogit| {eager_diff:.1e})"
    elif gen is False:
        verdict, reason = "WRONG", "generate after patching differs from generate before patching"
    return ConformanceRow(
        family, model_type, verdict, reason, r.max_abs_diff, r.loss_abs_diff, r.grad_max_rel_diff, eager_diff, gen,
        time.perf_counter() - start,
    )  # fmt: skip


def _whole_row(self, *args, **kwargs):
    """A mixer's own forward over the whole row, without the boundary kwargs (which transformers' torch path
    refuses: Qwen3-Next's ``cu_seqlens``) — what an unpatched layer computes."""
    for key in ("cu_seq_lens_q", "cu_seq_lens_k", "max_length_q", "max_length_k", "seq_idx", "cu_seqlens"):
        kwargs.pop(key, None)
    return type(self).forward(self, *args, **kwargs)


def leak_control(family: str, model, docs) -> ConformanceRow:
    """The control of a hybrid row: the same check with every stateful mixer run over the whole packed row.

    ``use_packed_attention`` patches the model (attention isolated), then each mixer's per-document forward is
    removed, so only the reset at document boundaries differs from the ISOLATED row: the check must say LEAK.
    """
    from ..hf import use_packed_attention

    start = time.perf_counter()
    use_packed_attention(model)
    for module in model.modules():
        if getattr(module.__dict__.get("forward"), "_packwise", False):
            module.forward = types.MethodType(_whole_row, module)  # the class forward over the whole row
    r = check_equivalence(model, docs, check_grads=True, path=f"{family}/whole-row mixers")
    verdict = "ISOLATED" if r.isolated else "LEAK"
    return ConformanceRow(
        family, str(model.config.model_type), verdict, "control: mixers over the whole packed row", r.max_abs_diff,
        r.loss_abs_diff, r.grad_max_rel_diff, seconds=time.perf_counter() - start,
    )  # fmt: skip


def family_documents(family: str, tokenizer, model, *, num_docs: int = 3, max_tokens: int = 64) -> list:
    """Documents for a family row: chitchat (text-only and image documents for ``qwen2_5_vl``).

    Encoders (RoBERTa) treat ``pad_token_id`` as padding even inside a document; such tokens are replaced
    by the next id so every document is real text to the model.
    """
    from ._models import load_documents, load_multimodal_documents

    if family == "qwen2_5_vl":
        return load_multimodal_documents(tokenizer, num_docs=max(num_docs, 4), max_tokens=max_tokens)
    vocab = model.get_input_embeddings().num_embeddings
    docs = load_documents("chitchat", tokenizer, num_docs=num_docs, max_tokens=max_tokens, vocab_size=vocab)
    pad = getattr(model.config, "pad_token_id", None)
    if model.config.model_type in ("roberta", "bert") and pad is not None:
        docs = [torch.where(d == pad, (pad + 1) % vocab, d) for d in docs]
    return docs


def run_matrix(
    families, *, seed: int = 0, vocab: int = 1024, lengths: tuple[int, ...] = (40, 13, 57), control: bool = False
) -> list[ConformanceRow]:
    """One :class:`ConformanceRow` per family: tiny random configs (:mod:`packwise.verify._families`) over
    ``vocab`` tokens with seeded random documents of ``lengths`` tokens; ``qwen2_5_vl`` = ``tiny-qwen2.5-vl``
    with text and image documents; ``smollm2`` = the real SmolLM2-135M on chitchat (atol 1e-4).
    ``control``: the rows are :func:`leak_control` rows instead (hybrid families only).

    Example:
        >>> [r.verdict for r in run_matrix(["kimi_linear"])]
        ['REFUSED']
        >>> [r.verdict for r in run_matrix(["lfm2"])], [r.verdict for r in run_matrix(["lfm2"], control=True)]
        (['ISOLATED'], ['LEAK'])
    """
    from ._families import family_model
    from ._models import load_model, load_multimodal_documents

    rows = []
    for family in families:
        torch.manual_seed(seed)
        if family == "smollm2":
            model, tok = load_model("smollm2")
            rows.append(conformance_row(family, model, family_documents(family, tok, model), atol=1e-4))
            continue
        if family == "qwen2_5_vl":
            model, tok = load_model("tiny-qwen2.5-vl", seed=seed)
            rows.append(conformance_row(family, model, load_multimodal_documents(tok, num_docs=4, max_tokens=48)))
            continue
        model = family_model(family, vocab)
        g = torch.Generator().manual_seed(seed + 1)
        low = int(getattr(model.config, "pad_token_id", None) or 0) + 1  # no padding token inside a document
        docs = [torch.randint(low, vocab, (n,), generator=g) for n in lengths]
        rows.append(leak_control(family, model, docs) if control else conformance_row(family, model, docs))
    return rows


#: Hybrid / linear-attention families: their stateful mixers run per document (``integrations/hf/_mixers.py``).
HYBRID = (
    "bamba", "nemotron_h", "qwen3_next", "jamba", "lfm2", "mamba", "mamba2", "falcon_mamba", "granitemoehybrid",
    "falcon_h1", "zamba", "zamba2", "qwen3_5", "qwen3_5_moe", "lfm2_moe", "olmo_hybrid", "minimax",
)  # fmt: skip
#: The families of ``docs/conformance.md`` (the issue's 14, the hybrids, Kimi Linear (refused) and SmolLM2).
MATRIX = (
    "llama", "qwen2", "qwen3", "qwen3_moe", "mistral", "gemma2", "gemma3", "phi3", "gpt_oss", "olmo2", "roberta",
    "bert", "qwen2_5_vl", *HYBRID, "kimi_linear", "smollm2",
)  # fmt: skip

FEATURES_TESTED = {
    "llama": "causal, GQA", "qwen2": "sliding window 8 on layer 1 (use_sliding_window, max_window_layers=1)",
    "qwen3": "q/k norm, head_dim 16", "qwen3_moe": "MoE 4 experts top-2", "mistral": "sliding window 8",
    "gemma2": "local(8)/global layers, attn softcap 5, final softcap 30, custom scaling",
    "gemma3": "local(8)/global layers, custom scaling (query_pre_attn_scalar 24)", "phi3": "fused qkv",
    "gpt_oss": "attention sinks, local(8)/global layers, MoE", "olmo2": "q/k norm",
    "roberta": "bidirectional encoder, positions from pad_token_id+1", "bert": "bidirectional encoder",
    "qwen2_5_vl": "MRoPE, images + text",
    "bamba": "Mamba2 mixer", "nemotron_h": "Mamba2 mixer", "qwen3_next": "gated DeltaNet",
    "jamba": "Mamba mixer (layer passes no kwargs)", "lfm2": "short convolution", "mamba": "Mamba mixer",
    "mamba2": "Mamba2 mixer", "falcon_mamba": "Mamba mixer", "granitemoehybrid": "Mamba2 mixer, MoE",
    "falcon_h1": "parallel Mamba2 + attention", "zamba": "Mamba mixer, shared attention block",
    "zamba2": "Mamba2 mixer, shared attention block", "qwen3_5": "gated DeltaNet", "qwen3_5_moe": "gated DeltaNet, MoE",
    "lfm2_moe": "short convolution, MoE", "olmo_hybrid": "gated DeltaNet", "minimax": "lightning attention, MoE",
    "kimi_linear": "delta attention + MLA", "smollm2": "real SmolLM2-135M, chitchat",
}  # fmt: skip


def markdown(rows: list[ConformanceRow], controls: Sequence[ConformanceRow] = ()) -> str:
    """The conformance table as Markdown (``docs/conformance.md``), then the hybrid controls (LEAK rows)."""
    import datetime
    import platform

    import transformers

    def f(x):
        return "–" if x is None else f"{x:.1e}"

    lines = [
        "# Conformance matrix",
        "",
        "Generated by `python -m packwise.verify._matrix docs/conformance.md` (do not edit by hand) on "
        f"{datetime.date.today().isoformat()}, transformers {transformers.__version__}, torch "
        f"{torch.__version__}, Python {platform.python_version()}, CPU fp32, backend `auto`.",
        "",
        "Each row patches a tiny random model (2 layers, hidden 64, vocab 1024, seeded; documents of 40, 13 and "
        "57 random tokens) with `use_packed_attention` and checks: every document's logits packed vs alone "
        "(max |Δlogit|, allclose atol 1e-5 + rtol 1.3e-6 per element), the loss with the global token count "
        "(|Δloss|), every parameter gradient (max relative Δgrad, tolerance 1e-4), the patched model alone vs "
        "the same model with transformers' own `eager` attention (Δ vs eager ≤ 1e-4: the features are honoured, "
        "not merely applied the same way twice) and `generate` after patching (ok: the same 3 greedy tokens as the "
        "unpatched model; Zamba: 3 layers, its shared block needs two hybrid layers). `smollm2` is the real "
        "SmolLM2-135M (GGUF, fp32) on 3 chitchat conversations of up to 64 tokens, atol 1e-4. A leak moves logits "
        "by 1e-2 or more: `tests/isolation/test_conformance.py` drops the sliding window, the softcap or the "
        "per-document encoder attention and the same check reports LEAK (max |Δlogit| > 1e-2). REFUSED rows "
        "are what `use_packed_attention` raises (`PackingRefused`) — `packwise verify` exits 3 on them. "
        "Run one row yourself: `packwise verify --model <family>`; your own checkpoint: "
        "`packwise verify --model PATH`.",
        "",
        "| family | model_type | tested features | result | max Δlogit | Δloss | max Δgrad (rel) | Δ vs eager "
        "| generate | reason |",
        "|---|---|---|---|---|---|---|---|---|---|",
    ]
    for r in rows:
        gen = "–" if r.generate is None else ("ok" if r.generate else "FAILED")
        lines.append(
            f"| {r.family} | {r.model_type} | {FEATURES_TESTED.get(r.family, '')} | **{r.verdict}** | "
            f"{f(r.max_abs_diff)} | {f(r.loss_abs_diff)} | {f(r.grad_max_rel_diff)} | {f(r.eager_max_abs_diff)} | "
            f"{gen} | {r.reason.split(';')[0].split('. packwise')[0] if r.reason else ''} |"
        )
    if controls:
        lines += [
            "",
            "## Controls: hybrid families without the reset",
            "",
            "Hybrid rows run every stateful mixer (Mamba, Mamba2, gated DeltaNet, short convolution, lightning "
            "attention) once per document (`packwise/integrations/hf/_mixers.py`). Each control patches the same "
            "model with `use_packed_attention`, then removes only that per-document mixer forward (attention stays "
            "isolated), and runs the same check: it must say LEAK.",
            "",
            "| family | result | max Δlogit | Δloss | max Δgrad (rel) |",
            "|---|---|---|---|---|",
        ]
        lines += [
            f"| {r.family} | **{r.verdict}** | {f(r.max_abs_diff)} | {f(r.loss_abs_diff)} | {f(r.grad_max_rel_diff)} |"
            for r in controls
        ]
    return "\n".join(lines) + "\n"


if __name__ == "__main__":  # python -m packwise.verify._matrix docs/conformance.md [family ...]
    import sys
    from pathlib import Path

    target = Path(sys.argv[1])
    rows = []
    for family in sys.argv[2:] or MATRIX:
        rows += run_matrix([family])
        print(rows[-1].family, rows[-1].verdict, f"{rows[-1].seconds:.1f} s", flush=True)
    controls = []
    for family in [f for f in sys.argv[2:] or MATRIX if f in HYBRID]:
        controls += run_matrix([family], control=True)
        print(controls[-1].family, "control", controls[-1].verdict, f"{controls[-1].seconds:.1f} s", flush=True)
    target.write_text(markdown(rows, controls))
    bad = [r.family for r in rows if r.verdict not in ("ISOLATED", "REFUSED")]
    bad += [f"{r.family} (control)" for r in controls if r.verdict != "LEAK"]
    print(f"wrote {target}: {len(rows)} rows" + (f"; NOT isolated: {bad}" if bad else ""))
    sys.exit(1 if bad else 0)
