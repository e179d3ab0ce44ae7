"""Compare planners and capacities on one set of lengths (``packwise plan``)."""

from __future__ import annotations

import time
from collections.abc import Sequence
from pathlib import Path
from typing import Literal

import numpy as np

from ..plan import ALGORITHMS, as_lengths, plan_packs, resolve_algorithm

#: Above this many sequences ``algorithms="all"`` leaves out first_fit_shuffle (item-level Python).
FFS_LIMIT = 1_000_000
LENGTH_SUFFIXES = (".npy", ".parquet", ".txt")
LENGTH_COLUMNS = ("length", "lengths", "seq_lengths")


def read_lengths(path) -> np.ndarray:
    """Sequence lengths (tokens) from a ``.npy``, ``.parquet`` or ``.txt`` file, as ``(N,)`` int64.

    ``.npy``: a 1-D integer array. ``.parquet``: the first of the columns ``length``, ``lengths`` or
    ``seq_lengths``; list columns (the ``seq_lengths`` of a packed dataset) are flattened. ``.txt``: one
    integer per line (blank lines ignored).

    Raises:
        ValueError: missing file, unsupported suffix, no length column, a line that is not an integer,
            no lengths, or a length < 1.
        TypeError: the lengths are not integers.

    Example:
        >>> import tempfile
        >>> from pathlib import Path
        >>> p = Path(tempfile.mkdtemp()) / "lengths.txt"
        >>> _ = p.write_text("6\\n5\\n\\n4\\n")
        >>> read_lengths(p).tolist()
        [6, 5, 4]
    """
    path = Path(path)
    if path.is_dir():
        raise ValueError(f"LENGTHS {path} is a directory; pass a packed dataset with --from {path}, or a file")
    if not path.exists():
        raise ValueError(f"LENGTHS file {path} does not exist; pass a {', '.join(LENGTH_SUFFIXES)} file of lengths")
    suffix = path.suffix.lower()
    if suffix == ".npy":
        try:
            arr = np.load(path, allow_pickle=False)
        except ValueError as e:
            raise ValueError(f"{path}: cannot read it as a numpy array ({e}); save lengths with np.save") from e
    elif suffix == ".parquet":
        arr = _parquet_lengths(path)
    elif suffix == ".txt":
        arr = _txt_lengths(path)
    else:
        raise ValueError(
            f"LENGTHS {path}: unsupported suffix {suffix!r}; pass a {', '.join(LENGTH_SUFFIXES)} file, "
            "or a `packwise pack` output directory with --from"
        )
    try:
        lengths = as_lengths(arr)
    except (TypeError, ValueError) as e:
        raise type(e)(f"{path}: {e}") from e
    if not lengths.shape[0]:
        raise ValueError(f"{path} holds no lengths; it needs at least one sequence length (tokens)")
    return lengths


def _parquet_lengths(path: Path) -> np.ndarray:
    import pyarrow as pa
    import pyarrow.compute as pc
    import pyarrow.parquet as pq

    names = pq.read_schema(path).names
    column = next((c for c in LENGTH_COLUMNS if c in names), None)
    if column is None:
        raise ValueError(f"{path} has no length column (columns: {names}); name it one of {', '.join(LENGTH_COLUMNS)}")
    values = pq.read_table(path, columns=[column]).column(column)
    while pa.types.is_list(values.type) or pa.types.is_large_list(values.type):
        values = pc.list_flatten(values)
    if values.null_count:
        raise ValueError(f"{path}: column {column!r} has {values.null_count} nulls; every length must be >= 1")
    return values.to_numpy()


def _txt_lengths(path: Path) -> np.ndarray:
    text = path.read_text()
    try:
        return np.array(text.split(), dtype=np.int64)
    except (ValueError, OverflowError):
        for i, line in enumerate(text.splitlines(), 1):
            try:
                value = int(line.strip() or 0)
            except ValueError:
                raise ValueError(
                    f"{path}:{i}: {line!r} is not an integer; write one length (tokens) per line"
                ) from None
            if not -(2**63) <= value < 2**63:
                raise ValueError(
                    f"{path}:{i}: {value} is far above any capacity; lengths are tokens per sequence"
                ) from None
        raise ValueError(f"{path}: cannot read the lengths") from None


def lengths_from_packed(path) -> np.ndarray:
    """The ``seq_lengths`` of a ``packwise pack`` output directory, ``(N,)`` int64, in input order (by
    ``source_index``; pieces of a split sample stay in order), so order-preserving algorithms such as
    ``next_fit`` see the input's order rather than the existing plan's grouping.

    Raises:
        ValueError: ``path`` is not a packwise packed dataset.
    """
    import pyarrow.parquet as pq

    from ..files import packed_files
    from ._stats import read_pack_stats

    path = Path(path)
    if not path.is_dir():
        raise ValueError(f"--from {path} is not a directory; pass the output directory of `packwise pack`")
    lengths = read_pack_stats(path).seq_lengths
    files = packed_files(path)
    if not all("source_index" in pq.read_schema(f).names for f in files):
        return lengths  # pack order: an output written without source indices
    source = [pq.read_table(f, columns=["source_index"]).column("source_index") for f in files]
    order = np.concatenate([c.combine_chunks().flatten().to_numpy(zero_copy_only=False) for c in source])
    return lengths[np.argsort(order, kind="stable")]


