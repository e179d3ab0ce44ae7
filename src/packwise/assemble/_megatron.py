"""Megatron-core ``PackedSeqParams`` from a THD batch (``layout="thd"``) or a :class:`PackedSequence`."""

from __future__ import annotations

from ._pack import PackedSequence


def to_packed_seq_params(batch, *, multi_token_prediction: bool = False):
    """megatron-core's ``PackedSeqParams(qkv_format="thd", ...)``, or the same keys as a dict without it.

    ``cu_seqlens_q/kv`` are the real cumulative lengths and ``cu_seqlens_q/kv_padded`` the physical ones
    (Transformer Engine's convention when sequences are padded for CP/TP/FP8); ``max_seqlen_q/kv`` is the
    longest *physical* segment, an upper bound for the kernels, always a Python int (TE and CUDA graphs need
    an int; a batch's ``max_length_q`` may be a one-element tensor after a tensor-parallel broadcast).

    ``multi_token_prediction=True`` (``PackingConfig.consumer.multi_token_prediction``) sets
    ``cu_seqlens_q/kv`` to the physical boundaries too — NeMo-RL's layout. megatron-core's MTP
    ``roll_tensor`` slices the token row by ``cu_seqlens_q``; with alignment padding the real boundaries
    point into the wrong documents (measured: MTP loss 4.167337 instead of 4.155380), the physical ones roll
    each document within its own padded segment, whose padding carries no label and no loss mask. Attention
    is unchanged for the real tokens (padding follows them inside each causal segment); MoE layers need the
    batch's ``padding_mask`` then.

    Raises:
        ValueError: a padded-layout batch (Megatron THD needs one row).

    Example:
        >>> from packwise.assemble import assemble_pack
        >>> params = to_packed_seq_params(assemble_pack([{"input_ids": [1] * 5}, {"input_ids": [2] * 7}], alignment=4))
        >>> params["cu_seqlens_q"].tolist() if isinstance(params, dict) else params.cu_seqlens_q.tolist()
        [0, 5, 12]
    """
    if isinstance(batch, PackedSequence):
        cu, cu_padded = batch.cu_seqlens, batch.cu_seqlens_padded
        longest = max(batch.max_seqlen_padded, batch.tail)
    else:
        if batch.get("layout") != "thd":
            raise ValueError("to_packed_seq_params needs a layout='thd' batch (one row) or a PackedSequence")
        cu, cu_padded = batch["cu_seqlens"], batch["cu_seqlens_padded"]
        longest = int(batch["max_length_q"])
    if multi_token_prediction:
        cu = cu_padded
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
    return PackedSeqParams(**fields)
