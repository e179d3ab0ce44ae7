"""``packwise verify``: prove isolation on a real model — packed vs alone, every packwise attention path."""

from __future__ import annotations

import json
import math
from typing import TYPE_CHECKING, Annotated

import typer
from rich.markup import escape

from ._console import out, progress_bars

if TYPE_CHECKING:
    from ..attention import Backend  # a Literal: no need to import torch for it

# --attn names -> packwise varlen backends: eager = backend "dense" (the additive-mask math), sdpa = SDPA per
# document, flex = flex_attention with a document BlockMask, packwise = backend "auto". A refusal names the
# path by its --attn name and the backend it runs, and its fix in --attn names (:func:`_refusal`).
ATTN_PATHS: dict[str, Backend] = {"eager": "dense", "sdpa": "sdpa", "flex": "flex", "packwise": "auto"}
MAX_DOCS = 64  # documents per verify run: each runs alone 4 times per path
EXIT_REFUSED = 3  # every requested path was refused by use_packed_attention (exit 1 = a leak, 0 = isolated)


def verify(
    model: Annotated[
        str,
        typer.Option(
            help="tiny-llama | tiny-qwen2 | tiny-qwen2.5-vl | tiny-qwen2.5-omni | tiny-nemotron-h-omni | tiny-qwen3-vl | smollm2 | a family (mistral, gemma2, bamba, ...: "
            "tiny random config) | PATH (your HF checkpoint dir or .gguf)"
        ),
    ] = "tiny-llama",
    attn: Annotated[
        str,
        typer.Option(
            help="Comma list of packwise paths: "
            + ", ".join(p if p == b else f"{p} (backend {b})" for p, b in ATTN_PATHS.items())
        ),
    ] = ",".join(ATTN_PATHS),
    data: Annotated[str, typer.Option(help="chitchat | a JSONL file (messages or input_ids)")] = "chitchat",
    num_docs: Annotated[int, typer.Option(help="Documents packed into one row (2-64).")] = 3,
    max_tokens: Annotated[int, typer.Option(help="Truncate each document to this many tokens.")] = 128,
    atol: Annotated[
        float | None, typer.Option(help="Logit/loss tolerance (default 1e-5 tiny, 1e-4 otherwise).")
    ] = None,
    rtol: Annotated[
        float,
        typer.Option(help="Relative logit tolerance per element: |Δ| <= atol + rtol·|alone| (torch.testing fp32)."),
    ] = 1.3e-6,
    grad_rtol: Annotated[float, typer.Option(help="Relative gradient tolerance.")] = 1e-4,
    grads: Annotated[bool, typer.Option(help="Compare parameter gradients (one backward per path).")] = True,
    raw: Annotated[
        bool, typer.Option(help="Also check HF's plain path (position ids only, default settings).")
    ] = False,
    allow: Annotated[
        str, typer.Option(help="Comma list of module classes to accept in an unverified model family (opt-in).")
    ] = "",
    json_out: Annotated[bool, typer.Option("--json", help="Print the results as JSON.")] = False,
) -> None:
    """Compare each document's logits, the loss and the gradients packed vs alone; exit 0 iff every
    packwise path that is not refused is isolated within tolerance (use_cache on and off, eval and train
    mode), 1 on a leak, 3 when every path is REFUSED (the reason is printed)."""
    import torch

    from ..hf import PackingRefused, use_packed_attention
    from ..verify import FAMILIES, TINY, check_equivalence, load_documents, load_model

    paths = list(dict.fromkeys(a.strip() for a in attn.split(",") if a.strip()))  # each path once
    unknown = [a for a in paths if a not in ATTN_PATHS]
    if unknown or not paths:
        what = f"unknown path(s) {unknown}" if unknown else "no path named"
        raise ValueError(f"--attn {attn!r}: {what}; use any of {', '.join(ATTN_PATHS)}")
    for flag, value in {"--atol": atol, "--rtol": rtol, "--grad-rtol": grad_rtol}.items():
        if value is not None and not 0 <= value < math.inf:  # inf would pass anything, nan nothing
            raise ValueError(f"--{flag[2:]} {value}: must be a finite number >= 0")
    if not 2 <= num_docs <= MAX_DOCS:
        raise ValueError(
            f"--num-docs {num_docs}: a pack needs 2 to {MAX_DOCS} documents to test isolation (each one also runs "
            "alone, per path and setting)"
        )
    if max_tokens < 2:
        raise ValueError(f"--max-tokens {max_tokens}: must be >= 2")
    family = model[5:] if model.startswith("tiny-") and model[5:] in FAMILIES else model
    tol = atol if atol is not None else (1e-5 if model in TINY or family in FAMILIES else 1e-4)
    if family in FAMILIES and model not in TINY:
        from ..text import load_tokenizer
        from ..verify import family_documents, family_model

        tok = load_tokenizer("qwen2.5")
        torch.manual_seed(0)
        net = family_model(family, len(tok))
    else:
        net, tok = load_model(model)
    if family in FAMILIES and model not in TINY:
        docs = family_documents(family, tok, net, num_docs=num_docs, max_tokens=max_tokens)
    elif model == "tiny-qwen2.5-vl":  # text-only and image documents mixed in one pack
        from ..verify import load_multimodal_documents

        docs = load_multimodal_documents(tok, num_docs=max(num_docs, 4), max_tokens=max_tokens)
    elif model == "tiny-qwen3-vl":  # text-only, image and timestamped-video documents, Qwen3-VL's rope index
        from ..verify import load_multimodal_documents

        docs = load_multimodal_documents(tok, num_docs=max(num_docs, 4), max_tokens=max_tokens, rope="qwen3_vl")
    elif model == "tiny-qwen2.5-omni":  # text-only, image, audio and image + audio documents in one pack
        from ..verify import load_omni_documents

        docs = load_omni_documents(tok, num_docs=max(num_docs, 4), max_tokens=max_tokens)
    elif model == "tiny-nemotron-h-omni":  # text, image, audio and image + audio documents, 1-D positions
        from ..verify import load_nemotron_omni_documents

        docs = load_nemotron_omni_documents(tok, num_docs=max(num_docs, 4), max_tokens=max_tokens)
    else:
        vocab = net.get_input_embeddings().num_embeddings
        docs = load_documents(data, tok, num_docs=num_docs, max_tokens=max_tokens, vocab_size=vocab)
    reports, refused, raw_reports = [], {}, []
    # BatchNorm (Parakeet's audio tower) is refused in train mode in a packed row with media: train-mode checks
    # keep it in eval mode, the fix the refusal names (a frozen encoder), and say so
    norms = [n for n, m in net.named_modules() if isinstance(m, torch.nn.modules.batchnorm._BatchNorm)]
    allowed = [a.strip() for a in allow.split(",") if a.strip()]
    with progress_bars(json_out) as progress:  # a real model takes minutes: one step per comparison
        advance = progress("verify", 4 * len(paths) + (2 if raw else 0)) if progress else (lambda n: None)
        for name in paths:
            try:
                use_packed_attention(net, backend=ATTN_PATHS[name], allow=allowed)
            except PackingRefused as e:
                refused[name] = _refusal(e)
                advance(4)
                continue
            for use_cache in (False, True):
                for train in (False, True):
                    # one gradient comparison per path (eval mode, no cache); flex has no backward on CPU
                    want_grads = (
                        grads and not use_cache and not train and not (name == "flex" and not torch.cuda.is_available())
                    )
                    r = check_equivalence(
                        net, docs, atol=tol, rtol=rtol, grad_rtol=grad_rtol, use_cache=use_cache, train=train,
                        check_grads=want_grads, path=f"packwise/{name}", eval_modules=norms if train else (),
                    )  # fmt: skip
                    reports.append(r)
                    advance(1)
        if raw:
            for impl in ("eager", "sdpa"):
                net.set_attn_implementation(impl)
                raw_reports.append(
                    check_equivalence(
                        net, docs, atol=tol, rtol=rtol, use_cache=None, inputs="position_ids", check_grads=False,
                        path=f"HF {impl} (raw)",
                    )
                )  # fmt: skip
                advance(1)
    ok = all(r.isolated for r in reports)
    verdict = "REFUSED" if not reports else "ISOLATED" if ok else "NOT ISOLATED"
    if json_out:
        payload = {
            "model": model,
            "documents": [int((d["input_ids"] if isinstance(d, dict) else d).numel()) for d in docs],
            "isolated": ok and bool(reports),
            "verdict": verdict,
            "refused": refused,
            "eval_in_train_mode": norms,
            "packwise": [r.to_dict() for r in reports],
            "raw": [r.to_dict() for r in raw_reports],
        }
        out.print_json(json.dumps(payload))
    else:
        if reports:
            out.print(_table(model, docs, reports, raw_reports))
        by_reason: dict[str, list[str]] = {}
        for name, reason in refused.items():
            backend = "" if ATTN_PATHS[name] == name else f" (backend {ATTN_PATHS[name]})"
            by_reason.setdefault(reason, []).append(f"packwise/{name}{backend}")
        for reason, names in by_reason.items():
            out.print(f"[bold yellow]REFUSED[/] {', '.join(names)}: {escape(reason)}", soft_wrap=True)
    if reports and not json_out:
        if norms:
            out.print(f"train mode: {', '.join(norms)} kept in eval mode (BatchNorm is refused in train mode in a "
                      "packed row with media: its batch statistics span every document)")  # fmt: skip
        verdict = "[bold green]ISOLATED[/]" if ok else "[bold red]NOT ISOLATED[/]"
        out.print(
            f"{verdict}: every packwise path within atol {tol:g} + rtol {rtol:g}·|logit|"
            if ok
            else f"{verdict} (atol {tol:g}, rtol {rtol:g})"
        )
    if not reports:
        raise typer.Exit(EXIT_REFUSED)
    if not ok:
        raise typer.Exit(1)


