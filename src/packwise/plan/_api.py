"""``plan_packs``: validate lengths and options once, run one algorithm, apply pack-count constraints."""

from __future__ import annotations

import sys
from typing import Literal, get_args

import numpy as np

from ._align import align_lengths
from ._bfd_items import ITEM_PATH_MAX, plan_bfd_items
from ._constraints import pack_count_target, split_to_target
from ._engine import HistogramBuilder
from ._finalize import Chains
from ._first_fit_shuffle import plan_first_fit_shuffle
from ._fit_decreasing import place_decreasing
from ._knapsack import place_balanced_greedy_knapsack, place_greedy_knapsack
from ._krell import place_lpfhp, place_spfhp
from ._mffd import place_mffd
from ._next_fit import plan_next_fit
from ._plan import PackPlan

Algorithm = Literal[
    "next_fit",
    "first_fit_decreasing",
    "best_fit_decreasing",
    "first_fit_shuffle",
    "modified_first_fit_decreasing",
    "greedy_knapsack",
    "balanced_greedy_knapsack",
    "shortest_pack_first_histogram",
    "longest_pack_first_histogram",
]
ALGORITHMS: tuple[str, ...] = get_args(Algorithm)
ALIASES: dict[str, str] = {
    "concatenative": "next_fit",
    "ffd": "first_fit_decreasing",
    "bfd": "best_fit_decreasing",
    "ffs": "first_fit_shuffle",
    "mffd": "modified_first_fit_decreasing",
    "spfhp": "shortest_pack_first_histogram",
    "lpfhp": "longest_pack_first_histogram",
}
#: Options each algorithm accepts through ``**algorithm_options``.
ALGORITHM_OPTIONS: dict[str, frozenset[str]] = {name: frozenset() for name in ALGORITHMS}
ALGORITHM_OPTIONS["balanced_greedy_knapsack"] = frozenset({"delta"})
#: The largest capacity (tokens per pack): histogram planners keep O(capacity) state.
MAX_CAPACITY = 1 << 24
_INT64_MAX = int(np.iinfo(np.int64).max)
#: Algorithms whose plan depends on ``seed``.
RANDOMIZED: frozenset[str] = frozenset({"first_fit_shuffle"})


def resolve_algorithm(name: str) -> str:
    """Canonical algorithm name for a name or alias (case-insensitive, ``-`` accepted for ``_``).

    Raises:
        ValueError: unknown name; the message lists every valid name and alias.

    Example:
        >>> resolve_algorithm("BFD"), resolve_algorithm("first-fit-shuffle")
        ('best_fit_decreasing', 'first_fit_shuffle')
    """
    if not isinstance(name, str):
        raise TypeError(f"algorithm must be a string, got {type(name).__name__}")
    key = name.strip().lower().replace("-", "_")
    key = ALIASES.get(key, key)
    if key not in ALGORITHMS:
        valid = ", ".join(f"{a} ({k})" if (k := _alias_of(a)) else a for a in ALGORITHMS)
        raise ValueError(f"unknown packing algorithm {name!r}; valid names (alias): {valid}")
    return key


def _alias_of(name: str) -> str:
    return next((a for a, n in ALIASES.items() if n == name), "")


def check_algorithm_options(algorithm: str, options: dict) -> None:
    """Raise if an option does not belong to ``algorithm`` or has a bad value.

    Raises:
        TypeError: the option belongs to another algorithm or to none.
        ValueError: ``delta`` is not an integer >= 0.
    """
    allowed = ALGORITHM_OPTIONS[algorithm]
    for key in options:
        if key not in allowed:
            owners = [a for a, opts in ALGORITHM_OPTIONS.items() if key in opts]
            where = f"it belongs to {', '.join(owners)}" if owners else "no algorithm takes it"
            takes = ", ".join(sorted(allowed)) or "no options"
            raise TypeError(f"algorithm {algorithm!r} takes {takes}, not option {key!r} ({where})")
    if "delta" in options:
        d = options["delta"]
        if isinstance(d, bool) or not isinstance(d, (int, np.integer)) or d < 0:
            raise ValueError(
                f"balanced_greedy_knapsack option delta={d!r} must be an integer >= 0 "
                "(extra packs over the lower bound ceil(sum/capacity))"
            )


