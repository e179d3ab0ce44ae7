"""Validation and concatenation of a pack's sequences: one pass over the sequences, cheap checks, then one
``torch.cat`` per column (what :func:`packwise.assemble.assemble_pack` builds on)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import cast

import numpy as np
import torch

from ._batch import MEDIA_KEYS, PRODUCED

#: TRL's loss masks (prompt-completion ``completion_mask``, ``assistant_only_loss`` ``assistant_masks``): read as
#: ``loss_mask`` (1 = the token is a target), as the offline pipeline does (``packwise.pipeline._tokens.TRL_MASKS``;
#: kept apart so assemble does not import the pipeline layer).
TRL_MASKS = ("completion_mask", "assistant_masks")
RESERVED = ("input_ids", "labels", "loss_mask", "position_ids", *TRL_MASKS, *MEDIA_KEYS)


def as_tensor(value, name: str, index: int) -> torch.Tensor:
    if isinstance(value, torch.Tensor):
        return value
    if isinstance(value, (np.ndarray, list, tuple)):
        try:
            arr = np.asarray(value)
        except (TypeError, ValueError, OverflowError) as e:
            what = (
                "is ragged (nested lists of different lengths)"
                if "inhomogeneous" in str(e)
                else f"is not numeric ({e})"
            )
            raise TypeError(
                f"sequence {index}: column {name!r} cannot become a tensor: it {what}; expected one number per token "
                "(L,) or (L, ...) of equal rows"
            ) from None
        if arr.dtype.kind not in "biuf":
            bad = next((v for v in arr.reshape(-1).tolist() if not isinstance(v, (bool, int, float))), arr.dtype)
            raise TypeError(
                f"sequence {index}: column {name!r} cannot become a tensor: it holds {bad!r} ({arr.dtype}); "
                "per-token columns hold numbers (token ids are integers)"
            )
        if arr.dtype == np.uint64 and arr.size and int(arr.max()) >= 2**63:
            raise TypeError(
                f"sequence {index}: column {name!r} cannot become a tensor: it holds {int(arr.max())}, beyond int64"
            )
        return torch.as_tensor(arr)
    raise TypeError(f"sequence {index}: column {name!r} is {type(value).__name__}, expected a tensor or array")


def _is_tensor_like(value) -> bool:
    return isinstance(value, (torch.Tensor, np.ndarray)) or (
        isinstance(value, (list, tuple)) and bool(value) and isinstance(value[0], (int, float, bool, list))
    )


@dataclass
class _Columns:
    lengths: list[int]
    ids: torch.Tensor | None
    labels: list[torch.Tensor | None]
    masks: list[torch.Tensor | None]
    positions: list[torch.Tensor | None]
    extra: dict[str, torch.Tensor]
    metadata: dict[str, list]
    device: torch.device
    media: dict[str, torch.Tensor] = field(default_factory=dict)
    labels_flat: torch.Tensor | None = None  # every row's labels, concatenated (flat input: no concatenation)
    dtypes: dict[str, set] = field(default_factory=dict)  # extra column -> its dtypes over the sequences (mixed)


def _names(seq: Mapping) -> list[str]:
    names = sorted(k for k, v in seq.items() if k not in RESERVED and v is not None and _is_tensor_like(v))
    clash = [n for n in names if n in PRODUCED]
    if clash:
        raise ValueError(f"column {clash[0]!r} is a name packwise produces; rename the column")
    return names


_NOT_IDS = frozenset({torch.float16, torch.bfloat16, torch.float32, torch.float64, torch.bool, torch.complex64,
                      torch.complex128})  # fmt: skip
_MEDIA = frozenset(MEDIA_KEYS)


def _collect(sequences: Sequence[Mapping]) -> _Columns:
    """Validate every sequence (one pass, cheap checks) and concatenate what can be concatenated.

    The loop is the hot path of ``assemble_pack`` (a few sequences per pack, thousands of packs per second):
    it reads each mapping once, and only sequences whose keys differ from sequence 0's pay for the
    per-key comparison."""
    for i, seq in enumerate(sequences):
        if not isinstance(seq, Mapping):
            raise TypeError(f"sequence {i} is a {type(seq).__name__}; pass a mapping with input_ids (and labels, ...)")
    first = sequences[0]
    names = _names(first)
    meta_keys = [k for k, v in first.items() if k not in RESERVED and v is not None and k not in names]
    first_keys = first.keys()
    media_keys = [k for k in MEDIA_KEYS if k in first_keys]
    lengths, labels, masks, positions = [], [], [], []
    ids_list: list[torch.Tensor] = []
    extra: dict[str, list] = {name: [] for name in names}
    metadata: dict[str, list] = {k: [] for k in meta_keys}
    media: dict[str, list] = {}
    device: torch.device | None = None
    Tensor = torch.Tensor
    for i, seq in enumerate(sequences):
        keys = first_keys
        if i and seq.keys() != first_keys:
            keys = seq.keys()
            seq_names = _names(seq)
            if seq_names != names:
                diff = sorted(set(names) ^ set(seq_names))
                raise ValueError(
                    f"sequence {i}: per-token columns {seq_names} differ from sequence 0's {names} "
                    f"(column {diff[0]!r}); a pack's sequences must carry the same columns "
                    "(collate_packs fills columns across packs)"
                )
            for key in keys - first_keys:
                if key not in RESERVED and seq[key] is not None and key not in names:
                    metadata.setdefault(key, [None] * i)
        ids = seq.get("input_ids")
        if ids is not None:
            if type(ids) is not Tensor and not isinstance(ids, Tensor):
                ids = as_tensor(ids, "input_ids", i)
            if ids.dim() != 1:
                raise ValueError(f"sequence {i}: input_ids has shape {tuple(ids.shape)}; expected (L,) — one sequence")
            if ids.dtype in _NOT_IDS and ids.numel():
                raise TypeError(f"sequence {i}: input_ids has dtype {ids.dtype}; token ids are integers")
        if i and (ids is not None) != bool(ids_list):
            raise ValueError(f"sequence {i}: input_ids present in some sequences but not others")
        lab = seq.get("labels")
        if lab is not None:
            if type(lab) is not Tensor and not isinstance(lab, Tensor):
                lab = as_tensor(lab, "labels", i)
            if lab.dim() != 1:
                lab = lab.reshape(-1)
            if lab.dtype in _NOT_IDS and lab.numel():
                raise TypeError(f"sequence {i}: labels has dtype {lab.dtype}; labels are token ids or -100 (integers)")
        ref = ids if ids is not None else lab
        if ref is None:
            raise ValueError(f"sequence {i}: needs input_ids (or labels when a stage carries no tokens)")
        length = ref.shape[0]
        if length == 0:
            raise ValueError(f"sequence {i} is empty (0 tokens); drop empty sequences before assembling")
        if device is None:
            device = ref.device
        elif ref.device != device:
            raise ValueError(
                f"sequence {i}: its tensors are on {ref.device} but sequence 0's are on {device}; move every "
                "sequence of a pack to one device (or keep them on the CPU and let the DataLoader pin them)"
            )
        if lab is not None and lab.shape[0] != length:
            raise ValueError(f"sequence {i}: column 'labels' has {lab.shape[0]} tokens but input_ids has {length}")
        mask = seq.get("loss_mask")  # with labels: a Megatron row (labels = text[1:]); see assemble._labels.row_labels
        trl = [k for k in TRL_MASKS if seq.get(k) is not None]
        if trl:
            if mask is not None or lab is not None:
                other = "loss_mask" if mask is not None else "labels"
                raise ValueError(
                    f"sequence {i}: carries {trl[0]} (TRL's loss mask) together with {other}: which one says where the "
                    f"loss is? Keep one (TRL lets labels win: drop {trl[0]}, or fold it into labels with -100)"
                )
            mask = seq[trl[0]]
            mask = mask if isinstance(mask, Tensor) else as_tensor(mask, trl[0], i)
            for k in trl[1:]:  # both: a target only where both masks say 1
                other_mask = seq[k] if isinstance(seq[k], Tensor) else as_tensor(seq[k], k, i)
                if other_mask.reshape(-1).shape != mask.reshape(-1).shape:
                    raise ValueError(f"sequence {i}: {k} and {trl[0]} differ in length")
                mask = mask.reshape(-1).bool() & other_mask.reshape(-1).bool()
        if mask is not None:
            mask = (mask if isinstance(mask, Tensor) else as_tensor(mask, "loss_mask", i)).reshape(-1)
            if mask.shape[0] != length:
                raise ValueError(
                    f"sequence {i}: column 'loss_mask' has {mask.shape[0]} tokens but input_ids has {length}"
                )
            if ids is None and lab is None:
                raise ValueError(f"sequence {i}: loss_mask without input_ids; pass labels instead")
        pos = seq.get("position_ids")
        if pos is not None:
            pos = pos if isinstance(pos, Tensor) else as_tensor(pos, "position_ids", i)
            if pos.dtype in _NOT_IDS and pos.numel():
                raise TypeError(f"sequence {i}: position_ids has dtype {pos.dtype}; positions are integers")
            if pos.dim() == 2 and pos.shape[0] == 1:
                pos = pos[0]
            if pos.dim() not in (1, 2) or pos.shape[-1] != length or (pos.dim() == 2 and pos.shape[0] != 3):
                raise ValueError(
                    f"sequence {i}: position_ids has shape {tuple(pos.shape)}; "
                    f"expected ({length},) or MRoPE (3, {length})"
                )
        lengths.append(length)
        if ids is not None:
            ids_list.append(ids)
        labels.append(lab)
        masks.append(mask)
        positions.append(pos)
        for name in names:
            col = seq[name]
            if not isinstance(col, Tensor):
                col = as_tensor(col, name, i)
            if col.dim() == 0 or col.shape[0] != length:
                got = col.shape[0] if col.dim() else "a scalar"
                raise ValueError(f"sequence {i}: column {name!r} has {got} tokens but input_ids has {length}")
            extra[name].append(col)
        for key in media_keys if keys is first_keys else [k for k in MEDIA_KEYS if k in keys]:
            value = seq[key]
            if value is not None:
                value = value if isinstance(value, Tensor) else as_tensor(value, key, i)
                media.setdefault(key, []).append(value)
        for key, values in metadata.items():
            values.append(seq.get(key))
    joined, mixed = {}, {}
    for name, chunks in extra.items():
        head = chunks[0]
        dtype, trailing = head.dtype, head.shape[1:]
        same = True
        for c in chunks:
            if c.dtype is not dtype or c.device != device:
                same = False
            if c.shape[1:] != trailing:
                shapes = sorted({tuple(x.shape[1:]) for x in chunks})
                raise ValueError(f"column {name!r}: per-token shapes differ across sequences: {shapes}")
        if not same:
            mixed[name] = {c.dtype for c in chunks}
            for c in chunks[1:]:
                dtype = torch.promote_types(dtype, c.dtype)
        joined[name] = torch.cat(chunks if same else [c.to(device=device, dtype=dtype) for c in chunks])
    ids_cat = None
    if ids_list:
        ids_cat = torch.cat(ids_list)  # a copy even of one sequence: the pack never aliases the caller's tensor
        if ids_cat.dtype != torch.int64 or ids_cat.device != device:
            ids_cat = ids_cat.to(device=device, dtype=torch.int64)
    media_cat = {k: torch.cat([t.to(device) for t in v]) for k, v in media.items()}
    on = cast(torch.device, device)  # set by sequence 0 (non-empty: sequences[0] is read above)
    return _Columns(lengths, ids_cat, labels, masks, positions, joined, metadata, on, media_cat, dtypes=mixed)


def flat_columns(columns: Mapping[str, torch.Tensor], lengths: list[int], metadata: dict[str, list]) -> _Columns:
    """:class:`_Columns` of ``N`` sequences given flat: every column ``(T, ...)`` with ``T = sum(lengths)``,
    ``input_ids`` and ``labels`` (HF) plus other per-token columns; no ``loss_mask``, positions or media (the
    rows of ``packwise pack`` output). The per-row label views share the flat tensor's memory."""
    other = sorted(set(columns) & set(RESERVED) - {"input_ids", "labels"})
    if other:
        raise ValueError(f"flat columns carry {other[0]!r}; pass the sequences to assemble_pack instead")
    ids, labels = columns.get("input_ids"), columns.get("labels")
    ref = ids if ids is not None else labels
    if ref is None:
        raise ValueError("flat columns need input_ids (or labels when a stage carries no tokens)")
    total = sum(lengths)
    if not lengths or min(lengths) < 1:
        raise ValueError(f"flat columns need N >= 1 sequences of >= 1 token, got lengths {list(lengths)}")
    names = _names(columns)
    for name in ("input_ids", "labels", *names):
        col = columns.get(name)
        if col is not None and (col.dim() == 0 or col.shape[0] != total):
            raise ValueError(f"column {name!r} has shape {tuple(col.shape)} but the sequences hold {total} tokens")
    if ids is not None and ids.dtype != torch.int64:
        ids = ids.to(torch.int64)
    n = len(lengths)
    return _Columns(
        list(lengths), ids, list(torch.split(labels, list(lengths))) if labels is not None else [None] * n,
        [None] * n, [None] * n, {k: columns[k] for k in names}, metadata, ref.device, labels_flat=labels,
    )  # fmt: skip


