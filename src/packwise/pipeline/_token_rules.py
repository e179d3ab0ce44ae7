"""The rules every pre-tokenized row follows, on both read paths (row by row and column by column): reserved
and output column names, the id range, labels that are -100 or a token id, HF padding (:func:`real_span`)."""

from __future__ import annotations

import numpy as np

from ..constants import IGNORE_INDEX, PRODUCED
from ..files import BadRow

#: TRL's tokenized loss masks, read as ``loss_mask`` (1 = the token is a target; several in one row: a target in
#: all of them): ``completion_mask`` (prompt-completion data) and ``assistant_masks`` (``assistant_only_loss``).
#: Source: trl 1.16 ``SFTTrainer._prepare_dataset`` (builds labels from them, then drops them).
TRL_MASKS = ("completion_mask", "assistant_masks")


RESERVED = ("input_ids", "labels", "loss_mask", *TRL_MASKS)


#: Columns packwise writes; an input holding them is probably packed already and would be corrupted.
OUTPUT_COLUMNS = (
    "seq_lengths", "source_index", "image_paths", "image_sha256", "image_grid_thw", "images_per_sequence",
    "audio_paths", "audio_frames", "audios_per_sequence", "video_paths", "video_grid_thw", "second_per_grid_ts",
    "videos_per_sequence",
)  # fmt: skip


ID_LIMIT = 2**31


#: HF's padding column: 1 = real token, 0 = padding (stripped on read, see the module docstring).
PAD_MASK = "attention_mask"


def real_span(mask, where: str, field: str = PAD_MASK) -> tuple[int, int]:
    """``(start, end)`` of the one contiguous run of 1s of an ``attention_mask`` (the real tokens).

    Raises:
        BadRow: values other than 0/1, no 1 at all, or 0s between 1s (not left/right padding).

    Example:
        >>> real_span([0, 0, 1, 1, 1], "row 0"), real_span([1, 1, 0], "row 1")
        ((2, 5), (0, 2))
    """
    m = np.asarray(mask).reshape(-1)
    if m.dtype.kind not in "biuf" or not np.isin(m, (0, 1)).all():
        raise BadRow(where, field, "must hold only 0/1 (1 = real token, 0 = padding)", "fix or drop the column")
    ones = np.flatnonzero(m)
    if ones.size == 0:
        raise BadRow(where, field, "is all zeros (no real token)", "drop the row or fix its attention_mask")
    start, end = int(ones[0]), int(ones[-1]) + 1
    if ones.size != end - start:
        gap = int(np.flatnonzero(m[start:end] == 0)[0]) + start
        raise BadRow(
            where, field, f"has a 0 at position {gap} between real tokens ({start}..{end - 1}): not left or right "
            "padding, so which tokens are real is ambiguous",
            "remove the masked tokens yourself (packwise strips only contiguous padding) or drop the column",
        )  # fmt: skip
    return start, end


def _reserved(names, where: str) -> None:
    clash = sorted(set(names) & set(OUTPUT_COLUMNS))
    if clash:
        raise BadRow(
            where, clash[0], "is a column packwise writes (is this already packed data?)",
            "pack the original samples, or rename/drop the column",
        )  # fmt: skip


def _not_produced(names, where: str) -> None:
    """A per-token column may not take a name packwise produces (``cu_seqlens``, ...): the packed batch would
    hold packwise's value under the user's name (one definition: :data:`packwise.constants.PRODUCED`)."""
    clash = sorted(set(names) & set(PRODUCED))
    if clash:
        raise BadRow(where, clash[0], "is a name packwise produces", "rename the column")


def _check_vocab(ids: np.ndarray, vocab_size: int | None, where: str) -> None:
    limit = ID_LIMIT if vocab_size is None else vocab_size
    bad = np.flatnonzero((ids < 0) | (ids >= limit))
    if bad.size:
        p = int(bad[0])
        what = f"the vocabulary [0, {vocab_size})" if vocab_size is not None else f"int32 token ids [0, {limit})"
        raise BadRow(
            where, "input_ids", f"has token id {int(ids[p])} at position {p} outside {what}",
            "re-tokenize with the tokenizer you pass, or pass the tokenizer the ids came from",
        )  # fmt: skip


