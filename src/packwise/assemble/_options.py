"""Checks of the assembly options shared by both paths (``assemble_pack`` + ``collate_packs`` and the fused
``assemble_batch``): the pad ids, ``position_offset`` and ``pad_values``, each refused by name with its value,
its limit and the fix, before any tensor is filled with them (a raw ``torch.full`` overflow names none)."""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping

import numpy as np
import torch

from ..constants import IGNORE_INDEX, PRODUCED
from ._batch import MEDIA_KEYS
from ._cp import as_int

_INT64 = (-(2**63), 2**63 - 1)
#: the most tokens of a pack, a row or a position offset: ``cu_seqlens`` are int32, so no row holds more
MAX_TOKENS = 2**31 - 1
#: ``pad_values`` keys packwise fills itself: a pad value for them would contradict the batch's own padding.
_OWN = frozenset(PRODUCED) | frozenset(MEDIA_KEYS) | {"position_ids", "tokens"}


def _integer(value) -> bool:
    return isinstance(value, (int, np.integer)) and not isinstance(value, (bool, np.bool_))


def check_int(value, option: str) -> None:
    """Refuse ``option=value`` unless it is an integer that fits int64 (the dtype of ids, labels, positions).

    Example:
        >>> check_int(1.5, "pad_token_id")
        Traceback (most recent call last):
        ...
        TypeError: pad_token_id=1.5 is a float; give an integer (a token id, label or position)
    """
    if not _integer(value):
        raise TypeError(
            f"{option}={value!r} is a {type(value).__name__}; give an integer (a token id, label or position)"
        )
    if not _INT64[0] <= int(value) <= _INT64[1]:
        raise ValueError(
            f"{option}={value} does not fit int64 [{_INT64[0]}, {_INT64[1]}] (the dtype of input_ids, labels and "
            f"position_ids); give a value in that range (a token id of the vocabulary)"
        )


def check_pad_token_id(value, vocab_size: int | None = None) -> None:
    """Refuse a ``pad_token_id`` that is no token id: not an int64 integer, negative (input ids of -1 are refused,
    so padding of -1 would be too), or ``>= vocab_size`` when the vocabulary size is given (an embedding lookup
    out of range).

    Example:
        >>> check_pad_token_id(-1)
        Traceback (most recent call last):
        ...
        ValueError: pad_token_id=-1 is negative; padding is a token id >= 0 (the tokenizer's pad_token_id, or 0)
        >>> check_pad_token_id(500, 100)  # doctest: +ELLIPSIS
        Traceback (most recent call last):
        ...
        ValueError: pad_token_id=500 is outside the vocabulary [0, 100); ...
    """
    check_int(value, "pad_token_id")
    if value < 0:
        raise ValueError(
            f"pad_token_id={value} is negative; padding is a token id >= 0 (the tokenizer's pad_token_id, or 0)"
        )
    if vocab_size is not None and value >= vocab_size:
        raise ValueError(
            f"pad_token_id={value} is outside the vocabulary [0, {vocab_size}); give a token id below vocab_size (the "
            "tokenizer's pad_token_id, or 0)"
        )


def check_tokens(value, option: str) -> None:
    """Refuse an integer size option (``pad_to``, ``alignment``, ``pad_to_multiple_of``) above
    :data:`MAX_TOKENS`, before any buffer is sized by it (a raw ``MemoryError`` or overflow names none).

    Example:
        >>> check_tokens(2**40, "pad_to")  # doctest: +ELLIPSIS
        Traceback (most recent call last):
        ...
        ValueError: pad_to=1099511627776 is more than 2147483647 tokens (cu_seqlens are int32, ...); give at most ...
    """
    if _integer(value) and int(value) > MAX_TOKENS:
        raise ValueError(
            f"{option}={value} is more than {MAX_TOKENS} tokens (cu_seqlens are int32, so no row holds more); give "
            f"at most {MAX_TOKENS} (a pack's capacity)"
        )


