"""``check_equivalence``: run each document alone and packed, and compare logits, loss and gradients.

The only check that catches cross-document attention: packing without a boundary-aware attention still
trains (the loss goes down) and nothing raises. Here each document's logits packed must equal its logits
alone, the packed loss must equal the unpacked loss with the same global normaliser, every parameter
gradient must match, and changing document A must not move document B's logits.
"""

from __future__ import annotations

from collections.abc import Sequence
from contextlib import nullcontext
from dataclasses import asdict, dataclass, field
from typing import Any, Literal

import torch

from ..constants import IGNORE_INDEX
from ..hf import PackedDataCollator
from ..loss import packed_cross_entropy
from ._determinism import no_dropout

Inputs = Literal["packwise", "position_ids", "none"]


@dataclass(frozen=True)
class EquivalenceReport:
    """Packed vs alone, per document and overall.

    Attributes:
        path: what was checked (attention implementation and inputs).
        use_cache, train: the settings of the forward passes.
        per_document_max_abs_diff: max |logit packed - logit alone| of each document.
        max_abs_diff: the largest of them.
        loss_packed, loss_unpacked: token-mean cross-entropy over all documents (same global count).
        loss_abs_diff: |loss_packed - loss_unpacked|.
        grad_max_rel_diff: max over parameters of max|g_packed - g_alone| / max|g_alone| (None if skipped);
            a parameter whose difference is within ``grad_noise_floor`` counts 0.
        grad_noise_floor: the absolute gradient difference taken as float noise: 16 ulps (``16 * eps`` of the
            gradient dtype) of the model's largest gradient. A gradient that is zero in exact arithmetic
            (OPT's ``k_proj.bias``: softmax ignores a per-key constant) holds only such noise.
        dropout_off: what was switched off for a deterministic train-mode comparison (``Class.attr=value
            (xN)``; see :func:`packwise.verify._determinism.no_dropout`); empty in eval mode.
        perturbation_max_abs_diff: max change of the other documents' logits when document 0 changes.
        atol, rtol, grad_rtol: tolerances used (logits: ``|packed - alone| <= atol + rtol * |alone|`` per
            element, as :func:`torch.testing.assert_close`).
        isolated: every check within tolerance.
    """

    path: str
    use_cache: bool | None
    train: bool
    per_document_max_abs_diff: list[float]
    max_abs_diff: float
    loss_packed: float
    loss_unpacked: float
    loss_abs_diff: float
    grad_max_rel_diff: float | None
    perturbation_max_abs_diff: float | None
    atol: float
    grad_rtol: float
    isolated: bool = field(default=False)
    rtol: float = 0.0
    grad_noise_floor: float | None = None
    dropout_off: tuple[str, ...] = ()

    def to_dict(self) -> dict:
        return asdict(self)


MEDIA = ("pixel_values", "image_grid_thw", "input_features", "feature_attention_mask", "pixel_values_videos",
         "video_grid_thw", "second_per_grid_ts", "image_grid_hw", "input_features_mask")  # fmt: skip


