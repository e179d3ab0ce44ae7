"""What ``PackedDataCollator`` takes: a feature (one tokenized sample, or one row of ``packwise pack`` output)
-> its sequences, with padding stripped and TRL's loss masks read as ``pack_dataset`` reads them."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np
import torch

from ...assemble import MEDIA_KEYS
from ...constants import PRODUCED
from ...pipeline import TRL_MASKS as _TRL_MASKS

_COLUMN_TYPES = (list, tuple, np.ndarray, torch.Tensor)  # a per-token column's value (not a scalar or a string)


def _sequences(feature: Mapping, index: int) -> list[dict]:
    """One feature -> its sequences: split by ``seq_lengths`` (a packed row) or the whole row.

    Padding (``attention_mask`` 0s around one contiguous run of 1s: left or right padding) is stripped, as
    ``pack_dataset`` does on read (:func:`packwise.pipeline._tokens.real_span`); 0s between real tokens are
    refused. TRL's loss masks (``completion_mask``, ``assistant_masks``) become the labels as ``pack_dataset``
    reads them (:data:`packwise.pipeline._tokens.TRL_MASKS`: 1 = target, several: a target in all); together
    with ``labels`` or ``loss_mask`` they are refused as ambiguous."""
    if not isinstance(feature, Mapping):
        raise TypeError(f"feature {index} is a {type(feature).__name__}; pass dict rows with input_ids")
    if feature.get("input_ids") is None:
        raise ValueError(f"feature {index} has no 'input_ids' or it is None (keys: {sorted(feature)})")
    if _empty(feature["input_ids"]):
        raise ValueError(
            f"feature {index} has no tokens (input_ids is empty): an empty row holds no document to pack. Drop "
            "empty rows before collating (dataset.filter(lambda r: len(r['input_ids']) > 0))"
        )
    clash = sorted(k for k in feature.keys() & set(PRODUCED) if isinstance(feature[k], _COLUMN_TYPES))
    if clash:  # as assemble_pack refuses it: the batch would hold packwise's value under the user's name
        raise ValueError(f"feature {index}: column {clash[0]!r} is a name packwise produces; rename the column")
    stray = next((k for k, v in feature.items() if v is not None and not _carried(k, v) and k not in _OWN), None)
    if stray is not None:  # a scalar or string: no value per token, so no place in the packed row
        raise ValueError(
            f"feature {index}: column {stray!r} holds {type(feature[stray]).__name__} {feature[stray]!r:.40}, not one "
            f"value per token: the packed batch has no place for it. Remove it (dataset.remove_columns([{stray!r}])) "
            f"or drop it by name: PackedDataCollator(drop_columns=({stray!r},)) (counted in .dropped_columns)"
        )
    cols = {k: _array(v, k, index) for k, v in feature.items() if _carried(k, v)}
    ids = cols["input_ids"].reshape(-1)
    if ids.dtype.kind not in "iu":
        raise TypeError(f"feature {index}: input_ids has dtype {ids.dtype}; token ids are integers")
    from ...constants import IGNORE_INDEX
    from ...pipeline import TRL_MASKS

    masks = [k for k in TRL_MASKS if feature.get(k) is not None]
    if masks:
        given = [k for k in ("labels", "loss_mask") if k in cols]
        if given:
            raise ValueError(
                f"feature {index} has {masks[0]!r} and {given[0]!r}: which tokens are targets is ambiguous; keep one "
                f"of them ({given[0]!r}, or {' + '.join(masks)} read as loss_mask: 1 = target)"
            )
        keep = np.ones(ids.shape[0], dtype=bool)
        for name in masks:
            m = _array(feature[name], name, index).reshape(-1)
            if m.shape[0] != ids.shape[0]:
                raise ValueError(f"feature {index}: {name} has {m.shape[0]} values but input_ids has {ids.shape[0]}")
            if not np.isin(m, (0, 1)).all():
                raise ValueError(f"feature {index}: {name} must hold only 0/1 (1 = the token is a target)")
            keep &= m.astype(bool)
        cols["labels"] = np.where(keep, ids.astype(np.int64), IGNORE_INDEX).reshape(cols["input_ids"].shape)
    mask, span = feature.get("attention_mask"), None
    if mask is not None:
        from ...pipeline import real_span

        m = _array(mask, "attention_mask", index).reshape(-1)
        if m.shape[0] != ids.shape[0]:
            raise ValueError(
                f"feature {index}: attention_mask has {m.shape[0]} values but input_ids has {ids.shape[0]}"
            )
        a, b = real_span(m, f"feature {index}")
        if b - a != ids.shape[0]:
            if feature.get("seq_lengths") is not None:
                raise ValueError(
                    f"feature {index} is a packed row (seq_lengths) with padding in its attention_mask; packed rows "
                    "carry no padding — drop the attention_mask column"
                )
            cols = {k: v[a:b] for k, v in cols.items()}
            ids = cols["input_ids"].reshape(-1)
            span = (a, b)
    lengths = feature.get("seq_lengths")
    pos = feature.get("position_ids")
    pos = None if pos is None else _array(pos, "position_ids", index)
    if pos is not None and span is not None:
        pos = pos[..., span[0] : span[1]]
    if lengths is None:
        seq = {k: torch.from_numpy(np.ascontiguousarray(v)) for k, v in cols.items()}
        if pos is not None:
            seq["position_ids"] = torch.from_numpy(np.ascontiguousarray(pos))
        for k in MEDIA_KEYS:
            if feature.get(k) is not None:
                seq[k] = torch.as_tensor(feature[k])
        return [seq]
    lengths = np.asarray(lengths, dtype=np.int64)
    if lengths.ndim != 1:  # [[3, 2]] sums right but splits once: the second document's tokens would vanish
        raise ValueError(
            f"feature {index}: seq_lengths has shape {tuple(lengths.shape)}; it must be 1-D (one length per document, "
            f"e.g. [3, 2]). Flatten it (a row's seq_lengths is a flat list of ints, not a nested list)"
        )
    if int(lengths.sum()) != ids.shape[0] or (lengths < 1).any():
        raise ValueError(
            f"feature {index}: seq_lengths {lengths.tolist()} must be positive and sum to its {ids.shape[0]} tokens"
        )
    odd = next((k for k, v in cols.items() if v.shape[0] != ids.shape[0]), None)
    if odd is not None:  # pack_dataset's source_index: one value per document, no place in the token row
        n, per_doc = cols[odd].shape[0], cols[odd].shape[0] == lengths.shape[0]
        raise ValueError(
            f"feature {index}: column {odd!r} of a packed row has {n} values"
            f"{' (one per document)' if per_doc else ''} for its {ids.shape[0]} tokens: it is not per token. Drop "
            f"it: PackedDataCollator(drop_columns=({odd!r},)) (counted) or dataset.remove_columns([{odd!r}])"
        )
    cuts = np.cumsum(lengths)[:-1]
    parts = {k: np.split(v, cuts) for k, v in cols.items()}
    if pos is not None:  # the row's own positions, per document (MRoPE (3, T): split along the tokens)
        if pos.shape[-1] != ids.shape[0]:
            raise ValueError(
                f"feature {index}: position_ids has {pos.shape[-1]} positions but input_ids has {ids.shape[0]}"
            )
        parts["position_ids"] = np.split(pos.reshape(-1) if pos.ndim == 2 and pos.shape[0] == 1 else pos, cuts, axis=-1)
    if any(feature.get(k) is not None for k in MEDIA_KEYS):
        media = sorted(k for k in MEDIA_KEYS if feature.get(k) is not None)
        raise ValueError(
            f"feature {index} is a packed row (seq_lengths) carrying {media[0]!r}: which document owns which image "
            "cannot be told from the row. Pack multimodal data with packwise (PackedParquetDataset) or pass one row "
            "per document"
        )
    return [{k: torch.from_numpy(np.ascontiguousarray(p[i])) for k, p in parts.items()} for i in range(len(lengths))]


#: Columns :func:`_sequences` reads itself (the others, per-token ones, are carried per document as they are).
_READ = frozenset({"attention_mask", "seq_lengths", "position_ids", *MEDIA_KEYS})
_OWN = _READ | frozenset(_TRL_MASKS)  # what the collator reads: not refused as a stray column


def _empty(ids) -> bool:
    """Whether an ``input_ids`` value holds no token (a ragged list is not empty: ``_array`` names it)."""
    if isinstance(ids, (torch.Tensor, np.ndarray)):
        return ids.size == 0 if isinstance(ids, np.ndarray) else ids.numel() == 0
    return isinstance(ids, (list, tuple)) and len(ids) == 0


def _carried(name: str, value) -> bool:
    """Whether a feature column travels per document: ``input_ids``, ``labels``, ``loss_mask`` and every other
    per-token column (``token_type_ids``, ``mm_token_type_ids``, ...); TRL masks, padding, positions and media
    are read separately, and scalars/strings (no value per token) are refused by :func:`_sequences`."""
    if value is None or name in _READ or name in _TRL_MASKS:
        return False
    return name in ("labels", "loss_mask") or isinstance(value, _COLUMN_TYPES)


def _split(feature: Mapping, index: int) -> list[dict]:
    """:func:`_sequences`, with the cause named when a truncating trainer or collator cut a pack short."""
    try:
        return _sequences(feature, index)
    except ValueError as e:
        lengths = feature.get("seq_lengths") if isinstance(feature, Mapping) else None
        ids: Any = feature.get("input_ids") if isinstance(feature, Mapping) else None  # whatever np.size takes
        try:
            total, n = int(np.asarray(lengths).sum()), int(np.size(ids))
        except (TypeError, ValueError):
            raise e from None
        if total <= n:
            raise
        raise ValueError(
            f"{e}: its documents hold {total} tokens but only {n} arrived — a truncating trainer or collator cut the "
            f"pack (TRL's SFTConfig(max_length=1024) is the default: SFTTrainer truncates every row to it). Fix: "
            f"SFTConfig(max_length=None), or pack with a capacity <= max_length"
        ) from None


def _array(value, name: str, index: int) -> np.ndarray:
    """A feature column as a numeric numpy array, or a TypeError naming the feature, column and value."""
    if isinstance(value, torch.Tensor):
        return value.detach().cpu().numpy()
    try:
        arr = np.asarray(value)
    except (TypeError, ValueError, OverflowError) as e:
        what = "is ragged (nested lists of different lengths)" if "inhomogeneous" in str(e) else f"is not numeric ({e})"
        raise TypeError(f"feature {index}: {name} {what}; expected one number per token") from None
    if arr.dtype.kind not in "biuf":
        bad = next((v for v in arr.reshape(-1).tolist() if not isinstance(v, (bool, int, float))), arr.dtype)
        raise TypeError(
            f"feature {index}: {name} holds {bad!r} ({arr.dtype}); token ids are integers — tokenize the text "
            "first (tokenizer(text)['input_ids'])"
        )
    return arr
