"""``assemble_batch``: sequences of P packs -> one batch, every column written once.

The two-step path (:func:`~packwise.assemble.assemble_pack` per pack, then
:func:`~packwise.assemble.collate_packs`) validates every sequence in a Python loop and copies every column
twice. This path validates once per *column* over the whole batch (one list comparison of lengths, one
dtype set; dimensions on the concatenation; values in one pass, :mod:`._fused_checks`) and writes each
column straight into the batch tensor; the generated columns (positions, ``seq_idx``, padding mask,
``cu_seqlens``) come from a dozen numpy calls over the batch's segment lengths (:mod:`._fused_layout`).
The two-step path's refusals (float or bool ids/labels, negative ids, labels neither -100, the pad nor a
token id, Megatron-looking ``labels``-only rows, a padded ``attention_mask``) all leave this path for it.

It covers the common case — THD layout, tensors of one device, the same keys in every sequence, no
``loss_mask``, ``position_ids``, media or metadata. Anything else goes through the two-step path, whose
output this path reproduces bit for bit (tests compare both, hypothesis included); invalid input is
always reported by the two-step path's validation, with its messages.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from functools import partial, reduce
from itertools import chain
from operator import attrgetter, itemgetter
from typing import Any, cast

import numpy as np
import torch

from ..constants import IGNORE_INDEX
from ._batch import PackedBatch
from ._collate import Layout, collate_packs
from ._columns import PRODUCED, RESERVED
from ._fused_checks import labels_refused, mask_refused, rows_look_shifted
from ._fused_layout import padded_layout, plain_layout
from ._options import MAX_TOKENS, SET_BY_OPTION, check_fill, check_options, plain_options
from ._pack import assemble_pack
from ._static import pad_segments

_NOT_IDS = frozenset({torch.float16, torch.bfloat16, torch.float32, torch.float64, torch.bool, torch.complex64,
                      torch.complex128})  # fmt: skip
_ROW_KEYS = frozenset({"input_ids", "labels"})
_UNSUPPORTED = frozenset(RESERVED) - _ROW_KEYS  # loss_mask, position_ids, media: two-step path
_BLOCKED = _UNSUPPORTED | frozenset(PRODUCED)  # ... and the names packwise produces: the two-step path refuses them


def assemble_batch(
    packs: Sequence[Sequence[Mapping]],
    *,
    layout: Layout = "thd",
    pad_to: int | None = None,
    alignment: int = 1,
    pad_token_id: int = 0,
    label_pad_id: int = IGNORE_INDEX,
    pad_values: Mapping[str, float] | None = None,
    labels_shifted: bool = False,
    position_offset: int = 0,
    pad_to_multiple_of: int = 1,
    max_segments: int | None = None,
) -> PackedBatch:
    """Assemble P packs of sequences into one training batch in a single pass.

    Equal, key for key and bit for bit, to
    ``collate_packs([assemble_pack(p, **pack_opts) for p in packs], layout=..., pad_to_multiple_of=...,
    pad_values=..., pad_token_id=...)`` — see those functions for every argument, the output keys, their
    shapes and dtypes, and the errors.

    Args:
        packs: P lists of sequences (mappings with ``input_ids (L,)`` and optional ``labels (L,)`` and
            per-token columns ``(L, ...)``); a plan's packs, e.g. ``[[samples[i] for i in p] for p in
            plan.packs()[a:b]]``; any other iterable (a generator) is read once, into a list.
        layout, pad_to_multiple_of, max_segments: as :func:`collate_packs`.
        pad_to, alignment, pad_token_id, label_pad_id, pad_values, labels_shifted, position_offset: as
            :func:`assemble_pack` (``pad_values`` and ``pad_token_id`` also as :func:`collate_packs`).

    Returns:
        The batch dict of :func:`collate_packs`: ``input_ids``, ``labels``, ``position_ids``,
        ``padding_mask``, ``seq_idx`` ``[1, T]`` (thd), ``cu_seqlens`` ``(M+1,)`` int32, ...

    Raises:
        ValueError, TypeError: as :func:`assemble_pack` and :func:`collate_packs` — the same refusal, with the same
            message (row-shaped ``(1, L)`` columns, pad values outside a column's dtype or for what packwise pads
            itself, non-integer pad ids and offsets ...). TypeError: ``packs`` not iterable.

    Example:
        >>> b = assemble_batch([[{"input_ids": torch.tensor([1, 2, 3])}], [{"input_ids": torch.tensor([4, 5])}]])
        >>> b["input_ids"].tolist(), b["labels"].tolist(), b["position_ids"].tolist(), b["cu_seqlens"].tolist()
        ([[1, 2, 3, 4, 5]], [[-100, 2, 3, -100, 5]], [[0, 1, 2, 0, 1]], [0, 3, 5])
    """
    if type(packs) is not list and not isinstance(packs, Sequence):  # a generator: read once, for both paths
        try:
            packs = list(packs)
        except TypeError:
            raise TypeError(
                f"packs is a {type(packs).__name__}; pass a sequence of packs (each a list of sequence mappings)"
            ) from None
    out = None
    # the fast path covers HF rows in the HF convention; Megatron rows (labels + loss_mask) and the shifted output
    # convention take the two-step path, which converts them losslessly or refuses (assemble._labels.row_labels)
    if layout == "thd" and not labels_shifted:
        try:
            out = _fast_thd(
                packs, pad_to, alignment, pad_token_id, label_pad_id, pad_values, position_offset, pad_to_multiple_of
            )
        except (AttributeError, TypeError, ValueError, RuntimeError, IndexError, KeyError, OverflowError):
            out = None  # not the common case (lists, arrays, mixed devices...): the two-step path decides
    if out is not None:
        return cast(
            "PackedBatch", pad_segments(out, max_segments)
        )  # PackedBatch: its fixed keys plus the rows' own columns (TypedDict cannot declare extra keys)
    opts: dict[str, Any] = dict(
        pad_to=pad_to, alignment=alignment, pad_token_id=pad_token_id, label_pad_id=label_pad_id,
        pad_values=pad_values, labels_shifted=labels_shifted, position_offset=position_offset,
    )  # fmt: skip
    return collate_packs(  # (each pack gets the pad values of its own columns; collate_packs checks them all)
        [assemble_pack(p, **{**opts, "pad_values": _own(pad_values, p)}) for p in packs],
        layout=layout,
        pad_to_multiple_of=pad_to_multiple_of,
        pad_values=pad_values,
        pad_token_id=pad_token_id,
        max_segments=max_segments,
    )


def _own(pad_values, sequences) -> Mapping | None:
    """The ``pad_values`` entries for columns some of ``sequences`` carry (a mapping and a list; anything else
    as given: :func:`check_pad_values` names it). Another pack of the batch may carry the rest."""
    if not isinstance(pad_values, Mapping) or not isinstance(sequences, (list, tuple)):
        return pad_values
    seqs = [s for s in sequences if isinstance(s, Mapping)]
    return {k: v for k, v in pad_values.items() if k in SET_BY_OPTION or any(k in s for s in seqs)}


def _is_int(x) -> bool:
    return isinstance(x, int) and not isinstance(x, bool)


def _fast_thd(packs, pad_to, alignment, pad_token_id, label_pad_id, pad_values, offset, multiple):
    """The batch (in ``collate_packs``' key order), or None when the input is outside the common case or the
    two-step path would refuse it (the caller then takes the two-step path, which decides and names it).

    Every check runs once per column over the whole batch, through C-level ``map``s: key sets (one list
    comparison), dimensions and lengths (one set, one list comparison against ``input_ids``'), dtypes
    (one set); values in one or two vectorised passes (:mod:`._fused_checks`)."""
    if not packs or not _is_int(alignment) or not 1 <= alignment <= MAX_TOKENS:
        return None
    if not _is_int(multiple) or not 1 <= multiple <= MAX_TOKENS:
        return None  # (sizes beyond MAX_TOKENS: the two-step path refuses them by name, before any buffer)
    if pad_to is not None and (not _is_int(pad_to) or pad_to > MAX_TOKENS):
        return None
    # the option checks of assemble_pack (the common options in a few comparisons): a refusal (ValueError,
    # TypeError) sends the batch to the two-step path
    if plain_options(pad_token_id, label_pad_id, offset, pad_values):
        pad_values = {}
    else:
        pad_values = check_options(
            pad_token_id=pad_token_id, label_pad_id=label_pad_id, position_offset=offset, pad_values=pad_values
        )
    sizes = list(map(len, packs))
    seqs = list(chain.from_iterable(packs))
    if not seqs or min(sizes) == 0:
        return None
    keys = dict.keys(seqs[0])  # TypeError for a non-dict: the two-step path names it
    if "input_ids" not in keys or set(map(len, seqs)) != {len(keys)}:
        return None  # (as many keys in every sequence, and each of sequence 0's is read from all: the same keys)
    names = sorted(keys - _ROW_KEYS)
    if not pad_values.keys() <= SET_BY_OPTION.union(names):
        return None  # a pad value for a column no sequence carries: the two-step path names it
    if not _BLOCKED.isdisjoint(names):
        return None
    # -- validation, once per column over the whole batch ------------------------------------------------
    # (Tensor.numel/dtype through map: TypeError for lists and arrays, whom the two-step path converts; the
    # dimensions are checked on each concatenation: a mix raises, and 2-D sequences give a 2-D column)
    order = ["input_ids", "labels", *names] if "labels" in keys else ["input_ids", *names]
    # each column's tensors (KeyError: a sequence lacks one of sequence 0's keys); a map per column makes one
    # list each, where one pass and a transposition would make a tuple per sequence for the collector to scan
    cols = [list(map(itemgetter(name), seqs)) for name in order]
    ids = cols[0]
    lens_list = list(map(_NUMEL, ids))
    if min(lens_list) < 1:
        return None  # a 0-token sequence: the two-step path names it
    dtypes = {}
    for name, col in zip(order, cols):
        if col is not ids and list(map(_NUMEL, col)) != lens_list:
            return None  # lengths that differ (or trailing dimensions): the two-step path names them
        if name in _ROW_KEYS:
            dtypes[name] = set(map(_DTYPE, col))
        elif name in pad_values:  # (a side column's dtypes matter only for its pad value; a mix concatenates to
            # the promoted dtype, as the two-step path's two concatenations do, padding included)
            for dtype in dtypes.setdefault(name, set(map(_DTYPE, col))):  # as assemble_pack: the pad value fits
                check_fill(pad_values[name], dtype, name)  # the column in every sequence
    cols = dict(zip(order, cols))
    if not dtypes["input_ids"].isdisjoint(_NOT_IDS) or not dtypes.get("labels", _EMPTY).isdisjoint(_NOT_IDS):
        return None  # float or bool ids/labels: the two-step path refuses them
    first = ids[0]
    cpu = first.is_cpu
    device = first.device
    if alignment == 1 and pad_to is None:
        lay = plain_layout(sizes, lens_list, multiple)
    else:
        lay = padded_layout(sizes, lens_list, pad_to, alignment, multiple)
        if lay is None:
            return None  # a pack longer than pad_to: the two-step path raises with the numbers
    total, width, extra, dst = lay.total, lay.width, lay.extra, lay.dst
    if dst is not None and not cpu:
        dst = dst.to(device)
    # a side column of several dtypes: assemble_pack fills each pack's padding in the pack's dtype, before
    # collate_packs promotes; a pad value that a narrower dtype rounds (0.1 in float32) takes the two-step path
    if (lay.padded or extra) and not all(_fill_exact(pad_values[n], dtypes[n]) for n in names if n in pad_values):
        return None

    def place(chunks: list, name: str, fill, dtype: torch.dtype | None) -> torch.Tensor:
        """One column of the row: the sequences' chunks, concatenated once, padding included."""
        kinds = dtypes.get(name)
        if dst is None and (kinds is None or (len(kinds) == 1 and (dtype is None or dtype in kinds))):
            if extra:  # the batch padding joins the one concatenation
                chunks = [*chunks, torch.full((extra,), fill, dtype=chunks[0].dtype, device=device)]
            out = torch.cat(chunks)
            if out.device != device:  # (a mix within the column makes cat raise)
                raise ValueError(name)  # another device than input_ids': the two-step path names it
        else:
            values = torch.cat(chunks)
            if values.device != device:  # (copied into the row, a meta tensor would leave zeros)
                raise ValueError(name)
            if values.shape[0] != (total if dst is None else dst.shape[0]):  # row-shaped (1, L) sequences: never
                # broadcast into the row
                raise ValueError(name)
            if dtype is not None and values.dtype != dtype:
                values = values.to(dtype)
            if dst is None and not extra:
                return values
            out = torch.full((width, *values.shape[1:]), fill, dtype=values.dtype, device=device)
            if dst is None:
                out[:total] = values
            else:
                out[dst] = values
        if out.shape[0] != width:
            raise ValueError(name)  # (1, L) sequences: the two-step path names them
        return out

    # -- columns: each written once ------------------------------------------------------------------------
    input_ids = place(ids, "input_ids", pad_token_id, torch.int64)
    if input_ids.dim() != 1:
        return None  # (1, L) or (L, k) sequences: the two-step path names them
    seq_start = lay.seq_start
    if cpu:
        ids_np = input_ids.numpy()
        if int(_MIN(ids_np)) < 0:
            return None  # a negative id: the two-step path names it (assemble_pack's validate_values)
        if "labels" in cols and width > 1:  # the label-convention probe: each row's second-to-last position
            probe = lay.seq_stop - 2
            nxt = ids_np[1:][probe]  # (gathered while ids is in cache; the row's last token)
        else:
            probe = nxt = None  # (one 1-token row: no target, rows_look_shifted stops at once)
    elif int(input_ids.min()) < 0:
        return None
    negative = False
    if "labels" in cols:
        labels = place(cols["labels"], "labels", IGNORE_INDEX if dst is None else label_pad_id, torch.int64)
        if labels.dim() != 1:
            return None  # (the two-step path flattens such labels)
        if cpu:
            lab_np = labels.numpy()
            got = None if probe is None else lab_np[probe]  # (right after the copy, while it is in cache)
            low = int(_MIN(lab_np[:total] if extra else lab_np))
            negative = low < 0  # none (random labels): masking adds only the pad; HF labels hold -100
            if rows_look_shifted(lab_np, ids_np, seq_start, lay.seq_stop, label_pad_id, nxt, got):
                return None  # the two-step path refuses it, naming the sequence and the fix
        else:
            negative = True
    else:
        labels = input_ids.clone()
        if lay.padded or extra:
            labels[torch.from_numpy(lay.pad_mask).to(device)] = label_pad_id
        if cpu:
            lab_np = labels.numpy()
    if cpu:
        lab_np[seq_start] = label_pad_id  # the boundaries
        if extra:
            lab_np[total:] = IGNORE_INDEX
    else:
        labels[torch.from_numpy(seq_start).to(device)] = label_pad_id
        if extra:
            labels[total:] = IGNORE_INDEX
    if negative:
        if labels_refused(lab_np if cpu else labels, label_pad_id, low if cpu else None):
            return None  # a negative label other than -100 and the pad: the two-step path names it
        if not cpu and bool(((labels != label_pad_id) & (labels != input_ids)).any()):
            return None  # labels that are not their own tokens: the two-step path checks their convention
    positions = lay.positions
    if offset:
        positions += offset
        if extra:
            positions[total:] -= offset  # collate_packs' batch padding counts from 0
    row = _row if cpu else partial(_row_on, device=device)
    batch = {"labels": labels[None], "position_ids": row(positions), "padding_mask": row(lay.pad_mask)}
    for name in names:
        column = place(cols[name], name, pad_values.get(name, 0), None)
        if column.dim() != 1:
            return None  # per-token (L, k) columns: the two-step path pads them
        if name == "attention_mask" and mask_refused(column[:total] if dst is None else column[dst]):
            return None  # padded sequences: the two-step path refuses them
        batch[name] = column[None]
    cu_padded = _from(lay.cu_padded) if cpu else _from(lay.cu_padded).to(device)
    batch.update(
        seq_idx=row(lay.seq_idx),
        cu_seqlens=_from(lay.cu_real) if cpu else _from(lay.cu_real).to(device),
        cu_seqlens_padded=cu_padded,
        cu_seq_lens_q=cu_padded,
        cu_seq_lens_k=cu_padded,
        max_length_q=lay.longest,
        max_length_k=lay.longest,
        max_seqlen=max(lens_list),
        max_seqlen_padded=lay.longest_aligned,
        num_sequences=_from(np.array(sizes, dtype=np.int32)),
        cu_pack_tokens=_from(lay.pack_tokens),
        total_tokens=width,
        layout="thd",
        input_ids=input_ids[None],
        labels_shifted=False,
    )
    return batch


_NUMEL = torch.Tensor.numel
_DTYPE = attrgetter("dtype")
_EMPTY: frozenset[torch.dtype] = frozenset()
_MIN = np.minimum.reduce
_from = torch.from_numpy


def _fill_exact(value, kinds: set) -> bool:
    """Whether ``value`` filled in each of the dtypes ``kinds`` and then promoted is, bit for bit, ``value``
    filled in the promoted dtype (always so for one dtype)."""
    if len(kinds) == 1:
        return True
    wide = reduce(torch.promote_types, kinds)
    want = torch.tensor(value, dtype=wide)
    return all(torch.equal(torch.tensor(value, dtype=k).to(wide).view(-1).view(torch.uint8),
                           want.view(-1).view(torch.uint8)) for k in kinds)  # fmt: skip


def _row(a: np.ndarray) -> torch.Tensor:
    """``(T,)`` array -> ``[1, T]`` CPU tensor sharing its memory."""
    return _from(a[None])


def _row_on(a: np.ndarray, device: torch.device) -> torch.Tensor:
    return _from(a[None]).to(device)