def _docs(sequences) -> list[dict]:
    docs = []
    for i, s in enumerate(sequences):
        extra = {}
        if isinstance(s, dict):
            ids = torch.as_tensor(s["input_ids"], dtype=torch.int64).reshape(-1)
            labels = s.get("labels")
            labels = ids.clone() if labels is None else torch.as_tensor(labels, dtype=torch.int64).reshape(-1)
            extra = {k: torch.as_tensor(s[k]) for k in (*MEDIA, "mm_token_type_ids") if s.get(k) is not None}
            if s.get("position_ids") is not None and torch.as_tensor(s["position_ids"]).dim() == 2:
                extra["position_ids"] = torch.as_tensor(s["position_ids"])  # the model's own MRoPE (Qwen3-VL)
        else:
            ids = torch.as_tensor(s, dtype=torch.int64).reshape(-1)
            labels = ids.clone()
        if ids.numel() < 2:
            raise ValueError(f"document {i} has {ids.numel()} tokens; the check needs at least 2")
        labels = labels.clone()
        labels[0] = IGNORE_INDEX
        docs.append({"input_ids": ids, "labels": labels, **extra})
    # 1-D position ids given (Nemotron-Omni: no rotary embedding) -> positions from 0, the model takes no
    # mm_token_type_ids; the media token types stay only to keep media tokens intact in the perturbation check
    given = [torch.as_tensor(s["position_ids"]) for s in sequences if isinstance(s, dict) and "position_ids" in s]
    flat = any(p.dim() == 1 for p in given)
    if flat:
        for d in docs:
            d["_media_types"] = d.pop("mm_token_type_ids", torch.zeros_like(d["input_ids"]))
    if any("mm_token_type_ids" in d for d in docs):  # MRoPE positions per document (transformers' own code)
        from ..multimodal import mrope_position_ids

        omni = any("input_features" in d for d in docs)  # audio: Qwen2.5-Omni's rope index (h18)
        for d in docs:
            mm = d.setdefault("mm_token_type_ids", torch.zeros_like(d["input_ids"]))
            if "position_ids" in d:
                continue
            if omni:
                from ..multimodal import omni_position_ids

                d["position_ids"] = omni_position_ids(
                    d["input_ids"], image_grid_thw=d.get("image_grid_thw"),
                    feature_attention_mask=d.get("feature_attention_mask"),
                )  # fmt: skip
            else:
                d["position_ids"] = mrope_position_ids(
                    d["input_ids"], mm, d.get("image_grid_thw", torch.zeros(0, 3)),
                    video_grid_thw=d.get("video_grid_thw"), second_per_grid_ts=d.get("second_per_grid_ts"),
                )  # fmt: skip
    if len(docs) < 2:
        raise ValueError(f"check_equivalence needs at least 2 documents, got {len(docs)}")
    return docs


def _forward(model, batch: dict, use_cache: bool | None) -> torch.Tensor:
    kwargs = dict(batch)
    if use_cache is not None:
        kwargs["use_cache"] = use_cache
    return model(**kwargs).logits


def _alone_batch(d: dict) -> dict:
    """One document as the model would see it unpacked (a VLM computes its own MRoPE positions)."""
    batch = {"input_ids": d["input_ids"][None]}
    if "mm_token_type_ids" in d:
        batch["mm_token_type_ids"] = d["mm_token_type_ids"][None]
        # all ones (no padding): Qwen2.5-Omni's thinker computes other rope positions without a mask (h18)
        batch["attention_mask"] = torch.ones_like(batch["input_ids"])
    batch.update({k: d[k] for k in MEDIA if k in d})
    return batch


def _packed_batch(docs: list[dict], inputs: Inputs, offset: int = 0) -> dict:
    batch = PackedDataCollator(position_offset=offset)(
        [{k: v for k, v in d.items() if k != "_media_types"} for d in docs]
    )
    media = {k: batch[k] for k in (*MEDIA, "mm_token_type_ids") if k in batch}
    if inputs == "position_ids":
        return {"input_ids": batch["input_ids"], "position_ids": batch["position_ids"], **media}
    if inputs == "none":
        return {"input_ids": batch["input_ids"], **media}
    return {k: v for k, v in batch.items() if k != "labels"}


