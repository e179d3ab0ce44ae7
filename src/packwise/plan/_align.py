"""Alignment of sequence lengths for tensor, context and sequence parallelism and FP8 (pure math).

Sources: Megatron-LM / Transformer Engine THD context parallelism splits every sequence into ``2·cp``
chunks (zigzag), so each padded length must be divisible by ``2·cp`` (TE issues #1929/#1930: otherwise
lengths are silently rounded down); sequence parallelism shards the sequence dimension over ``tp`` inside
each CP rank, so lengths must also be divisible by ``tp·cp``; FP8 GEMMs need multiples of 16 tokens.
The NeMo-RL/Megatron-LM parity study found a hand-set constant (8 at TP4/CP4/SP) silently wrong where
the derived multiple (16) was right — so derive it, never hard-code it.
"""

from __future__ import annotations

import math

import numpy as np


def _positive_int(name: str, value: object) -> int:
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)) or value < 1:
        raise ValueError(f"{name} must be an integer >= 1, got {value!r}")
    return int(value)


def alignment_multiple(*, tp: int = 1, cp: int = 1, sequence_parallel: bool = False, fp8: bool = False) -> int:
    """The multiple every per-sequence padded length must be divisible by, in tokens.

    The least common multiple of ``2·cp`` (when ``cp > 1``), ``tp·cp`` (with sequence parallelism and
    ``tp > 1``) and 16 (FP8).

    Raises:
        ValueError: ``tp`` or ``cp`` is not an integer >= 1.

    Example:
        >>> alignment_multiple(), alignment_multiple(cp=2), alignment_multiple(tp=4, cp=4, sequence_parallel=True)
        (1, 4, 16)
        >>> alignment_multiple(tp=3, cp=2, sequence_parallel=True, fp8=True)
        48
    """
    tp = _positive_int("tp", tp)
    cp = _positive_int("cp", cp)
    multiple = 1
    if cp > 1:
        multiple = math.lcm(multiple, 2 * cp)
    if sequence_parallel and tp > 1:
        multiple = math.lcm(multiple, tp * cp)
    if fp8:
        multiple = math.lcm(multiple, 16)
    return multiple


def align_lengths(lengths, multiple: int) -> np.ndarray:
    """Round each length up to a multiple of ``multiple``: ``(N,)`` int64 in, ``(N,)`` int64 out.

    Raises:
        ValueError: ``multiple`` is not an integer >= 1.

    Example:
        >>> align_lengths([5, 7, 8], 4).tolist()
        [8, 8, 8]
    """
    multiple = _positive_int("multiple", multiple)
    arr = np.asarray(lengths, dtype=np.int64)
    if multiple == 1:
        return arr
    return (arr + (multiple - 1)) // multiple * multiple
