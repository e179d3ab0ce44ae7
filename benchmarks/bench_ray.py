"""Ray engine benchmark: ``packwise pack`` through the CLI, local vs ``--engine ray``, start-up included.

    python benchmarks/bench_ray.py                          # 200,000 and 50,000 rows, local, ray1, ray2, 3 repeats
    python benchmarks/bench_ray.py --rows 1000000 --repeat 3
    python benchmarks/bench_ray.py --quick --json

Input: Parquet files of ``--rows`` and ``--rows / 4`` rows, ``input_ids`` of lognormal(4.0, 1.0) lengths
clipped to [1, 2048] (median 55, mean 90 tokens), random ids below 150,000, row groups of 65,536 rows.
Each run is the command a user types, a fresh process timed from start to exit — interpreter and imports,
Ray's start-up (``ray.init`` of a local instance with ``--num-cpus K``, its workers' start) and shutdown
included::

    packwise pack ROWS.parquet -o OUT --capacity 2048 --packs-per-shard 2000 --no-report --json \\
        [--engine ray --num-cpus K]

Engines (``--engines``): ``local`` and ``rayK`` (K Ray CPUs), every engine and size interleaved in each of
``--repeat`` repeats (≥ 3 by default); medians and spreads. Every run of one size must give the same plan
hash. Where Ray passes local: each engine's wall time is modelled as ``a + b × rows`` from its measured
costs — ``b``, the per-row cost, is the median of the command's own work time (``timings``: read …
write, after ``ray.init``; Ray's worker start-up falls in it) per row at the larger size; ``a``, the fixed
cost, the median over every run of wall − work (interpreter, imports, ``ray.init``, shutdown) — and the
rows where a Ray engine's line crosses local's, ``(a_ray − a_local) / (b_local − b_ray)``, is reported.
(A two-point fit of the wall medians at both sizes is printed too; on a loaded machine it is noise.)
Measured for each K run here, and modelled
for K workers on a larger machine from the fewest workers k measured, ``b_rayk × k / K`` with ``a_rayk``
(perfect scaling of the per-row cost, the same start-up: an optimistic model).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
from _harness import Report, add_common

CAPACITY = 2048


def make_input(path: Path, rows: int) -> int:
    rng = np.random.default_rng(0)
    lengths = np.clip(np.rint(rng.lognormal(4.0, 1.0, rows)), 1, CAPACITY).astype(np.int64)
    offsets = np.zeros(rows + 1, dtype=np.int32)
    np.cumsum(lengths, out=offsets[1:])
    ids = rng.integers(0, 150_000, int(offsets[-1]), dtype=np.int32)
    table = pa.table({"input_ids": pa.ListArray.from_arrays(pa.array(offsets), pa.array(ids))})
    pq.write_table(table, path, row_group_size=65_536)
    return int(offsets[-1])


def command(engine: str, data: Path, out: Path, per_shard: int) -> list[str]:
    cmd = [sys.executable, "-c", "from packwise.cli import run; run()", "pack", str(data), "-o", str(out)]
    cmd += ["--capacity", str(CAPACITY), "--packs-per-shard", str(per_shard), "--no-report", "--json"]
    if engine != "local":
        cmd += ["--engine", "ray", "--num-cpus", engine[3:]]
    return cmd


def run_cli(engine: str, data: Path, out: Path, per_shard: int) -> dict:
    env = {**os.environ, "RAY_AUTH_MODE": os.environ.get("RAY_AUTH_MODE", "disabled")}
    t = time.perf_counter()
    proc = subprocess.run(command(engine, data, out, per_shard), capture_output=True, text=True, env=env, check=False)
    wall = time.perf_counter() - t
    if proc.returncode:
        sys.exit(f"packwise pack --engine {engine} failed:\n{proc.stderr[-3000:]}")
    report = json.loads(proc.stdout)
    work = sum(report["timings"].values())  # read .. write, as the command's own report times them
    return {"wall": wall, "work": work, "plan_hash": report["plan_hash"], "packs": report["packs"]}


def fit(small: tuple[int, float], large: tuple[int, float]) -> tuple[float, float]:
    """(a, b) of the line ``a + b × rows`` through two (rows, seconds) points."""
    (n1, t1), (n2, t2) = small, large
    b = (t2 - t1) / (n2 - n1)
    return t1 - b * n1, b


def crossover(local: tuple[float, float], ray: tuple[float, float]) -> float | None:
    """Rows where the Ray line passes local's; None when Ray's per-row cost is not below local's, or a fit
    is unresolved (a per-row cost ≤ 0: the noise of one machine's load exceeds the rows' cost; use more rows)."""
    (a_l, b_l), (a_r, b_r) = local, ray
    if b_l <= 0 or b_r <= 0 or b_r >= b_l:
        return None
    return max(0.0, (a_r - a_l) / (b_l - b_r))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--rows", type=int, default=200_000)
    ap.add_argument("--packs-per-shard", type=int, default=2000)
    ap.add_argument("--engines", default="local,ray1,ray2")
    ap.add_argument("--model-workers", default="4,8,16,32", help="K for the modelled crossover (b_ray1 / K)")
    add_common(ap)
    args = ap.parse_args()
    if args.quick:
        args.rows, args.engines = min(args.rows, 20_000), "local,ray2"
    engines = args.engines.split(",")
    if "local" not in engines or any(e != "local" and not (e.startswith("ray") and e[3:].isdigit()) for e in engines):
        sys.exit(f"--engines {args.engines!r}: local plus rayK (K Ray CPUs), e.g. local,ray1,ray2")
    rep = Report("ray", args)
    sizes = [max(1, args.rows // 4), args.rows]
    walls = {(e, n): [] for e in engines for n in sizes}
    works = {(e, n): [] for e in engines for n in sizes}
    hashes: dict[int, set[str]] = {n: set() for n in sizes}
    loads = []
    with tempfile.TemporaryDirectory() as tmp:
        data = {n: Path(tmp) / f"rows-{n}.parquet" for n in sizes}
        for n in sizes:
            tokens = make_input(data[n], n)
            rep.say(f"{n:,} rows, {tokens:,} tokens, {data[n].stat().st_size / 2**20:.1f} MiB Parquet")
        runs = iter(range(10_000))
        for _ in range(args.repeat):
            loads.append(round(os.getloadavg()[0], 2))
            for n in sizes:
                for e in engines:
                    r = run_cli(e, data[n], Path(tmp) / f"out{next(runs)}", args.packs_per_shard)
                    walls[e, n].append(r["wall"])
                    works[e, n].append(r["work"])
                    hashes[n].add(r["plan_hash"])
                    print(json.dumps({"engine": e, "rows": n, **r}), file=sys.stderr, flush=True)
    load = f"load {min(loads):.1f}–{max(loads):.1f}"
    med = {k: statistics.median(v) for k, v in walls.items()}
    rep.say(f"\nmedians of {args.repeat} interleaved repeats, whole CLI process ({load})\n")
    rep.say("| engine | " + " | ".join(f"{n:,} rows: s (spread)" for n in sizes)
            + " | fixed a s (spread) | per row b µs (spread) | two-point fit a s, b µs |")  # fmt: skip
    rep.say("|---|" + "---:|" * (len(sizes) + 3))
    two_point = {e: fit((sizes[0], med[e, sizes[0]]), (sizes[1], med[e, sizes[1]])) for e in engines}
    lines = {}
    for e in engines:
        fixed = [w - k for n in sizes for w, k in zip(walls[e, n], works[e, n])]
        per_row = [k / sizes[1] for k in works[e, sizes[1]]]
        lines[e] = (statistics.median(fixed), statistics.median(per_row))
        cells = [f"{med[e, n]:.2f} ({min(walls[e, n]):.2f}–{max(walls[e, n]):.2f})" for n in sizes]
        cells += [f"{lines[e][0]:.2f} ({min(fixed):.2f}–{max(fixed):.2f})",
                  f"{1e6 * lines[e][1]:.2f} ({1e6 * min(per_row):.2f}–{1e6 * max(per_row):.2f})",
                  f"{two_point[e][0]:.2f}, {1e6 * two_point[e][1]:.2f}"]  # fmt: skip
        rep.say(f"| {e} | " + " | ".join(cells) + " |")
    n = sizes[1]
    for e in engines:
        if e == "local":
            continue
        ratios = [r / lo for r, lo in zip(walls[e, n], walls["local", n])]
        rep.figure(
            f"{e} vs local, {n:,} rows, whole CLI process ({load})",
            med[e, n],
            unit="s",
            baseline="local engine s",
            baseline_value=med["local", n],
            ratio=statistics.median(ratios),
            ratio_means="median of per-repeat Ray time / local time (below 1: Ray is faster); spread: of those",
            spread=(min(ratios), max(ratios)),
        )
        x = crossover(lines["local"], lines[e])
        rep.figure(f"rows where {e} passes local (a + b × rows from measured costs)", x if x is not None else -1.0,
                   unit="rows", ratio_means="-1: never or unresolved (per-row cost not below local's, or a fit ≤ 0)")  # fmt: skip
    measured = sorted(int(e[3:]) for e in engines if e != "local")
    if measured:  # from the fewest workers measured: its per-row cost shared perfectly among K
        k0 = measured[0]
        a0, b0 = lines[f"ray{k0}"]
        for k in (int(k) for k in args.model_workers.split(",") if k):
            x = crossover(lines["local"], (a0, b0 * k0 / k))
            rep.figure(f"rows where Ray on {k} workers passes local (modelled: b_ray{k0} × {k0} / {k}, a_ray{k0})",
                       x if x is not None else -1.0, unit="rows", ratio_means="model; -1: never")  # fmt: skip
    same = all(len(h) == 1 for h in hashes.values())
    rep.figure("same plan hash for every engine and repeat", float(same), unit="", target=">= 1")
    rep.note(f"model (a s, b µs/row): {', '.join(f'{e} ({a:.2f}, {1e6 * b:.2f})' for e, (a, b) in lines.items())}")
    rep.finish()


if __name__ == "__main__":
    main()