def validate_values(
    cols: _Columns, *, vocab_size: int | None = None, label_pad_id: int = -100, labels: torch.Tensor | None = None
) -> None:
    """Check token values once per column, vectorised over the whole pack (no per-sequence or per-token
    Python work; CPU tensors are checked through numpy views, whose calls cost less than torch's dispatch).

    - ``input_ids`` in ``[0, vocab_size)`` (``>= 0`` without a vocabulary size);
    - given ``labels``: ``-100``, ``label_pad_id`` or a token id in the same range;
    - given ``loss_mask``: only 0/1 (booleans, integers or floats equal to 0 or 1);
    - a per-token ``attention_mask``: only 1 (padded sequences are refused).

    The same rules ``packwise pack`` applies to pre-tokenized rows (``pipeline/_tokens.py``).

    Args:
        cols: what :func:`_collect` gathered.
        labels: the pack's ``(T,)`` assembled labels, when the caller has them (saves one concatenation);
            only checked when some sequence gave labels.

    Raises:
        ValueError: naming the sequence, the position in it, the value, the limit and the fix.
    """
    if cols.device.type == "meta":  # shape-only tensors (tracing): no values to check
        return
    lengths = cols.lengths
    if cols.ids is not None and cols.ids.numel():
        ids = _view(cols.ids)
        if int(ids.min()) < 0 or (vocab_size is not None and int(ids.max()) >= vocab_size):  # max only with a vocab
            limit = f"the vocabulary [0, {vocab_size})" if vocab_size is not None else "token ids >= 0"
            bad = (ids < 0) if vocab_size is None else ((ids < 0) | (ids >= vocab_size))
            seq, pos, value = _locate(bad, lengths, ids)
            raise ValueError(
                f"sequence {seq}: input_ids has {value} at position {pos}, outside {limit}; re-tokenize with the "
                "tokenizer the model uses (pad ids are added by assemble_pack, never passed in)"
            )
    owners = [j for j, lab in enumerate(cols.labels) if lab is not None]
    if owners:
        if labels is None:
            given = [lab for lab in cols.labels if lab is not None]  # the owners' labels, in order
            labels = torch.cat(given) if len(given) > 1 else given[0]
            owned = [lengths[j] for j in owners]
        else:
            owners, owned = list(range(len(lengths))), lengths
        lab = _view(labels)
        too_big = vocab_size is not None and int(lab.max()) >= vocab_size
        extra_pad = label_pad_id < 0 and label_pad_id != -100
        allowed = _count(lab == -100) + (_count(lab == label_pad_id) if extra_pad else 0)
        if too_big or _count(lab < 0) != allowed:  # a negative that is neither -100 nor the pad
            ok = (lab >= 0) if vocab_size is None else ((lab >= 0) & (lab < vocab_size))
            ok |= (lab == -100) | (lab == label_pad_id)
            if not bool(ok.all()):
                seq, pos, value = _locate(~ok, owned, lab)
                in_vocab = f" in [0, {vocab_size})" if vocab_size is not None else ""
                raise ValueError(
                    f"sequence {owners[seq]}: labels has {value} at position {pos}, neither -100 (no loss) nor a "
                    f"token id{in_vocab}; use -100 for tokens without loss"
                )
    pad = cols.extra.get("attention_mask")
    if pad is not None and pad.numel():
        p = _view(pad)
        if not (int(p.min()) == 1 and int(p.max()) == 1):
            seq, pos, value = _locate(p != 1, lengths, p)
            raise ValueError(
                f"sequence {seq}: attention_mask has {value} at position {pos}: padded sequences would be packed pads "
                "and all; pass unpadded sequences (input_ids[attention_mask == 1]) — PackedDataCollator and "
                "pack_dataset strip left/right padding for you"
            )
    masks = [m for m in cols.masks if m is not None]
    if masks:
        mask = _view(torch.cat(masks) if len(masks) > 1 else masks[0])
        kind = _kind(mask)
        if kind != "b" and mask.shape[0]:
            if kind in "iu":
                fine = int(mask.min()) >= 0 and int(mask.max()) <= 1
            else:
                fine = not bool(((mask != 0) & (mask != 1)).any())
            if not fine:
                owners = [j for j, m in enumerate(cols.masks) if m is not None]
                seq, pos, value = _locate((mask != 0) & (mask != 1), [lengths[j] for j in owners], mask)
                raise ValueError(
                    f"sequence {owners[seq]}: loss_mask has {value} at position {pos}; a loss mask holds only 0/1 "
                    "(or booleans) — for per-token loss weights use labels plus a weight column"
                )