def check_equivalence(
    model,
    sequences: Sequence,
    *,
    atol: float = 1e-5,
    rtol: float = 1.3e-6,
    grad_rtol: float = 1e-4,
    use_cache: bool | None = False,
    train: bool = False,
    inputs: Inputs = "packwise",
    check_grads: bool = True,
    perturbation: bool = True,
    path: str | None = None,
    position_offset: int | None = None,
    eval_modules: Sequence[str] = (),
) -> EquivalenceReport:
    """Compare every document's logits, the loss and all gradients, packed vs alone.

    Args:
        model: a causal LM returning ``.logits`` (HF); configure its attention first (e.g.
            ``use_packed_attention``).
        sequences: at least 2 documents: token id lists/tensors, or dicts with ``input_ids`` (+ ``labels``).
        atol: absolute tolerance on logits and loss (fp32: 1e-5 for tiny models, 1e-4 for real ones).
        rtol: relative tolerance on logits, per element (``|packed - alone| <= atol + rtol * |alone|``);
            the default 1.3e-6 is :func:`torch.testing.assert_close`'s fp32 default. Kernels that differ
            only in reduction order (a packed row vs a short one) drift by ~1e-4 on logits of magnitude
            ~20 in a 30-layer fp32 model; a leak moves them by 1e-2 or more.
        grad_rtol: tolerance on the relative gradient difference.
        use_cache: passed to every forward (None: the model's default).
        train: run in train mode; every dropout is switched off for the check (named in ``dropout_off``).
        inputs: what the packed forward receives: ``packwise`` (collator output: position ids +
            ``cu_seq_lens``), ``position_ids`` (HF's plain padding-free path), ``none`` (no boundaries at
            all — must fail).
        check_grads: compare parameter gradients (one backward each way).
        perturbation: change document 0 and require the other documents' logits not to move.
        path: a label for the report.
        eval_modules: submodule names kept in eval mode when ``train`` is True (BatchNorm layers: packwise
            refuses them in train mode in a packed row with media, see ``packwise.hf.use_packed_attention``).
        position_offset: first position id of every packed document; None: the model's own
            (:func:`packwise.hf.position_offset`: RoBERTa ``pad_token_id + 1``, else 0).

    Returns:
        An :class:`EquivalenceReport`; ``isolated`` is True iff every check is within tolerance.

    Raises:
        ValueError: fewer than 2 documents, or a document shorter than 2 tokens.

    Example:
        >>> from packwise.hf import use_packed_attention
        >>> from packwise.verify import check_equivalence, load_model
        >>> model, _ = load_model("tiny-llama", num_hidden_layers=1)
        >>> _ = use_packed_attention(model)
        >>> report = check_equivalence(model, [[1, 2, 3, 4], [5, 6, 7]])
        >>> report.isolated, report.loss_abs_diff <= report.atol
        (True, True)
    """
    docs = _docs(sequences)
    vocab = getattr(getattr(model, "config", None), "vocab_size", None)
    if isinstance(vocab, int):
        for i, d in enumerate(docs):
            top = int(d["input_ids"].max())
            if top >= vocab or int(d["input_ids"].min()) < 0:
                raise ValueError(
                    f"document {i} holds token id {top}, outside the model's vocabulary (config.vocab_size={vocab}); "
                    "tokenize with the model's own tokenizer (packwise verify --model DIR needs DIR's tokenizer)"
                )
    if position_offset is None:
        from ..hf import position_offset as model_offset

        position_offset = model_offset(model)
    batch_inputs = (inputs, position_offset)
    was_training = model.training
    model.train(train)
    off: list[str] = []
    for name in eval_modules:
        model.get_submodule(name).eval()
    try:
        with no_dropout(model) if train else nullcontext(off) as off:
            result = _compare(model, docs, batch_inputs, use_cache, atol, rtol, check_grads, perturbation)
    finally:
        model.train(was_training)
    diffs, loss_p, loss_u, grad_diff, noise, perturb, close = result
    ok = close and abs(float(loss_p) - float(loss_u)) <= atol
    ok = ok and (grad_diff is None or grad_diff <= grad_rtol) and (perturb is None or perturb <= atol)
    return EquivalenceReport(
        path=path or f"{getattr(model.config, '_attn_implementation', '?')} / {inputs}",
        use_cache=use_cache,
        train=train,
        per_document_max_abs_diff=diffs,
        max_abs_diff=max(diffs),
        loss_packed=float(loss_p),
        loss_unpacked=float(loss_u),
        loss_abs_diff=abs(float(loss_p) - float(loss_u)),
        grad_max_rel_diff=grad_diff,
        perturbation_max_abs_diff=perturb,
        atol=atol,
        grad_rtol=grad_rtol,
        isolated=bool(ok),
        rtol=rtol,
        grad_noise_floor=noise,
        dropout_off=tuple(off),
    )


