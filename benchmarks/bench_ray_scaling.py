"""Ray engine scaling: driver memory, rows/s and object-store use at 1 M, 4 M, 16 M pre-tokenized rows.

    python benchmarks/bench_ray_scaling.py --rows 1e6,4e6,16e6 --cpus 1,2 [--local-upto 4e6] [--inputs DIR]
    python benchmarks/bench_ray_scaling.py --quick --json   # 100 k and 400 k rows, 1 worker; one JSON object

Input: one Parquet file per size, ``input_ids`` of lognormal(2.5, 0.8) lengths clipped to [1, 256] (median 12,
mean 17 tokens: short rows, so 16 M rows fit this 2-core, 24 GB machine), random ids below 150,000, row groups
of 65,536. Each run is a fresh process: ``ray.init(num_cpus=k)`` then ``pack_ray`` (BFD, capacity 1024,
2,000 packs per shard: several writer groups). Measured in that process:

- driver peak: tracemalloc's peak during ``pack_ray`` (Python + numpy allocations of the driver), the peak of
  the process's private resident memory (``RssAnon``, sampled every 0.2 s) and of its resident *shared*
  memory (``RssShmem``: object-store pages the driver read, e.g. while streaming the plan hash; they belong
  to the object store), and the process's peak RSS (``ru_maxrss``, both together);
- object store: the peak rise of ``/dev/shm`` use over its use before ``pack_ray`` (plasma lives there;
  sampled every 0.2 s; the machine is shared, so other Ray sessions add noise) and the bytes in the session's
  spill directory at their peak;
- packwise's spill: the peak bytes in the output's ``.packwise-spill`` folder (pass 1's tokenized pieces and
  pass 2's per-group rows; sampled every 0.2 s);
- rows/s: rows / wall time of ``pack_ray`` (workers warmed on a 1,000-row run first);
- equality: up to ``--local-upto`` rows the local engine packs the same file in its own process, and every
  output file of each Ray run is compared with its output byte for byte.

Figures (``--json``): per size and worker count the driver's peak private memory, rows/s and file equality
(target: equal); per worker count the driver's private-memory growth from the smallest to the largest size,
the baseline being the smallest size's figure measured in the same run (target ≤ 1.2×, #19).
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import subprocess
import sys
import tempfile
import threading
import time
import tracemalloc
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
from _harness import Report

CAPACITY = 1024


def make_input(path: Path, rows: int) -> int:
    rng = np.random.default_rng(0)
    writer, tokens = None, 0
    for a in range(0, rows, 1 << 20):
        n = min(1 << 20, rows - a)
        lengths = np.clip(np.rint(rng.lognormal(2.5, 0.8, n)), 1, 256).astype(np.int64)
        offsets = np.zeros(n + 1, dtype=np.int32)
        np.cumsum(lengths, out=offsets[1:])
        ids = rng.integers(0, 150_000, int(offsets[-1]), dtype=np.int32)
        table = pa.table({"input_ids": pa.ListArray.from_arrays(pa.array(offsets), pa.array(ids))})
        writer = writer or pq.ParquetWriter(path, table.schema)
        writer.write_table(table, row_group_size=65_536)
        tokens += int(offsets[-1])
    writer.close()
    return tokens


def _rss_kib() -> int:
    with open("/proc/self/status") as f:
        return next(int(line.split()[1]) for line in f if line.startswith("VmRSS"))


def run_one(path: str, out: str, cpus: int) -> dict:
    os.environ.setdefault("RAY_AUTH_MODE", "disabled")
    import ray

    from packwise.integrations.ray import pack_ray

    ray.init(num_cpus=cpus, include_dashboard=False, log_to_driver=False)
    spill = Path(ray._private.worker._global_node.get_session_dir_path())
    peak = {"shm": 0, "spill": 0, "anon": 0, "own_shm": 0, "pw_spill": 0}
    stop = threading.Event()

    def shm_used() -> int:
        st = os.statvfs("/dev/shm")
        return (st.f_blocks - st.f_bfree) * st.f_frsize

    def sample(base: int):
        while not stop.is_set():
            try:
                peak["shm"] = max(peak["shm"], shm_used() - base)
                with open("/proc/self/status") as f:
                    mine = {x.split(":")[0]: int(x.split()[1]) * 1024 for x in f if x.startswith("Rss")}
                peak["anon"] = max(peak["anon"], mine["RssAnon"])
                peak["own_shm"] = max(peak["own_shm"], mine["RssShmem"])
                spilled = sum(p.stat().st_size for p in spill.rglob("*spilled*/*") if p.is_file())
                peak["spill"] = max(peak["spill"], spilled)
                ours = sum(p.stat().st_size for p in Path(out).glob(".packwise-staging-*/.packwise-spill/**/*.*"))
                peak["pw_spill"] = max(peak["pw_spill"], ours)
            except OSError:
                pass
            time.sleep(0.2)

    warm = pq.ParquetFile(path).read_row_group(0).slice(0, 1000)  # not the whole file into the driver
    pack_ray(warm, out + "-warm", capacity=CAPACITY)
    threading.Thread(target=sample, args=(shm_used(),), daemon=True).start()
    rss0 = _rss_kib()
    tracemalloc.start()
    t = time.perf_counter()
    report = pack_ray(path, out, capacity=CAPACITY, packs_per_shard=2_000)
    wall = time.perf_counter() - t
    _, traced = tracemalloc.get_traced_memory()
    tracemalloc.stop()
    stop.set()
    maxrss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    ray.shutdown()
    return {
        "rows": report.rows_read, "tokens": report.tokens_packed, "packs": report.packs, "cpus": cpus,
        "wall_s": round(wall, 2), "rows_per_s": round(report.rows_read / wall), "driver_traced_peak_mb":
        round(traced / 2**20, 1), "driver_rss_rise_mb": round(max(0, maxrss - rss0) / 1024, 1), "driver_peak_rss_mb": round(maxrss / 1024),
        "driver_peak_private_mb": round(peak["anon"] / 2**20), "driver_peak_shared_mb": round(peak["own_shm"] / 2**20),
        "object_store_peak_mb": round(peak["shm"] / 2**20, 1), "spilled_peak_mb": round(peak["spill"] / 2**20, 1),
        "packwise_spill_mb": round(peak["pw_spill"] / 2**20, 1),
        "plan_hash": report.plan_hash[:16], "timings": {k: round(v, 2) for k, v in report.timings.items()},
    }  # fmt: skip


def run_local(path: str, out: str) -> dict:
    """The local engine on the same input (the equality check): its plan hash and wall time."""
    from packwise.pipeline import pack_columns, write_packs

    t = time.perf_counter()
    packed, report = pack_columns(path, capacity=CAPACITY)
    write_packs(packed, report, out, packs_per_shard=2_000)
    return {"engine": "local", "wall_s": round(time.perf_counter() - t, 2), "plan_hash": report.plan_hash[:16]}


def same_files(a: str, b: str) -> bool:
    names = sorted(p.name for p in Path(a).iterdir() if not p.name.startswith(".packwise"))
    other = sorted(p.name for p in Path(b).iterdir() if not p.name.startswith(".packwise"))
    return names == other and all((Path(a) / n).read_bytes() == (Path(b) / n).read_bytes() for n in names)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--rows", help="comma-separated row counts (default 1e6,4e6,16e6; --quick: 1e5,4e5)")
    ap.add_argument("--cpus", default="1,2")
    ap.add_argument("--local-upto", type=float, default=4e6, help="also run the local engine up to this size")
    ap.add_argument("--inputs", help="keep the generated input files in this folder (reused when present)")
    ap.add_argument("--json", action="store_true", help="print one JSON object (figures, baselines, ratios, pass/fail)")
    ap.add_argument("--quick", action="store_true", help="100 k and 400 k rows, 1 worker: about a minute")
    ap.add_argument("--one", nargs=3, help=argparse.SUPPRESS)
    ap.add_argument("--local", nargs=2, help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.one:
        print(json.dumps(run_one(args.one[0], args.one[1], int(args.one[2]))))
        return
    if args.local:
        print(json.dumps(run_local(*args.local)))
        return
    if args.quick:
        args.rows, args.cpus, args.local_upto = args.rows or "1e5,4e5", "1", 4e5
    args.rows = args.rows or "1e6,4e6,16e6"
    args.repeat = 1
    rep = Report("ray_scaling", args)
    private: dict[int, list[tuple[int, int]]] = {}
    with tempfile.TemporaryDirectory(dir=os.environ.get("BENCH_TMP")) as d:
        for rows in (int(float(r)) for r in args.rows.split(",")):
            path = Path(args.inputs or d) / f"rows-{rows}.parquet"
            if not path.exists():
                t = time.perf_counter()
                tokens = make_input(path, rows)
                rep.say(f"# {rows:,} rows, {tokens:,} tokens, input written in {time.perf_counter() - t:.1f} s")
            local = str(Path(d) / f"out-{rows}-local")
            if rows <= args.local_upto:
                cmd = [sys.executable, __file__, "--local", str(path), local]
                rep.say(_last_line(subprocess.run(cmd, capture_output=True, text=True, env=os.environ)))
            for cpus in (int(c) for c in args.cpus.split(",")):
                out = str(Path(d) / f"out-{rows}-{cpus}")
                cmd = [sys.executable, __file__, "--one", str(path), out, str(cpus)]
                res = subprocess.run(cmd, capture_output=True, text=True, env=os.environ)
                line = _last_line(res)
                rep.say(line)
                if res.returncode:
                    sys.exit(f"the Ray run at {rows:,} rows, {cpus} workers failed")
                run = json.loads(line)
                private.setdefault(cpus, []).append((rows, run["driver_peak_private_mb"]))
                at = f"{rows:,} rows, {cpus} worker{'s' if cpus != 1 else ''}"
                rep.figure(f"{at}: driver peak private memory", run["driver_peak_private_mb"], unit="MB")
                rep.figure(f"{at}: rows/s", run["rows_per_s"], unit="rows/s")
                if Path(local).is_dir() and Path(out).is_dir():
                    same = same_files(out, local)
                    rep.figure(f"{at}: files equal to the local engine's", int(same), unit="(1 = equal)", target=">= 1")
                subprocess.run(["rm", "-rf", out, out + "-warm"])
            subprocess.run(["rm", "-rf", local])
    for cpus, sizes in private.items():
        if len(sizes) > 1:
            (r0, m0), (r1, m1) = sizes[0], sizes[-1]
            rep.figure(
                f"{cpus} worker{'s' if cpus != 1 else ''}: driver private memory at {r1:,} rows vs {r0:,} rows",
                m1,
                unit="MB",
                baseline=f"at {r0:,} rows, MB",
                baseline_value=m0,
                ratio_means="growth of the driver's memory with the input (1.0 = flat)",
                target="<= 1.2",
            )
    rep.finish()


def _last_line(res: subprocess.CompletedProcess) -> str:
    return res.stdout.strip().splitlines()[-1] if res.stdout.strip() else res.stderr[-2000:]


if __name__ == "__main__":
    main()