def parse_capacities(text: str) -> list[int]:
    """``"2048,4096"`` -> ``[2048, 4096]`` (duplicates removed, order kept).

    Raises:
        ValueError: an entry is not an integer >= 1, or the list is empty.

    Example:
        >>> parse_capacities("4096, 2048,4096")
        [4096, 2048]
    """
    out: list[int] = []
    for item in (s.strip() for s in text.split(",")):
        try:
            c = int(item)
        except ValueError:
            c = 0
        if c < 1:
            raise ValueError(f"--capacity {text!r}: {item!r} is not an integer >= 1; pass e.g. 2048,4096,8192")
        if c not in out:
            out.append(c)
    return out


def parse_algorithms(text: str) -> list[str] | Literal["all"]:
    """``"all"`` or a comma list of algorithm names or aliases -> canonical names (order kept).

    Raises:
        ValueError: an unknown name (the message lists every valid name), or an empty list.

    Example:
        >>> parse_algorithms("bfd,next_fit,BFD")
        ['best_fit_decreasing', 'next_fit']
    """
    if text.strip().lower() == "all":
        return "all"
    names = [s.strip() for s in text.split(",") if s.strip()]
    if not names:
        raise ValueError(f"--algorithm {text!r} names no algorithm; pass all or e.g. bfd,next_fit")
    return list(dict.fromkeys(resolve_algorithm(n) for n in names))


def compare_plans(
    lengths,
    *,
    capacities: Sequence[int],
    algorithms: Sequence[str] | Literal["all"] = "all",
    seed: int | None = None,
    ffs_limit: int = FFS_LIMIT,
) -> dict:
    """Plan ``lengths`` with every algorithm at every capacity and tabulate the results.

    Lengths over a capacity are clipped to it for that capacity (counted in ``clipped``). With
    ``algorithms="all"`` and more than ``ffs_limit`` sequences, first_fit_shuffle (item-level Python) is
    left out and listed in ``skipped``; name it explicitly to run it anyway.

    Args:
        lengths: ``(N,)`` tokens per sequence, each >= 1.
        capacities: tokens per pack, each >= 1.
        algorithms: ``"all"`` or names/aliases from :data:`packwise.plan.ALGORITHMS`.
        seed: seed of first_fit_shuffle.
        ffs_limit: most sequences for which ``"all"`` includes first_fit_shuffle.

    Returns:
        ``{"sequences", "tokens", "capacities", "algorithms", "rows", "clipped", "skipped"}``; one row per
        capacity × algorithm (capacity-major) with ``packs``, ``lower_bound`` (L1), ``utilisation``,
        ``excess_pct`` (over L1), ``time_ms`` (planning wall time) and ``clipped`` (sequences clipped).

    Raises:
        ValueError: no capacity, a capacity < 1, an unknown algorithm, or bad lengths.
        TypeError: non-integer lengths.

    Example:
        >>> r = compare_plans([6, 5, 4, 3, 2], capacities=[10], algorithms=["greedy_knapsack", "next_fit"])
        >>> [(row["algorithm"], row["packs"], row["lower_bound"]) for row in r["rows"]]
        [('greedy_knapsack', 2, 2), ('next_fit', 3, 2)]
    """
    real = as_lengths(lengths)
    caps = list(capacities)
    if not caps:
        raise ValueError("capacities is empty; pass at least one capacity (tokens per pack), e.g. [4096]")
    for c in caps:
        if isinstance(c, bool) or not isinstance(c, (int, np.integer)) or c < 1:
            raise ValueError(f"capacity {c!r} must be an integer >= 1 (tokens per pack)")
    n = int(real.shape[0])
    skipped = []
    if isinstance(algorithms, str):
        if algorithms != "all":
            raise ValueError(f"algorithms must be 'all' or a list of names, got {algorithms!r}")
        names = list(ALGORITHMS)
        if n > ffs_limit:
            names.remove("first_fit_shuffle")
            skipped.append(
                {
                    "algorithm": "first_fit_shuffle",
                    "reason": f"{n:,} sequences > {ffs_limit:,} (item-level Python); "
                    "name it in --algorithm to run it anyway",
                }
            )
    else:
        names = list(dict.fromkeys(resolve_algorithm(a) for a in algorithms))
        if not names:
            raise ValueError("algorithms is empty; pass 'all' or at least one algorithm name")
    rows, clipped = [], []
    for c in caps:
        c = int(c)
        over = real > c
        k = int(over.sum())
        clipped.append({"capacity": c, "sequences": k, "tokens_cut": int((real[over] - c).sum())})
        clipped_lengths = np.minimum(real, c) if k else real
        for name in names:
            t = time.perf_counter()
            plan = plan_packs(clipped_lengths, capacity=c, algorithm=name, seed=seed)
            ms = 1000.0 * (time.perf_counter() - t)
            m = plan.metrics()
            rows.append(
                {
                    "capacity": c,
                    "algorithm": name,
                    "packs": m.num_packs,
                    "lower_bound": m.lower_bound_packs,
                    "utilisation": m.utilisation,
                    "excess_pct": m.excess_packs_pct,
                    "time_ms": round(ms, 3),
                    "clipped": k,
                }
            )
    return {
        "sequences": n,
        "tokens": int(real.sum()),
        "capacities": [int(c) for c in caps],
        "algorithms": names,
        "rows": rows,
        "clipped": clipped,
        "skipped": skipped,
    }