def _count(mask) -> int:
    """True values of a boolean array or tensor."""
    return int(np.count_nonzero(mask)) if isinstance(mask, np.ndarray) else int(mask.sum())


def _kind(a) -> str:
    """numpy's dtype kind (``b``, ``i``, ``u``, ``f``) of an array or a tensor."""
    if isinstance(a, np.ndarray):
        return a.dtype.kind
    if a.dtype == torch.bool:
        return "b"
    return "f" if a.dtype.is_floating_point or a.dtype.is_complex else "i"


def _view(t: torch.Tensor):
    """A numpy view of a CPU tensor (no copy), else the tensor itself (both support the checks above)."""
    if t.device.type == "cpu" and not t.requires_grad and t.dtype is not torch.bfloat16:
        return t.numpy()
    return t


def _locate(bad, lengths: list[int], values) -> tuple[int, int, object]:
    """``(sequence, position in it, value)`` of the first True of ``bad`` over concatenated sequences."""
    bad = torch.as_tensor(bad).reshape(-1)
    first = int(torch.nonzero(bad)[0])
    ends = np.cumsum(lengths)
    seq = int(np.searchsorted(ends, first, side="right"))
    start = int(ends[seq - 1]) if seq else 0
    return seq, first - start, values.reshape(-1)[first].item()
