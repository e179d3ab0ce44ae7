"""Hugging Face Transformers / TRL integration: a packing collator and isolation through AttentionInterface.

The collator emits what HF's flash-attention path already understands — ``input_ids [1, T]``, ``labels``,
``position_ids`` restarting per document, ``cu_seq_lens_q/k`` and ``max_length_q/k`` — and no
``attention_mask`` (which would disable packing everywhere). ``use_packed_attention`` makes *any* model
that dispatches through ``AttentionInterface`` use :func:`packwise.attention.varlen_attention` on those
boundaries, so documents stay isolated on CPU and GPU, with ``use_cache`` on or off, in train and eval
mode. Measured with transformers 5.24 on CPU: without it, restarted position ids alone isolate on
eager/sdpa only when ``use_cache=False``.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from functools import partial

import numpy as np
import torch

from ..assemble import PackedSequence, assemble_pack, collate_packs
from ..assemble._pack import MEDIA_KEYS
from ..attention import BACKENDS, Backend, varlen_attention

HF_KEYS = ("input_ids", "labels", "position_ids", "cu_seq_lens_q", "cu_seq_lens_k", "max_length_q", "max_length_k")


def _sequences(feature: Mapping, index: int) -> list[dict]:
    """One feature -> its sequences: split by ``seq_lengths`` (a packed row) or the whole row."""
    if "input_ids" not in feature:
        raise ValueError(f"feature {index} has no 'input_ids' (keys: {sorted(feature)})")
    mask = feature.get("attention_mask")
    if mask is not None and not bool(np.all(np.asarray(mask) == 1)):
        raise ValueError(
            f"feature {index} has padding (attention_mask with zeros); PackedDataCollator takes unpadded rows — "
            "remove the padding (or the attention_mask column) before packing"
        )
    ids = np.asarray(feature["input_ids"], dtype=np.int64).reshape(-1)
    keep = ("input_ids", "labels", "loss_mask", "mm_token_type_ids")
    cols = {k: np.asarray(v) for k, v in feature.items() if k in keep and v is not None}
    lengths = feature.get("seq_lengths")
    if lengths is None:
        seq = {k: torch.from_numpy(np.ascontiguousarray(v)) for k, v in cols.items()}
        for k in ("position_ids", *MEDIA_KEYS):
            if feature.get(k) is not None:
                seq[k] = torch.as_tensor(feature[k])
        return [seq]
    lengths = np.asarray(lengths, dtype=np.int64)
    if int(lengths.sum()) != ids.shape[0] or (lengths < 1).any():
        raise ValueError(
            f"feature {index}: seq_lengths {lengths.tolist()} must be positive and sum to its {ids.shape[0]} tokens"
        )
    cuts = np.cumsum(lengths)[:-1]
    parts = {k: np.split(v, cuts) for k, v in cols.items()}
    return [{k: torch.from_numpy(np.ascontiguousarray(p[i])) for k, p in parts.items()} for i in range(len(lengths))]


class PackedDataCollator:
    """Collate rows into one packed row for ``transformers.Trainer`` / ``trl.SFTTrainer``.

    A row is either one tokenized sample (``input_ids`` + optional ``labels`` or ``loss_mask``) or a row of
    ``packwise pack`` output (``input_ids``, ``labels``, ``seq_lengths``): every document of every row
    becomes a segment of one ``[1, T]`` row. Keep ``seq_lengths`` through the Trainer with
    ``TrainingArguments(remove_unused_columns=False)``.

    Args:
        pad_to_multiple_of: pad T up to a multiple (one extra segment, labels -100).
        alignment: pad every document to a multiple (context/tensor parallelism).
        position_offset: first position of every document.
        pad_token_id: ``input_ids`` value on padding.
        return_packwise_keys: also return ``cu_seqlens``, ``seq_idx``, ``padding_mask``, ... (not for
            ``model(**batch)``).

    Rows may also be :class:`~packwise.assemble.PackedSequence` objects (``PackedParquetDataset`` items).

    Returns (``__call__``):
        ``input_ids [1, T]`` int64, ``labels [1, T]`` int64 (the first label of every document -100),
        ``position_ids [1, T]`` (MRoPE data: ``[4, 1, T]``, row 0 the text positions Qwen-VL models use to
        detect packing), ``cu_seq_lens_q/k (M+1,)`` int32, ``max_length_q/k`` (ints), and for data with
        images ``mm_token_type_ids [1, T]``, ``pixel_values``, ``image_grid_thw`` — ready for
        ``model(**batch)``. No ``attention_mask``.

    Example:
        >>> collate = PackedDataCollator()
        >>> batch = collate([{"input_ids": [1, 2, 3]}, {"input_ids": [4, 5]}])
        >>> batch["input_ids"].tolist(), batch["labels"].tolist(), batch["position_ids"].tolist()
        ([[1, 2, 3, 4, 5]], [[-100, 2, 3, -100, 5]], [[0, 1, 2, 0, 1]])
        >>> batch["cu_seq_lens_q"].tolist(), batch["max_length_q"], "attention_mask" in batch
        ([0, 3, 5], 3, False)
    """

    def __init__(
        self,
        *,
        pad_to_multiple_of: int = 1,
        alignment: int = 1,
        position_offset: int = 0,
        pad_token_id: int = 0,
        return_packwise_keys: bool = False,
    ) -> None:
        self.pad_to_multiple_of = pad_to_multiple_of
        self.alignment = alignment
        self.position_offset = position_offset
        self.pad_token_id = pad_token_id
        self.return_packwise_keys = return_packwise_keys

    def __call__(self, features: Sequence[Mapping]) -> dict:
        if not features:
            raise ValueError("PackedDataCollator got an empty batch")
        packs = [
            f if isinstance(f, PackedSequence) else assemble_pack(
                _sequences(f, i), alignment=self.alignment, position_offset=self.position_offset,
                pad_token_id=self.pad_token_id,
            )
            for i, f in enumerate(features)
        ]  # fmt: skip
        batch = collate_packs(  # labels="hf" (h16): HF models shift; Megatron-shifted packs are converted back
            packs, pad_to_multiple_of=self.pad_to_multiple_of, pad_token_id=self.pad_token_id, labels="hf"
        )
        if batch["position_ids"].dim() == 3:  # MRoPE: Qwen-VL's packed form [4, 1, T], row 0 = text positions
            text = _text_positions(batch["cu_seqlens_padded"], batch["position_ids"].shape[-1])
            batch["position_ids"] = torch.cat([text.view(1, 1, -1), batch["position_ids"]])
        if self.return_packwise_keys:
            return batch
        out = {k: batch[k] for k in HF_KEYS}
        out.update({k: batch[k] for k in ("mm_token_type_ids", *MEDIA_KEYS) if k in batch})
        return out


def _text_positions(cu_padded: torch.Tensor, total: int) -> torch.Tensor:
    """Per-segment arange over the physical segments (what HF's packed-sequence detection expects)."""
    seg = cu_padded.to(torch.int64).diff()
    starts = cu_padded[:-1].to(torch.int64)
    return torch.arange(total, device=cu_padded.device) - torch.repeat_interleave(starts, seg)


def packwise_attention_forward(
    module: torch.nn.Module,
    query: torch.Tensor,
    key: torch.Tensor,
    value: torch.Tensor,
    attention_mask: torch.Tensor | None,
    scaling: float | None = None,
    dropout: float = 0.0,
    *,
    backend: Backend = "auto",
    **kwargs,
) -> tuple[torch.Tensor, None]:
    """An ``AttentionInterface`` function: varlen attention on the collator's ``cu_seq_lens_q/k``.

    ``query`` is ``(B, H, S, D)``; with ``cu_seq_lens_q/k`` the ``B·S`` tokens are attended document by
    document (the mask HF built is ignored). Without them (unpacked batches, generation) this is plain SDPA
    with HF's mask. Returns ``((B, S, H, D), None)``.

    Raises:
        ValueError: boundaries given together with a populated KV cache (keys longer than queries).
    """
    cu_q = kwargs.get("cu_seq_lens_q")
    causal = kwargs.get("is_causal")
    causal = getattr(module, "is_causal", True) if causal is None else causal
    if cu_q is None or not causal:
        # Unpacked input, generation, or a bidirectional module (a VLM's vision tower receives the text
        # kwargs too): the text boundaries do not apply — plain SDPA with HF's mask.
        from transformers.integrations.sdpa_attention import sdpa_attention_forward

        return sdpa_attention_forward(
            module, query, key, value, attention_mask, scaling=scaling, dropout=dropout, **kwargs
        )
    cu_k = kwargs.get("cu_seq_lens_k", cu_q)
    b, h, s, d = query.shape
    if key.shape[2] != s:
        raise ValueError(
            f"packed attention got {s} queries but {key.shape[2]} keys: a populated KV cache cannot be combined with "
            "cu_seq_lens (pass use_cache=False when continuing from a cache)"
        )
    q = query.transpose(1, 2).reshape(b * s, h, d)
    k = key.transpose(1, 2).reshape(b * s, key.shape[1], d)
    v = value.transpose(1, 2).reshape(b * s, value.shape[1], d)
    out = varlen_attention(
        q, k, v, cu_seqlens_q=cu_q, cu_seqlens_k=cu_k,
        max_seqlen_q=int(kwargs.get("max_length_q") or s), max_seqlen_k=int(kwargs.get("max_length_k") or s),
        causal=True, scale=scaling, backend=backend, dropout_p=dropout if module.training else 0.0,
    )  # fmt: skip
    return out.reshape(b, s, h, d), None


def attention_name(backend: Backend = "auto") -> str:
    """The ``AttentionInterface`` name packwise registers for a backend (``packwise`` or ``packwise_<backend>``)."""
    return "packwise" if backend == "auto" else f"packwise_{backend}"


def register_packed_attention(backend: Backend = "auto") -> str:
    """Register packwise attention (and SDPA's mask builder) under :func:`attention_name`; returns the name."""
    from transformers import AttentionInterface, AttentionMaskInterface
    from transformers.masking_utils import sdpa_mask

    if backend not in BACKENDS:
        raise ValueError(f"unknown attention backend {backend!r}; use one of {', '.join(BACKENDS)}")
    name = attention_name(backend)
    AttentionInterface.register(name, partial(packwise_attention_forward, backend=backend))
    AttentionMaskInterface.register(name, sdpa_mask)
    return name


def use_packed_attention(model, *, backend: Backend = "auto"):
    """Switch a Hugging Face model to packwise attention so packed documents never attend to each other.

    Works for every model whose attention dispatches through transformers' ``AttentionInterface`` (Llama,
    Qwen2, Mistral, Gemma, ...). Boundaries come from the collator's ``cu_seq_lens_q/k``, never from token
    values or position ids. Returns the model (switched in place).

    Raises:
        ValueError: an unknown backend, or a model that cannot switch attention implementation.

    Example:
        >>> from transformers import LlamaConfig, LlamaForCausalLM
        >>> cfg = LlamaConfig(vocab_size=64, hidden_size=32, intermediate_size=64, num_hidden_layers=1,
        ...                   num_attention_heads=4, num_key_value_heads=2)
        >>> model = use_packed_attention(LlamaForCausalLM(cfg), backend="sdpa")
        >>> model.config._attn_implementation
        'packwise_sdpa'
    """
    name = register_packed_attention(backend)
    try:
        model.set_attn_implementation(name)
    except (ValueError, AttributeError) as e:
        raise ValueError(f"{type(model).__name__} cannot switch to packwise attention: {e}") from e
    return model
