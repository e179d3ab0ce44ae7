"""Ray engine benchmark: pre-tokenized rows packed by the local engine and by ``pack_ray`` on 1 and 2 CPUs.

    python benchmarks/bench_ray.py                  # 200,000 rows (about 2 minutes on 2 cores)
    python benchmarks/bench_ray.py --rows 1000000   # the 1 M-row run of issue 11 (about 5 minutes)

Input: one Parquet file of ``--rows`` rows, ``input_ids`` of lognormal(4.0, 1.0) lengths clipped to
[1, 2048] (median 55, mean 90 tokens), random ids below 150,000, row groups of 65,536 rows. Each run is a
fresh process writing the ``packwise pack`` format (BFD, capacity 2048, ``--packs-per-shard`` packs per
shard). Ray runs start their own local instance (``ray.init`` time reported apart) and warm their workers
on a 1,000-row slice first, so the wall time is packing, not worker start-up. Driver memory is the
tracemalloc peak while packing (Python and numpy allocations; modules are imported before tracing) and the
process's peak RSS. The Ray driver holds per-row lengths and the plan, never tokens: a second ``ray2`` run
on a quarter of the rows gives the driver's bytes per extra row. Every full-size run must give the same
plan hash.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import subprocess
import sys
import tempfile
import time
import tracemalloc
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


def _spin(_) -> float:
    t, x = time.perf_counter(), 0
    for i in range(20_000_000):
        x += i
    return time.perf_counter() - t


def cpu_scaling() -> float:
    """What 2 processes get on this machine: pure-Python work, 1 vs 2 at once (the ceiling for Ray's ratio)."""
    import multiprocessing

    one = _spin(0)
    with multiprocessing.get_context("spawn").Pool(2) as pool:
        t = time.perf_counter()
        pool.map(_spin, [0, 1])
        return 2 * one / (time.perf_counter() - t)


def run_one(engine: str, data: str, out: str, per_shard: int) -> dict:
    """One engine in this process: wall time, tracemalloc peak and peak RSS of the driver."""
    import packwise.cli._pack
    import packwise.integrations.ray
    import packwise.pipeline  # imported before tracing: modules are not the driver data

    options = {"capacity": CAPACITY, "packs_per_shard": per_shard}
    init = 0.0
    if engine.startswith("ray"):
        os.environ.setdefault("RAY_AUTH_MODE", "disabled")
        import ray

        t = time.perf_counter()
        ray.init(num_cpus=int(engine[3:]), include_dashboard=False, log_to_driver=False)
        init = time.perf_counter() - t
        warm = Path(out).with_name("warm.parquet")
        pq.write_table(pq.read_table(data).slice(0, 1000), warm)
        packwise.integrations.ray.pack_ray(str(warm), Path(out).with_name("warm"), overwrite=True, **options)
    tracemalloc.start()
    t = time.perf_counter()
    if engine == "local":
        packed, report = packwise.pipeline.pack_columns(data, capacity=CAPACITY)
        packwise.pipeline.write_packs(packed, report, out, packs_per_shard=per_shard)
    else:
        report = packwise.integrations.ray.pack_ray(data, out, **options)
    wall = time.perf_counter() - t
    peak = tracemalloc.get_traced_memory()[1]
    tracemalloc.stop()
    rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
    timings = {k: round(v, 2) for k, v in report.timings.items()}
    return {"engine": engine, "wall": wall, "init": init, "traced": peak, "rss": rss, "timings": timings,
            "plan_hash": report.plan_hash, "packs": report.packs, "tokens": report.tokens_packed}  # fmt: skip


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--rows", type=int, default=200_000)
    ap.add_argument("--packs-per-shard", type=int, default=2000)
    ap.add_argument("--engines", default="local,ray1,ray2")
    ap.add_argument("--one", nargs=3, metavar=("ENGINE", "DATA", "OUT"), help=argparse.SUPPRESS)
    add_common(ap)
    args = ap.parse_args()
    if args.one:
        print("RESULT " + json.dumps(run_one(*args.one, args.packs_per_shard)), flush=True)
        return
    if args.quick:
        args.rows, args.engines = min(args.rows, 20_000), "local,ray2"
    rep = Report("ray", args)
    rep.note("Each engine runs once, in a fresh process (--repeat does not apply: Ray start-up dominates repeats).")
    quarter = args.rows // 4
    ceiling = cpu_scaling()
    results = []
    with tempfile.TemporaryDirectory() as tmp:
        data, small = Path(tmp) / "rows.parquet", Path(tmp) / "quarter.parquet"
        tokens = make_input(data, args.rows)
        make_input(small, quarter)
        rep.say(f"{args.rows:,} rows, {tokens:,} tokens, {data.stat().st_size / 2**20:.0f} MiB Parquet")
        runs = [(e, data, args.rows) for e in args.engines.split(",")] + [("ray2", small, quarter)]
        for engine, path, rows in runs:
            out = Path(tmp) / f"{engine}-{rows}" / "out"
            out.parent.mkdir()
            cmd = [sys.executable, __file__, "--one", engine, str(path), str(out)]
            cmd += ["--packs-per-shard", str(args.packs_per_shard)]
            proc = subprocess.run(cmd, capture_output=True, text=True, check=False)
            lines = [line for line in proc.stdout.splitlines() if line.startswith("RESULT ")]
            if proc.returncode or not lines:
                sys.exit(f"{engine} failed:\n{proc.stdout[-2000:]}\n{proc.stderr[-3000:]}")
            results.append({**json.loads(lines[0][7:]), "rows": rows})
            print(json.dumps(results[-1]), file=sys.stderr, flush=True)
    full = {r["engine"]: r for r in results[:-1]}
    rep.say("\n| engine | rows | wall s | ray.init s | driver traced peak MiB | driver peak RSS MiB | packs |")
    rep.say("|---|---|---|---|---|---|---|")
    for r in results:
        row = (r["engine"], f"{r['rows']:,}", f"{r['wall']:.1f}", f"{r['init']:.1f}", f"{r['traced'] / 2**20:.1f}",
               f"{r['rss'] / 2**20:.0f}", f"{r['packs']:,}")  # fmt: skip
        rep.say("| " + " | ".join(row) + " |")
    local = full.get("local")
    for name, r in full.items():
        rep.figure(
            f"{name} wall time, {args.rows:,} rows",
            r["wall"],
            unit="s",
            baseline="local engine s" if local else None,
            baseline_value=local["wall"] if local else None,
            ratio=local["wall"] / r["wall"] if local else None,
            ratio_means="local time / engine time (higher is better)",
        )
    if "ray1" in full and "ray2" in full:
        rep.figure(
            "scaling 1 -> 2 Ray workers",
            full["ray1"]["wall"] / full["ray2"]["wall"],
            unit="×",
            baseline="2 busy processes on this machine",
            baseline_value=ceiling,
            ratio_means="measured scaling / machine ceiling",
        )
    if "ray2" in full:
        slope = (full["ray2"]["traced"] - results[-1]["traced"]) / (args.rows - quarter)
        rep.figure(f"Ray driver memory per extra row ({quarter:,} -> {args.rows:,} rows)", slope, unit="bytes",
                   ratio_means="absolute")  # fmt: skip
    same = len({r["plan_hash"] for r in results[:-1]}) == 1
    rep.figure("same plan hash in every full-size run", int(same), unit="bool", met=same, ratio_means="absolute")
    rep.finish()


if __name__ == "__main__":
    main()
