"""MoE routers never see padding: the padded batch's load-balancing loss is the tight pack's.

Padding inside a packed row (``PackedDataCollator(alignment=...)``, ``pad_to_multiple_of``, a fixed-width
pack's tail) is routed like any token — HF's MoE blocks route every row of ``hidden_states`` — and
``load_balancing_loss_func`` (the Switch-Transformer auxiliary loss, equations 4-6 of arXiv:2101.03961, in
every transformers MoE family: ``modeling_qwen3_moe``, ``modeling_mixtral``, ``modeling_gpt_oss``,
``modeling_qwen3_5_moe``, ...) averages the expert counts and router probabilities over every row unless the
model's ``forward`` got an ``attention_mask``. The collator emits no ``attention_mask`` (HF's flash path would
unpad by it and drop the document boundaries), so it hands the padding over as ``padding_mask`` and the
patched forward turns it into the ``attention_mask`` that only the auxiliary loss reads: packwise attention
ignores HF's mask when ``cu_seq_lens_q/k`` are given. Routing itself is per token (no expert capacity in
transformers' eager MoE), so padding never changes a real token's experts. Nemotron-H's router (sigmoid
scores plus ``e_score_correction_bias``, no auxiliary loss in transformers 5.24) has no statistic to protect.
"""

from __future__ import annotations

import inspect

import torch


def routes(model) -> bool:
    """Whether ``model``'s forward computes router statistics (it takes ``output_router_logits``).

    Example:
        >>> from transformers import LlamaConfig, LlamaForCausalLM
        >>> routes(LlamaForCausalLM(LlamaConfig(vocab_size=8, hidden_size=8, intermediate_size=8,
        ...        num_hidden_layers=1, num_attention_heads=2)))
        False
    """
    return "output_router_logits" in inspect.signature(type(model).forward).parameters


def without_padding(model, kwargs: dict, padding_mask: torch.Tensor | None) -> dict:
    """The forward's ``kwargs`` with the collator's ``padding_mask`` (bool ``[1, T]``/``[P, S]``, True on
    padding) turned into the ``attention_mask`` (int64, 1 on real tokens) that keeps padding out of the
    router statistics of an MoE model; other models only lose the key (padding is isolated in its own
    segment or inside its document's, and its labels are -100).

    Raises:
        ValueError: ``padding_mask`` together with an ``attention_mask`` (the batch would name its padding
            twice), or a ``padding_mask`` whose shape is not ``input_ids``'.
    """
    if padding_mask is None or not routes(model):
        return kwargs
    if kwargs.get("attention_mask") is not None:
        raise ValueError(
            "the batch carries both padding_mask (PackedDataCollator's padding) and an attention_mask: which tokens "
            "are padding is ambiguous. Pass PackedDataCollator's output unchanged (it has no attention_mask)"
        )
    ids = kwargs.get("input_ids")
    if isinstance(ids, torch.Tensor) and tuple(padding_mask.shape) != tuple(ids.shape):
        raise ValueError(
            f"padding_mask has shape {tuple(padding_mask.shape)} but input_ids {tuple(ids.shape)}: they come from "
            "different batches (build both with one PackedDataCollator call)"
        )
    return {**kwargs, "attention_mask": (~padding_mask.to(torch.bool)).to(torch.int64)}
