"""``packwise plan``: compare algorithms and capacities on a file of lengths before packing."""

from __future__ import annotations

import json
import time
from inspect import cleandoc
from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import numpy as np
import typer
from rich.console import Console
from rich.measure import Measurement

from ..plan import ALGORITHMS, ALIASES, HISTOGRAM_ALGORITHMS, plan_histogram
from ._console import out

if TYPE_CHECKING:
    from rich.console import JustifyMethod

EXAMPLES = """
Examples:

  packwise plan lengths.npy          # every algorithm at capacity 2048, 4096, 8192
  packwise plan lengths.txt --capacity 4096 --algorithm bfd,next_fit,greedy_knapsack
  packwise plan --from packed --capacity 8192,16384 --json
  packwise plan counts.npy --histogram --capacity 4096   # counts[length]: billions of sequences in seconds
"""


def plan(
    lengths: Annotated[
        Path | None,
        typer.Argument(
            metavar="LENGTHS",
            help=".npy, .parquet (column length/lengths, or seq_lengths flattened) or .txt (one integer per line); "
            "with --histogram: counts per length (.npy counts[length], or .txt lines 'length count').",
        ),
    ] = None,
    from_path: Annotated[
        Path | None, typer.Option("--from", help="A `packwise pack` output directory: plan its seq_lengths.")
    ] = None,
    capacity: Annotated[str, typer.Option(help="Comma list of capacities (tokens per pack).")] = "2048,4096,8192",
    algorithm: Annotated[
        str,
        typer.Option(
            help=f"all | comma list of algorithms ({', '.join(ALGORITHMS)}) or aliases ({', '.join(ALIASES)})."
        ),
    ] = "all",
    seed: Annotated[int | None, typer.Option(help="Seed of first_fit_shuffle (default 0).")] = None,
    json_out: Annotated[bool, typer.Option("--json", help="Print the comparison as JSON on stdout.")] = False,
    histogram: Annotated[
        bool,
        typer.Option(
            "--histogram",
            help="LENGTHS holds counts per length; plan with plan_histogram (memory and time independent of the "
            "number of sequences; the histogram planners only: not next_fit or first_fit_shuffle).",
        ),
    ] = False,
) -> None:
    """Compare packing algorithms and capacities on a file of lengths, before packing.

    One row per capacity and algorithm: packs, lower bound L1, utilisation, excess over L1, planning time. Lengths over a capacity are clipped to it for that capacity (the caption counts them). first_fit_shuffle is left out of --algorithm all above 1,000,000 sequences, and with --histogram balanced_greedy_knapsack above 100,000,000 (name them to run them).
    """
    from ..report import compare_plans, lengths_from_packed, parse_algorithms, parse_capacities, read_lengths

    if (lengths is None) == (from_path is None):
        given = "both" if lengths else "neither"
        raise ValueError(f"pass LENGTHS or --from DIR, not {given}; e.g. `packwise plan lengths.npy`")
    caps = parse_capacities(capacity)
    algos = parse_algorithms(algorithm)
    if histogram:
        if lengths is None:
            raise ValueError("--histogram reads counts from LENGTHS; --from DIR holds lengths: drop --histogram")
        result = compare_histogram(read_counts(lengths), capacities=caps, algorithms=algos)
    else:
        values = read_lengths(lengths) if lengths is not None else lengths_from_packed(from_path)
        result = compare_plans(values, capacities=caps, algorithms=algos, seed=seed)
    source = str(lengths if lengths is not None else from_path)
    if json_out:
        out.print_json(json.dumps({"source": source, **result}))
    else:
        table = plan_table(source, result)
        if from_path is not None:  # seq_lengths are what was packed: after truncate/split/drop at pack time
            table.caption += "\n--from: lengths as packed (after the pack step's overflow handling), in input order"
        if out.is_terminal:
            out.print(table)
        else:  # piped: rich would assume 80 columns and cut the names; print at the table's natural width
            width = max(out.width, Measurement.get(out, out.options.update_width(1000), table).maximum)
            Console(file=out.file, width=width, color_system=None).print(table)