def check_position_offset(value) -> None:
    """Refuse a ``position_offset`` that is not an integer in ``[0, MAX_TOKENS]``.

    Positions index the model's position embeddings (or rotary angles): HF and Megatron count from 0,
    RoBERTa-style models from 2 (``padding_idx + 1``); a negative first position indexes nothing (an
    embedding lookup fails or reads from the table's end). A row holds at most :data:`MAX_TOKENS` tokens, so
    ``position_offset + position`` always fits int64 (a larger offset would wrap it silently).

    Example:
        >>> check_position_offset(-1)  # doctest: +ELLIPSIS
        Traceback (most recent call last):
        ...
        ValueError: position_offset=-1 is outside [0, 2147483647]: ...; a negative position indexes nothing; give ...
    """
    check_int(value, "position_offset")
    if not 0 <= int(value) <= MAX_TOKENS:
        raise ValueError(
            f"position_offset={value} is outside [0, {MAX_TOKENS}]: positions index the model's position table, "
            "which starts at 0 (HF, Megatron; 2 for RoBERTa-style models); "
            + (
                "a negative position indexes nothing"
                if value < 0
                else "no model has that many positions (and position_offset + a position must fit int64)"
            )
            + "; give the model's first position (0 unless it says otherwise)"
        )


def check_pad_values(pad_values: Mapping | None, pad_token_id: int) -> dict:
    """The ``pad_values`` mapping as a dict, refused when it sets what packwise pads itself.

    ``labels`` may only be -100 (padding must never be a target: a label pad would train on it);
    ``input_ids`` only ``pad_token_id`` (set that instead); ``loss_mask`` only 0; the names packwise produces
    (``padding_mask``, ``position_ids``, ``seq_idx``, ...) and media not at all. Every value is a number.

    Raises:
        TypeError: not a mapping, a value that is not a number. ValueError: the keys above.
    """
    if pad_values is None:
        return {}
    if not isinstance(pad_values, Mapping):
        raise TypeError(f"pad_values is a {type(pad_values).__name__}; give a mapping column name -> pad value")
    for name, value in pad_values.items():
        if not isinstance(value, (int, float, np.integer, np.floating, np.bool_)):
            raise TypeError(
                f"pad_values[{name!r}]={value!r} is a {type(value).__name__}; a pad value is a number "
                "(int, float, bool)"
            )
        if name == "labels" and value != IGNORE_INDEX:
            raise ValueError(
                f"pad_values['labels']={value!r}: padding labels are always {IGNORE_INDEX} (no loss), a label pad "
                f"would train the model on padding; drop 'labels' from pad_values (label_pad_id sets the label of "
                "alignment padding and boundaries)"
            )
        if name == "input_ids" and value != pad_token_id:
            raise ValueError(
                f"pad_values['input_ids']={value!r} differs from pad_token_id={pad_token_id!r}; input_ids padding is "
                f"pad_token_id: pass pad_token_id={value!r} and drop 'input_ids' from pad_values"
            )
        if name == "loss_mask" and value != 0:
            raise ValueError(
                f"pad_values['loss_mask']={value!r}: padding never carries loss (loss_mask 0); drop 'loss_mask' from "
                "pad_values"
            )
        if name in _OWN:
            raise ValueError(
                f"pad_values[{name!r}]={value!r}: packwise produces {name!r} and pads it itself; drop {name!r} from "
                "pad_values"
            )
    return dict(pad_values)


#: ``pad_values`` keys :func:`check_pad_values` accepts as no-ops (the value packwise pads them with anyway).
SET_BY_OPTION = frozenset({"input_ids", "labels", "loss_mask"})


def check_pad_columns(pad_values: Mapping, columns: Iterable[str]) -> None:
    """Refuse a ``pad_values`` key that names no column of the packs (a typo such as ``"wieght"`` would pad
    nothing, and the real column would be padded with 0).

    Example:
        >>> check_pad_columns({"wieght": 1.0}, ["weight"])
        Traceback (most recent call last):
        ...
        ValueError: pad_values names 'wieght', which no sequence carries (columns: ['weight']); fix the name or drop it
    """
    names = set(columns)
    stray = sorted(set(pad_values) - names - SET_BY_OPTION)
    if stray:
        raise ValueError(
            f"pad_values names {stray[0]!r}, which no sequence carries (columns: {sorted(names)}); fix the name or "
            "drop it"
        )