def as_lengths(lengths) -> np.ndarray:
    """Validate and convert lengths to ``(N,)`` int64 (no copy when already int64).

    Accepts numpy arrays, lists, any other iterable of integers (a generator: read once, into a list), and
    anything with ``to_numpy()`` (pyarrow arrays, pandas series).

    Raises:
        TypeError: not integers (floats, bools, objects).
        ValueError: not 1-D, a length < 1, or an unsigned length above int64's range.

    Example:
        >>> as_lengths(np.array([3, 2**63], np.uint64))
        Traceback (most recent call last):
        ...
        ValueError: sequence 1 has length 9223372036854775808, larger than any capacity (lengths are planned as ...
    """
    if hasattr(lengths, "to_numpy") and not isinstance(lengths, np.ndarray):
        try:
            arr = lengths.to_numpy(zero_copy_only=False)
        except TypeError:
            arr = lengths.to_numpy()
    elif hasattr(lengths, "__iter__") and not hasattr(lengths, "__len__"):  # a generator, a map(...): read it once
        arr = np.asarray(list(lengths))
    else:
        arr = np.asarray(lengths)
    if arr.ndim != 1:
        raise ValueError(f"lengths must be 1-D (one length per sequence), got shape {arr.shape}")
    if arr.size == 0:
        return np.zeros(0, dtype=np.int64)
    if arr.dtype == np.bool_:
        raise TypeError("lengths must be integers, got bool")
    if arr.dtype.kind == "f":
        bad = np.flatnonzero(~np.isfinite(arr) | (arr != np.round(arr)))
        detail = f"; lengths[{bad[0]}] = {arr[bad[0]]}" if bad.size else ""
        raise TypeError(f"lengths must be integers, got {arr.dtype}{detail}; cast with .astype(int) if exact")
    if arr.dtype.kind not in "iu":
        if arr.dtype == object:  # Python ints too large for int64, or not numbers at all: name the first
            odd = (iv for iv in enumerate(arr.tolist()) if not isinstance(iv[1], int) or abs(iv[1]) > _INT64_MAX)
            i, v = next(odd, (None, None))
            if i is None:
                raise TypeError(f"lengths must be integers, got dtype {arr.dtype}")
            if isinstance(v, int) and not isinstance(v, bool) and v > 0:
                raise ValueError(
                    f"sequence {i} has length {v}, larger than any capacity (lengths are planned as int64, at "
                    f"most {_INT64_MAX}); truncate or split it before planning"
                )
            raise TypeError(f"lengths must be integers in int64, got lengths[{i}] = {v!r} ({type(v).__name__})")
        raise TypeError(f"lengths must be integers, got dtype {arr.dtype}")
    big = int(arr.argmax()) if arr.dtype == np.uint64 else 0
    if arr.dtype == np.uint64 and arr[big] > _INT64_MAX:  # astype would wrap it to a negative length
        raise ValueError(
            f"sequence {big} has length {int(arr[big])}, larger than any capacity (lengths are planned as int64, "
            f"at most {_INT64_MAX}); truncate or split it before planning"
        )
    arr = arr.astype(np.int64, copy=False)
    if arr.shape[0]:
        i = int(arr.argmin())
        if arr[i] < 1:
            raise ValueError(
                f"sequence {i} has length {int(arr[i])}; every length must be >= 1 token "
                "(drop empty sequences before planning)"
            )
    return arr


def _optional_int(name: str, value, minimum: int) -> int | None:
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)) or value < minimum:
        raise ValueError(f"{name} must be None or an integer >= {minimum}, got {value!r}")
    return int(value)