def read_counts(path: Path):
    """``counts[length]`` as int64 from ``.npy`` (a 1-D count array) or text lines ``length count``."""
    if not path.is_file():
        raise ValueError(f"LENGTHS file {path} does not exist; with --histogram pass a .npy or .txt of counts")
    if path.suffix.lower() == ".npy":
        try:
            counts = np.load(path, allow_pickle=False)
        except ValueError as e:
            raise ValueError(f"{path}: cannot read it as a numpy array ({e}); save counts with np.save") from e
        if counts.ndim != 1 or counts.dtype.kind not in "iu":
            raise ValueError(f"{path}: counts must be a 1-D integer array (counts[length]), got {counts.dtype}")
        return counts.astype(np.int64)
    pairs = []
    for i, line in enumerate(path.read_text().splitlines(), start=1):
        parts = line.replace(",", " ").split()
        if not parts:
            continue
        try:
            length, count = (int(x) for x in parts)
        except ValueError:
            raise ValueError(f"{path} line {i}: {line!r} is not 'length count' (two integers)") from None
        if length < 1 or count < 0:
            raise ValueError(f"{path} line {i}: length {length} must be >= 1 and count {count} >= 0")
        pairs.append((length, count))
    if not pairs:
        raise ValueError(f"{path}: no 'length count' lines")
    counts = np.zeros(max(p[0] for p in pairs) + 1, dtype=np.int64)
    for length, count in pairs:
        counts[length] += count
    return counts


#: ``--histogram --algorithm all`` leaves balanced_greedy_knapsack out above this many sequences (name it to run it):
#: its groups grow with N (335 s at 1e9 measured, the others 0.07-0.23 s).
BALANCED_LIMIT = 100_000_000


def compare_histogram(counts, *, capacities: list[int], algorithms) -> dict:
    """``compare_plans``' result shape, planned with ``plan_histogram`` (counts over a capacity clipped to it)."""

    names = list(HISTOGRAM_ALGORITHMS) if algorithms == "all" else algorithms
    skipped = []
    if algorithms == "all" and int(counts.sum()) > BALANCED_LIMIT:  # its groups grow with N: minutes at 1e9
        names.remove("balanced_greedy_knapsack")
        skipped.append(
            {
                "algorithm": "balanced_greedy_knapsack",
                "reason": f"{int(counts.sum()):,} sequences > {BALANCED_LIMIT:,} (its groups grow with N); name it to run it",
            }
        )
    lengths = np.arange(counts.shape[0], dtype=np.int64)
    rows, clipped = [], []
    for c in capacities:
        over = lengths > c
        k = int(counts[over].sum())
        clipped.append({"capacity": c, "sequences": k, "tokens_cut": int(((lengths - c) * counts)[over].sum())})
        clip = counts[: c + 1].copy()
        if k:
            clip[c] += k
        for name in names:
            t = time.perf_counter()
            s = plan_histogram(clip, capacity=c, algorithm=name).summary()
            ms = 1000.0 * (time.perf_counter() - t)
            rows.append(
                {"capacity": c, "algorithm": name, "packs": s["num_packs"], "lower_bound": s["lower_bound_packs"],
                 "utilisation": s["utilisation"], "excess_pct": s["excess_packs_pct"], "time_ms": round(ms, 3),
                 "clipped": k, "templates": s["templates"]}
            )  # fmt: skip
    return {
        "sequences": int(counts.sum()), "tokens": int((lengths * counts).sum()), "capacities": capacities,
        "algorithms": names, "rows": rows, "clipped": clipped, "skipped": skipped,
    }  # fmt: skip


def plan_table(source: str, result: dict):
    """The comparison as one rich table: rows capacity × algorithm, the fewest packs per capacity in bold."""
    from rich.table import Table

    t = Table(
        title=f"packwise plan — {source}: {result['sequences']:,} sequences, {result['tokens']:,} tokens",
        title_justify="left",
    )
    columns: list[tuple[str, JustifyMethod]] = [
        ("capacity", "right"), ("algorithm", "left"), ("packs", "right"), ("lower bound L1", "right"),
        ("utilisation", "right"), ("excess over L1", "right"), ("time ms", "right"),
    ]  # fmt: skip
    for col, justify in columns:
        t.add_column(col, justify=justify, no_wrap=True)
    for c in result["capacities"]:
        rows = [r for r in result["rows"] if r["capacity"] == c]
        best = min(r["packs"] for r in rows)
        for r in rows:
            style = "bold green" if r["packs"] == best else None
            t.add_row(
                f"{c:,}", r["algorithm"], f"{r['packs']:,}", f"{r['lower_bound']:,}", f"{r['utilisation']:.4f}",
                f"{r['excess_pct']:.3f} %", f"{r['time_ms']:.1f}", style=style,
            )  # fmt: skip
        t.add_section()
    notes = [
        f"capacity {k['capacity']:,}: {k['sequences']:,} sequence{'' if k['sequences'] == 1 else 's'} over it clipped ({k['tokens_cut']:,} tokens cut)"
        for k in result["clipped"]
        if k["sequences"]
    ] or ["no sequence is longer than any capacity (nothing clipped)"]
    notes += [f"{s['algorithm']} skipped: {s['reason']}" for s in result["skipped"]]
    t.caption = "\n".join([*notes, "bold: fewest packs at that capacity"])
    t.caption_justify = "left"
    return t


plan.__doc__ = cleandoc(plan.__doc__ or "") + "\n" + EXAMPLES