def _compare(model, docs, inputs, use_cache, atol, rtol, check_grads, perturbation):
    """The forwards and backwards of :func:`check_equivalence` (dropout already off in train mode)."""
    lengths = [d["input_ids"].shape[0] for d in docs]
    alone = []
    with torch.no_grad():
        for d in docs:
            alone.append(_forward(model, _alone_batch(d), use_cache)[0])
        packed = _forward(model, _packed_batch(docs, *inputs), use_cache)[0]
    diffs, close, start = [], True, 0
    for logits, n in zip(alone, lengths):
        delta = (packed[start : start + n] - logits).abs()
        diffs.append(float(delta.max()))
        close = close and bool((delta <= atol + rtol * logits.abs()).all())
        start += n
    labels = torch.cat([d["labels"] for d in docs])
    total = int(sum((d["labels"][1:] != IGNORE_INDEX).sum() for d in docs))
    loss_p = packed_cross_entropy(packed, labels, num_items=total)
    loss_u = sum(packed_cross_entropy(lg, d["labels"], reduction="sum") for lg, d in zip(alone, docs)) / total
    grad_diff, noise = _grad_diff(model, docs, inputs, use_cache, total) if check_grads else (None, None)
    perturb = _perturb(model, docs, inputs, use_cache, packed, lengths) if perturbation else None
    return diffs, loss_p, loss_u, grad_diff, noise, perturb, close


def _grads(model) -> dict[str, torch.Tensor]:
    return {n: p.grad.detach().clone() for n, p in model.named_parameters() if p.grad is not None}


def _grad_diff(model, docs, inputs, use_cache, total: int) -> tuple[float, float]:
    params = [p for p in model.parameters() if p.requires_grad]
    model.zero_grad(set_to_none=True)
    logits = _forward(model, _packed_batch(docs, *inputs), use_cache)[0]
    labels = torch.cat([d["labels"] for d in docs])
    packed_cross_entropy(logits, labels, num_items=total).backward()
    g_packed = _grads(model)
    model.zero_grad(set_to_none=True)
    for d in docs:
        lg = _forward(model, _alone_batch(d), use_cache)[0]
        (packed_cross_entropy(lg, d["labels"], reduction="sum") / total).backward()
    g_alone = _grads(model)
    model.zero_grad(set_to_none=True)
    worst = 0.0
    # a parameter whose gradient is zero in exact arithmetic (a key bias: softmax ignores it) holds only float
    # noise, which no relative check absorbs: differences within 16 ulps of the model's largest gradient count 0
    top = max((float(g.abs().max()) for g in g_alone.values()), default=0.0)
    eps = max((torch.finfo(g.dtype).eps for g in g_alone.values() if g.is_floating_point()), default=0.0)
    noise = 16 * eps * top
    for name, ga in g_alone.items():
        gp = g_packed.get(name, torch.zeros_like(ga))
        delta = float((gp - ga).abs().max())
        if delta > noise:
            scale = float(ga.abs().max())
            worst = max(worst, delta / scale if scale > 0 else float("inf"))
    del params
    return worst, noise


def _perturb(model, docs, inputs, use_cache, packed, lengths) -> float:
    changed: list[dict[str, Any]] = [dict(d) for d in docs]
    ids = changed[0]["input_ids"]
    types_: torch.Tensor = changed[0].get("mm_token_type_ids", changed[0].get("_media_types", torch.zeros_like(ids)))
    text = types_.eq(0)
    vocab = min(int(getattr(model.config, "vocab_size", None) or model.config.get_text_config().vocab_size), 151_000)
    changed[0]["input_ids"] = torch.where(text, (ids * 7 + 13) % vocab, ids)  # text tokens only: images stay intact
    with torch.no_grad():
        again = _forward(model, _packed_batch(changed, *inputs), use_cache)[0]
    return float((again[lengths[0] :] - packed[lengths[0] :]).abs().max())