def plan_packs(
    lengths,
    *,
    capacity: int,
    algorithm: Algorithm | str = "best_fit_decreasing",
    max_sequences_per_pack: int | None = None,
    min_packs: int | None = None,
    pack_count_multiple: int | None = None,
    seed: int | None = None,
    alignment: int = 1,
    **algorithm_options,
) -> PackPlan:
    """Decide which sequences share a pack of ``capacity`` tokens.

    Args:
        lengths: ``(N,)`` integer tokens per sequence (numpy, list, pyarrow array), each in
            ``[1, capacity]`` after alignment.
        capacity: C, tokens per pack.
        algorithm: one of :data:`ALGORITHMS` or an alias (``bfd``, ``ffd``, ``ffs``, ``mffd``,
            ``spfhp``, ``lpfhp``, ``concatenative``).
        max_sequences_per_pack: close a pack once it holds this many sequences.
        min_packs: at least this many packs (data-parallel ranks), reached by splitting in two (LPT halves)
            the pack whose smaller half holds the most tokens, repeatedly (each split makes the largest
            smaller pack it can: ``[99,1] [30,30,30]`` -> ``[99,1] [30,30] [30]``, not a 1-token pack).
        pack_count_multiple: the number of packs is rounded up to a multiple of this, the same way.
        seed: seed of the local RNG of randomised algorithms (``first_fit_shuffle``; default 0);
            ignored by deterministic ones.
        alignment: plan each sequence at its length rounded up to this multiple (see
            :func:`alignment_multiple`).
        **algorithm_options: options of the chosen algorithm (``delta`` for ``balanced_greedy_knapsack``).

    Returns:
        A :class:`PackPlan`; same input and seed always give the same plan.

    Raises:
        TypeError: non-integer lengths, or an option the algorithm does not take.
        ValueError: bad shape, a length < 1 or > capacity, capacity < 1, unknown algorithm, bad
            constraint values, or a pack-count target larger than N.

    Example:
        >>> plan = plan_packs([4, 4, 4, 4], capacity=8, algorithm="balanced_greedy_knapsack", delta=0)
        >>> [p.tolist() for p in plan.packs()]
        [[0, 2], [1, 3]]
        >>> plan_packs([9000, 10], capacity=8192)
        Traceback (most recent call last):
        ...
        ValueError: sequence 0 has 9000 tokens > capacity 8192; truncate or split it ... or raise capacity
    """
    if isinstance(capacity, bool) or not isinstance(capacity, (int, np.integer)) or capacity < 1:
        raise ValueError(f"capacity must be an integer >= 1 (tokens per pack), got {capacity!r}")
    if capacity > MAX_CAPACITY:
        raise ValueError(
            f"capacity {capacity} is above {MAX_CAPACITY:,} tokens, the largest packwise plans (its histogram "
            "planners keep state per token of capacity); use a smaller capacity"
        )
    capacity = int(capacity)
    name = resolve_algorithm(algorithm)
    check_algorithm_options(name, algorithm_options)
    max_seqs = _optional_int("max_sequences_per_pack", max_sequences_per_pack, 1)
    min_packs = _optional_int("min_packs", min_packs, 0)
    multiple = _optional_int("pack_count_multiple", pack_count_multiple, 1)
    if seed is not None and (isinstance(seed, bool) or not isinstance(seed, (int, np.integer))):
        raise TypeError(f"seed must be an integer or None, got {seed!r}")
    if seed is not None and seed < 0:  # numpy's generators take seeds >= 0 only
        raise ValueError(f"seed must be >= 0, got {seed}; pass --seed 0 or any non-negative integer")
    alignment = _optional_int("alignment", alignment, 1) or 1
    real = as_lengths(lengths)
    costs = align_lengths(real, alignment)
    if costs.shape[0]:
        i = int(costs.argmax())
        if costs[i] > capacity:
            aligned = f", {int(costs[i])} after alignment to {alignment}," if alignment > 1 else ""
            raise ValueError(
                f"sequence {i} has {int(real[i])} tokens{aligned} > capacity {capacity}; truncate or split it "
                "before planning (plan_packs plans whole sequences; PackingConfig.overflow is applied by the stream "
                "and `packwise pack`, not here) or raise capacity"
            )
    m = max_seqs or sys.maxsize
    used_seed = (0 if seed is None else int(seed)) if name in RANDOMIZED else None
    if name == "next_fit":
        order, offsets = plan_next_fit(costs, capacity, m)
    elif name == "first_fit_shuffle":
        order, offsets = plan_first_fit_shuffle(costs, capacity, m, used_seed or 0)  # an int for ffs (RANDOMIZED)
    elif name == "best_fit_decreasing" and costs.shape[0] <= ITEM_PATH_MAX:  # same plan, less fixed cost
        order, offsets = plan_bfd_items(costs, capacity, m)
    else:
        builder = HistogramBuilder(costs, capacity)
        groups: list | Chains
        if name == "best_fit_decreasing":
            groups = place_decreasing(builder, max_seqs=m, policy="best")
        elif name == "first_fit_decreasing":
            groups = place_decreasing(builder, max_seqs=m, policy="first")
        elif name == "modified_first_fit_decreasing":
            groups = place_mffd(builder, max_seqs=m)
        elif name == "greedy_knapsack":
            groups = place_greedy_knapsack(builder, max_seqs=m)
        elif name == "balanced_greedy_knapsack":
            delta = int(algorithm_options.get("delta", 0))
            groups = place_balanced_greedy_knapsack(builder, max_seqs=m, delta=delta, total_cost=int(costs.sum()))
        elif name == "shortest_pack_first_histogram":
            groups = place_spfhp(builder, max_seqs=m)
        else:
            groups = place_lpfhp(builder, max_seqs=m)
        order, offsets = builder.finalize(groups)
    target = pack_count_target(offsets.shape[0] - 1, min_packs, multiple)
    why = f"min_packs={min_packs}, pack_count_multiple={multiple}"
    order, offsets = split_to_target(order, offsets, costs, target, why=why)
    return PackPlan(
        order=order,
        offsets=offsets,
        lengths=real,
        capacity=capacity,
        algorithm=name,
        seed=used_seed,
        alignment=int(alignment),
    )
