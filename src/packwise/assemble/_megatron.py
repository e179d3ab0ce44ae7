"""Megatron-core ``PackedSeqParams`` from a THD batch (``layout="thd"``) or a :class:`PackedSequence`."""

from __future__ import annotations

import dataclasses

import numpy as np
import torch

from ._pack import PackedSequence


def to_packed_seq_params(batch, *, multi_token_prediction: bool | None = None):
    """megatron-core's ``PackedSeqParams(qkv_format="thd", ...)``, or the same keys as a dict without it.

    ``cu_seqlens_q/kv`` are the real cumulative lengths and ``cu_seqlens_q/kv_padded`` the physical ones
    (Transformer Engine's convention when sequences are padded for CP/TP/FP8); ``max_seqlen_q/kv`` is the
    longest *physical* segment, an upper bound for the kernels, always a Python int (TE and CUDA graphs need
    an int; a batch's ``max_length_q`` may be a one-element tensor after a tensor-parallel broadcast).

    ``multi_token_prediction=True`` (``PackingConfig.consumer.multi_token_prediction``) sets
    ``cu_seqlens_q/kv`` to the physical boundaries too — NeMo-RL's layout. The default ``None`` reads the
    batch's own mark: batches of an MTP config (``cfg.collator()``, ``cfg.loader()``, packs of
    ``cfg.stream()``) carry ``multi_token_prediction=True``, so a plain call is right for them. megatron-core's MTP
    ``roll_tensor`` slices the token row by ``cu_seqlens_q``; with alignment padding the real boundaries
    point into the wrong documents (measured: MTP loss 4.167337 instead of 4.155380), the physical ones roll
    each document within its own padded segment, whose padding carries no label and no loss mask. Attention
    is unchanged for the real tokens (padding follows them inside each causal segment); MoE layers need the
    batch's ``padding_mask`` then.

    Hybrid (Mamba) layers reset their state at document boundaries from these same fields: megatron-core
    0.16's ``MambaMixer._create_packed_seq_idx`` builds its ``seq_idx`` from ``cu_seqlens_q_padded`` and
    the row length. Where the installed ``PackedSeqParams`` defines ``total_tokens`` (later megatron-core)
    it is set to the physical tokens of the row, and ``seq_idx`` (where defined) to the ``[1, T]`` int32
    segment index of every token; the fields are looked up on the class, not inferred from a version.

    Raises:
        ValueError: a padded-layout batch (Megatron THD needs one row); ``multi_token_prediction=False`` for a
            batch marked ``multi_token_prediction=True`` (MTP's ``roll_tensor`` would mix documents).

    Example:
        >>> from packwise.assemble import assemble_pack
        >>> params = to_packed_seq_params(assemble_pack([{"input_ids": [1] * 5}, {"input_ids": [2] * 7}], alignment=4))
        >>> params["cu_seqlens_q"].tolist() if isinstance(params, dict) else params.cu_seqlens_q.tolist()
        [0, 5, 12]
    """
    if isinstance(batch, PackedSequence):  # every segment, the tail (a real length 0) included
        real, phys = batch.segments()
        device = batch.cu_seqlens.device
        cu = torch.from_numpy(np.concatenate([[0], np.cumsum(real)]).astype(np.int32)).to(device)
        cu_padded = torch.from_numpy(np.concatenate([[0], np.cumsum(phys)]).astype(np.int32)).to(device)
        longest = int(phys.max())
    else:
        if batch.get("layout") != "thd":
            raise ValueError("to_packed_seq_params needs a layout='thd' batch (one row) or a PackedSequence")
        cu, cu_padded = batch["cu_seqlens"], batch["cu_seqlens_padded"]
        longest = int(batch["max_length_q"])
    is_pack = isinstance(batch, PackedSequence)
    marked = batch.multi_token_prediction if is_pack else bool(batch.get("multi_token_prediction", False))
    if multi_token_prediction is False and marked:
        raise ValueError(
            "to_packed_seq_params(multi_token_prediction=False) on a batch built for Megatron MTP "
            "(multi_token_prediction=True in the batch): the real cu_seqlens would let MTP's roll_tensor roll a "
            "document's first token into the previous one's padding; drop the argument (the batch's mark is used)"
        )
    if multi_token_prediction or marked:
        cu = cu_padded
    elif int(cu[-1]) != int(cu_padded[-1]) and int(cu[-1]) != int(cu[-2]) and torch.equal(cu[:-1], cu_padded[:-1]):
        # Only the last segment is padded, and it is a real document. Transformer Engine <= 2.17 then infers
        # pad_between_seqs=False from cu_seqlens_q[:-1] == cu_seqlens_q_padded[:-1] and attends with the wrong
        # layout under THD context parallelism (TransformerEngine #3331). A zero-length segment (as a
        # fixed-width tail gives) tells TE that padding is there; it holds no token and changes no attention.
        cu = torch.cat([cu, cu[-1:]])
        cu_padded = torch.cat([cu_padded, cu_padded[-1:]])
    fields = {
        "qkv_format": "thd",
        "cu_seqlens_q": cu,
        "cu_seqlens_kv": cu,
        "cu_seqlens_q_padded": cu_padded,
        "cu_seqlens_kv_padded": cu_padded,
        "max_seqlen_q": longest,
        "max_seqlen_kv": longest,
    }
    try:
        from megatron.core.packed_seq_params import PackedSeqParams
    except ImportError:
        return fields
    return PackedSeqParams(**fields, **hybrid_fields(PackedSeqParams, cu_padded))


def hybrid_fields(params_class, cu_padded: torch.Tensor) -> dict:
    """``total_tokens`` / ``seq_idx`` for ``params_class`` — only the ones its dataclass fields define.

    ``total_tokens`` is the physical row length ``cu_padded[-1]`` (an int); ``seq_idx`` the ``[1, T]`` int32
    index of the segment each token lies in (Mamba's ``seq_idx``, the layout its kernels reset state on).

    Example:
        >>> import dataclasses, torch
        >>> @dataclasses.dataclass
        ... class Params:
        ...     total_tokens: int = None
        ...     seq_idx: torch.Tensor = None
        >>> out = hybrid_fields(Params, torch.tensor([0, 3, 5]))
        >>> out["total_tokens"], out["seq_idx"].tolist()
        (5, [[0, 0, 0, 1, 1]])
        >>> hybrid_fields(object, torch.tensor([0, 3, 5]))
        {}
    """
    names = {f.name for f in dataclasses.fields(params_class)} if dataclasses.is_dataclass(params_class) else set()
    out: dict = {}
    if "total_tokens" in names:
        out["total_tokens"] = int(cu_padded[-1])
    if "seq_idx" in names:
        lengths = cu_padded.diff().to(torch.int64)
        segments = torch.arange(lengths.numel(), device=cu_padded.device)
        out["seq_idx"] = torch.repeat_interleave(segments, lengths).to(torch.int32).unsqueeze(0)
    return out