def check_fill(value, dtype: torch.dtype, name: str) -> None:
    """Refuse ``pad_values[name]=value`` when the column's ``dtype`` cannot hold it exactly: an integer
    column takes integers in its range, a bool column 0/1, a float column values within its finite range
    (or inf/nan)."""
    if dtype.is_complex:
        return
    fix = f"give a pad value the column holds, or store {name!r} in a wider dtype"
    if dtype == torch.bool:
        if value not in (0, 1):
            raise ValueError(
                f"pad_values[{name!r}]={value!r} does not fit column {name!r} of dtype bool (0 or 1); {fix}"
            )
        return
    if dtype.is_floating_point:
        top = torch.finfo(dtype).max
        finite = not isinstance(value, (float, np.floating)) or math.isfinite(value)  # (an int of any size is)
        if finite and abs(value) > top:
            raise ValueError(
                f"pad_values[{name!r}]={value!r} does not fit column {name!r} of dtype {dtype} [{-top}, {top}]; {fix}"
            )
        if _integer(value) and not _INT64[0] <= int(value) <= _INT64[1]:
            raise ValueError(
                f"pad_values[{name!r}]={value!r} is an integer beyond int64, which torch cannot fill column {name!r} "
                f"of dtype {dtype} with; give it as a float (pad_values[{name!r}]={float(value)!r})"
            )
        return
    info = torch.iinfo(dtype)
    integral = _integer(value) or isinstance(value, bool) or (math.isfinite(value) and float(value).is_integer())
    if not integral or not info.min <= int(value) <= info.max:
        raise ValueError(
            f"pad_values[{name!r}]={value!r} does not fit column {name!r} of dtype {dtype} (integers in "
            f"[{info.min}, {info.max}]); {fix}"
        )


def check_options(
    *, pad_token_id, label_pad_id, position_offset, pad_values, pad_to=None, alignment=1, vocab_size=None
) -> dict:
    """Every option check of ``assemble_pack`` (the fused path runs the same): the checked ``pad_values``."""
    check_tokens(pad_to, "pad_to")
    check_tokens(alignment, "alignment")
    check_pad_token_id(pad_token_id, vocab_size)
    check_int(label_pad_id, "label_pad_id")
    if label_pad_id >= 0:  # a token id: boundary and alignment labels would become targets
        raise ValueError(
            f"label_pad_id={label_pad_id} is a token id, so the labels at document boundaries and in alignment "
            "padding would be trained on; use a negative ignore index (-100, the default, as HF and PyTorch's "
            "cross_entropy ignore)"
        )
    check_position_offset(position_offset)
    return check_pad_values(pad_values, pad_token_id)


_LOW, _HIGH = _INT64


def plain_options(pad_token_id, label_pad_id, position_offset, pad_values) -> bool:
    """Whether :func:`check_options` would accept these options and return ``{}`` — Python ints within int64
    (``position_offset`` in ``[0, MAX_TOKENS]``, ``pad_token_id >= 0``), a negative ``label_pad_id``, no
    ``pad_values`` — decided in a few comparisons (the fused path's per-batch fast check; anything else goes
    through :func:`check_options`).

    Example:
        >>> plain_options(0, -100, 0, None), plain_options(0, 5, 0, None), plain_options(0, -100, 0, {})
        (True, False, False)
    """
    return (
        pad_values is None
        and type(pad_token_id) is int
        and type(label_pad_id) is int
        and type(position_offset) is int
        and 0 <= pad_token_id <= _HIGH
        and _LOW <= label_pad_id < 0
        and 0 <= position_offset <= MAX_TOKENS
    )


def positive_int(value, name: str) -> int:
    """``value`` as a Python int >= 1 (an int or numpy integer, not a bool), else ValueError naming ``name``."""
    n = as_int(value)
    if n is None or n < 1:
        raise ValueError(f"{name} must be an integer >= 1, got {value!r}")
    return n