def _refusal(e) -> str:
    """A :class:`~packwise.hf.PackingRefused` reason with its fix in ``--attn`` names: the backends that take the
    model (``auto``, ``dense``, ``flash``, ...) as the paths that run them; ``flash`` and ``torch_varlen``
    (CUDA) have none and run under ``packwise`` (backend auto) where they are available."""
    if not e.backends:
        return e.reason
    paths = [p for p, backend in ATTN_PATHS.items() if backend in e.backends]
    return f"{e.problem}; use --attn {' or '.join(paths)}"


def _fmt(x: float | None) -> str:
    return "–" if x is None else f"{x:.1e}"


def _table(model: str, docs, reports, raw_reports):
    from rich.table import Table

    sizes = [int((d["input_ids"] if isinstance(d, dict) else d).numel()) for d in docs]
    t = Table(title=f"packwise verify — {model}, documents of {sizes} tokens packed")
    notes = [
        "Δgrad: every parameter gradient, compared once per path (cache off, eval); – where not compared",
        "Δgrad noise floor: differences within 16 ulps of the model's largest gradient count 0",
    ]
    off = sorted({x for r in reports for x in r.dropout_off})
    if off:
        notes.append(f"train rows: dropout switched off for a deterministic comparison: {', '.join(off)}")
    if any(r.path == "packwise/flex" for r in reports) and not any(
        r.grad_max_rel_diff is not None for r in reports if r.path == "packwise/flex"
    ):
        notes.append("flex: no gradient on CPU (flex_attention has no CPU backward)")
    if raw_reports:
        notes.append("HF (raw) = plain transformers path with position ids only and default settings (use_cache on)")
    t.caption = "\n".join(notes)
    for col in ("path", "cache", "mode", "|Δlogit|", "|Δloss|", "Δgrad", "perturb", "result"):
        t.add_column(col, no_wrap=True)
    for r in [*reports, *raw_reports]:
        verdict = "[green]OK[/]" if r.isolated else ("[red]LEAK[/]" if r.path.startswith("HF") else "[red]FAIL[/]")
        t.add_row(
            r.path, {None: "default", True: "on", False: "off"}[r.use_cache], "train" if r.train else "eval",
            _fmt(r.max_abs_diff), _fmt(r.loss_abs_diff), _fmt(r.grad_max_rel_diff),
            _fmt(r.perturbation_max_abs_diff), verdict,
        )  # fmt: skip
    return t
