"""Construction checks of :class:`~packwise.stream.PackingStream`'s padding options: every pack it emits stays
within ``capacity`` and its ``cu_seqlens`` fit int32."""

from __future__ import annotations

import numpy as np

INT32_MAX = 2**31 - 1  # pad_to and alignment bound: cu_seqlens are int32


def check_padding(capacity: int, *, alignment, pad_to, pad_token_id) -> None:
    """Refuse ``alignment`` outside ``[1, capacity]``, ``pad_to`` not in ``[1, capacity]`` or over ``2**31 - 1``
    (so is ``alignment``), and a ``pad_token_id`` that is not an integer ``>= 0`` (value, limit and fix named).

    Example:
        >>> check_padding(8, alignment=1, pad_to=8, pad_token_id=0)  # fits: returns None
        >>> try:
        ...     check_padding(8, alignment=1, pad_to=16, pad_token_id=0)
        ... except ValueError as e:
        ...     print(str(e).split(":")[0])
        pad_to=16 > capacity=8
    """
    if (
        isinstance(alignment, (bool, np.bool_))
        or not isinstance(alignment, (int, np.integer))
        or not (1 <= alignment <= capacity)
    ):
        raise ValueError(f"alignment must be an integer in [1, capacity={capacity}], got {alignment!r}")
    if pad_to is not None and (
        isinstance(pad_to, (bool, np.bool_)) or not isinstance(pad_to, (int, np.integer)) or pad_to < 1
    ):
        raise ValueError(f"pad_to must be None or an integer >= 1 (tokens per pack), got {pad_to!r}")
    for name, value in (("alignment", alignment), ("pad_to", pad_to)):
        if value is not None and value > INT32_MAX:  # cu_seqlens are int32
            raise ValueError(f"{name}={value} is over the limit {INT32_MAX} (int32 cu_seqlens); pass a smaller {name}")
    if pad_to is not None and pad_to > capacity:
        raise ValueError(
            f"pad_to={pad_to} > capacity={capacity}: every pack would be padded over capacity; pass pad_to <= "
            "capacity (or raise capacity to pad_to)"
        )
    if (
        isinstance(pad_token_id, (bool, np.bool_))
        or not isinstance(pad_token_id, (int, np.integer))
        or pad_token_id < 0
    ):
        raise ValueError(
            f"pad_token_id must be an integer >= 0 (a token id; samples' ids are >= 0), got {pad_token_id!r}; "
            "use your tokenizer's pad id"
        )


def segment_cap(max_segments: int | None, pad_to: int | None) -> int | None:
    """Documents a pack may hold so that it has at most ``max_segments`` segments: with ``pad_to`` its tail
    padding is one more segment, so one fewer (None: no limit).

    Raises:
        ValueError: ``max_segments=1`` with ``pad_to`` (no room for a document beside the tail).

    Example:
        >>> segment_cap(4, None), segment_cap(4, 8), segment_cap(None, 8)
        (4, 3, None)
    """
    if max_segments is None:
        return None
    if pad_to is not None and max_segments < 2:
        raise ValueError(
            f"max_segments={max_segments} with pad_to={pad_to}: the tail padding is a segment, leaving no room for "
            "a document; use max_segments >= 2"
        )
    return max_segments - (1 if pad_to is not None else 0)