def _check_labels(labels: np.ndarray, where: str) -> None:
    bad = np.flatnonzero((labels != IGNORE_INDEX) & ((labels < 0) | (labels >= ID_LIMIT)))
    if bad.size:
        p = int(bad[0])
        raise BadRow(
            where, "labels", f"has {int(labels[p])} at position {p}, neither {IGNORE_INDEX} (no loss) nor a token id",
            f"use {IGNORE_INDEX} for tokens without loss",
        )  # fmt: skip


def _ambiguous(masks: list[str], given: list[str]) -> tuple[str, str, str]:
    """``(field, problem, fix)`` for a row with TRL mask columns and ``labels``/``loss_mask``."""
    return (
        masks[0],
        f"is given together with {given[0]!r}: which tokens are targets is ambiguous",
        f"keep one of them ({given[0]!r}, or {' + '.join(masks)} read as loss_mask: 1 = target)",
    )


def _is_numeric_list(v) -> bool:
    """A non-empty list of numbers, or of non-empty lists of numbers (a per-token ``[T, k, ...]`` column)."""
    if not isinstance(v, list) or not v:
        return False
    head = v[:8]
    if all(isinstance(x, (int, float, bool)) for x in head):
        return True
    return all(isinstance(x, list) for x in head) and _is_numeric_list(head[0])


def _check_shifted(ids: np.ndarray, labels: np.ndarray, where: str) -> None:
    """Refuse ``labels`` that look Megatron-shifted (``labels[t] == input_ids[t+1]`` at every target, and some
    target is not its own token): packwise packs HF labels, and the loaders refuse such rows later
    (``assemble._labels``: the same rule, at pack time)."""
    if ids.shape[0] < 2:
        return
    target = labels[:-1] != IGNORE_INDEX
    if not target.any() or not ((labels != IGNORE_INDEX) & (labels != ids)).any():
        return
    if (labels[:-1] == ids[1:])[target].all():
        raise BadRow(
            where, "labels", "look Megatron-shifted (labels[t] == input_ids[t+1] at every target), but packwise "
            "packs HF labels (unshifted: labels[t] == input_ids[t], -100 where no loss)",
            "give HF labels (labels = input_ids with -100 where no loss) or a loss_mask instead of labels",
        )  # fmt: skip


def _check_some_loss(labels: np.ndarray, where: str, field: str) -> None:
    """Refuse a row whose ``labels``/``loss_mask`` give no target after its first token (HF shifts labels: the
    first never is one): it would be packed with no loss token."""
    if not (labels[1:] != IGNORE_INDEX).any():
        raise BadRow(
            where, field, "gives no loss token (every label after the first is -100), so the row would be packed "
            "with nothing to train on", "drop the row (--skip-bad-rows counts it) or fix its labels",
        )  # fmt: skip


def _not_per_token(value) -> str:
    """Why a field of a pre-tokenized row is not a flat per-token column (the problem of a :class:`BadRow`)."""
    if isinstance(value, list) and value and isinstance(value[0], (list, tuple)):
        what = "is a list of lists that are not (non-empty lists of) numbers"
    elif isinstance(value, list) and value:
        odd = next((v for v in value if not isinstance(v, (int, float, bool))), value[0])
        what = f"holds {type(odd).__name__} values"
    elif isinstance(value, list):
        what = "is an empty list"
    else:
        what = f"is a {type(value).__name__}, not a per-token list"
    return (
        f"{what}: only per-token numbers (one number or one [k, ...] list per input id) reach the packs, so it "
        "would be dropped"
    )


#: The fix of a field that does not reach the packs.
DROP_FIX = "drop it from the data, or pass drop_fields=[{name!r}] (--drop-field {name}) to drop and count it"
