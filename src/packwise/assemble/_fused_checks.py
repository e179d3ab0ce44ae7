"""The fused path's checks of label and mask values, over the whole batch in a few numpy (or torch) calls.

Each one answers *whether* the two-step path would refuse the batch; the caller then hands the batch to
the two-step path, which raises with its message (naming the sequence, the position, the value and the
fix). A check reads the batch's ``(T,)`` columns once or twice, and the label-convention check first
looks at one or two positions per row: a sufficient statistic that clears almost every real batch.
"""

from __future__ import annotations

import numpy as np
import torch

from ..constants import IGNORE_INDEX

_MAX = np.maximum.reduce
_COUNT = np.count_nonzero  # (faster than logical_and.reduce or .all() on a few elements)


def labels_refused(lab: np.ndarray | torch.Tensor, pad: int, low: int | None = None) -> bool:
    """Whether some label is a negative other than -100 and ``pad`` (``assemble._columns.validate_values``:
    a label is -100, the label pad or a token id). ``lab``: the batch's ``(T,)`` labels after boundary
    masking (the two-step path checks them after it too), padding included (it holds allowed values).
    ``low``: the labels' minimum *before* masking, when the caller has it (a pass saved): the minimum after
    it is no lower than ``min(low, pad)`` (masking writes only ``pad`` and -100, which are allowed), so a
    ``low`` outside the allowed values at worst refuses a batch whose only such label sat on a boundary —
    which the two-step path then accepts — and never accepts a refused one."""
    if isinstance(lab, torch.Tensor):  # another device: torch ops, one test
        return bool(((lab < 0) & (lab != IGNORE_INDEX) & (lab != pad)).any())
    if low is None:
        low = int(lab.min()) if lab.shape[0] else 0
    else:
        low = min(low, pad)
    if low >= 0:
        return False  # no negative label at all: one pass
    if low not in (IGNORE_INDEX, pad):
        return True
    # the largest negative label in one pass: as uint64, negatives are the largest values (two's complement)
    top = int(_MAX(lab.view(np.uint64))) if lab.dtype == np.int64 else 0
    if top >= 1 << 63:
        high = top - (1 << 64)
        if high not in (IGNORE_INDEX, pad):
            return True  # a negative label that is neither: present (after masking), refused
        if high == low:
            return False  # every negative label is the one allowed value (pad -100: HF labels), two passes
    allowed = np.count_nonzero(lab == IGNORE_INDEX)
    if pad < 0 and pad != IGNORE_INDEX:
        allowed += np.count_nonzero(lab == pad)
    return np.count_nonzero(lab < 0) != allowed


def next_tokens(ids: np.ndarray, start: np.ndarray) -> np.ndarray:
    """``(N,)`` ``ids[start + 1]``, the token after each row's first (clipped at the end: a last 1-token row's is
    its own, and such a row is never a candidate)."""
    return ids[1:].take(start, mode="clip") if ids.shape[0] > 1 else ids.take(start)


def rows_look_shifted(
    lab: np.ndarray,
    ids: np.ndarray,
    start: np.ndarray,
    stop: np.ndarray,
    pad: int,
    nxt: np.ndarray | None = None,
    got: np.ndarray | None = None,
) -> bool:
    """Whether some ``labels``-only row looks Megatron-shifted (``labels[t] == input_ids[t+1]`` at every
    target): the two-step path's per-row check (``assemble._labels._check_hf_rows``) over the whole batch.

    ``lab``/``ids``: the batch's ``(T,)`` int64 labels (before boundary masking) and ids, ``T >= 2`` for
    ``nxt``; row ``i`` is ``[start[i], stop[i])``, at least one token; ``nxt``: ``ids[1:][stop - 2]`` (each
    row's last token), ``got``: ``lab[stop - 2]`` (each computed when None; the caller gathers them right after
    writing each column, while it is in cache).

    A row is cleared as soon as one of its targets (a label that is not ``pad``, before its last token) is
    not the next token. First each row's second-to-last position is tested, where a reply ends (one gather of
    ``N`` labels and ``N`` ids): random labels, HF labels (the token itself, ``ids[t] != ids[t+1]``) and
    prompt-masked HF labels clear there. A 1-token row has no target and is never shifted, so its probe may
    land anywhere (on the previous row's last token; the batch's last for a first row): cleared or left, both
    are right. Rows left are probed at their first position; only when some row is still left does the exact
    test read the whole batch (:func:`_rows_look_shifted_exact`).

    Example:
        >>> ids = np.array([5, 6, 7, 8]); start, stop = np.array([0]), np.array([4])
        >>> rows_look_shifted(np.array([6, 7, 8, -100]), ids, start, stop, -100)  # labels[t] == ids[t + 1]
        True
        >>> rows_look_shifted(ids.copy(), ids, start, stop, -100)  # HF labels: the token itself
        False
    """
    n = start.shape[0]
    if lab.shape[0] < 2:
        return False  # one 1-token row: no target
    if got is None or nxt is None:
        probe = stop - 2  # (int64 indices: numpy's fancy indexing is several times slower with int32)
        got, nxt = lab[probe], ids[1:][probe]
    off = got != nxt
    off &= got != pad
    if _COUNT(off) == n:
        return False
    first = start[~off]  # the rows left: their first position
    got = lab[first]
    off = got != next_tokens(ids, first)
    off &= got != pad
    if _COUNT(off) == first.shape[0]:
        return False
    return _rows_look_shifted_exact(lab, ids, start, stop - start, pad)


def _rows_look_shifted_exact(lab: np.ndarray, ids: np.ndarray, start: np.ndarray, lens: np.ndarray, pad: int) -> bool:
    mismatch = lab != ids
    if not mismatch.any():
        return False  # every label is its own token
    target = lab != pad
    target[start + lens - 1] = False  # a row's last label has no next token to compare with
    off = target.copy()  # a target that is not the next token: the row is not shifted
    off[:-1] &= lab[:-1] != ids[1:]
    edges = np.empty(2 * start.shape[0], dtype=np.int64)  # reduceat: [start, end) and [end, next start)
    edges[0::2] = start
    np.add(start, lens, out=edges[1::2])
    if edges[-1] == lab.shape[0]:
        edges = edges[:-1]
    any_in_row = np.logical_or.reduceat
    candidate = (lens >= 2) & ~any_in_row(off, edges)[::2]
    if not candidate.any():
        return False  # every row has a label that is not the next token (e.g. labels that differ): done
    mismatch &= lab != pad
    shifted = candidate & any_in_row(mismatch, edges)[::2] & any_in_row(target, edges)[::2]
    return bool(shifted.any())


def mask_refused(values: torch.Tensor) -> bool:
    """Whether a per-token ``attention_mask`` (its real tokens) holds anything but 1: the two-step path
    refuses padded sequences (``validate_values``)."""
    if values.device.type == "cpu" and values.dtype != torch.bfloat16:
        v = values.numpy()
        return v.shape[0] > 0 and not (v.min() == 1 and v.max() == 1)
    return not bool((values == 1).all())
