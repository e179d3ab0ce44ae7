"""Before/after: run benchmarks against two revisions of packwise, alternating, and compare every figure.

    python benchmarks/before_after.py --base 890fe1d [--benches assemble,stream,plan] [--repeat 3] [--full]
        [--bench-args '--labels hf']

The benchmark scripts of the working tree run against ``src/`` of ``--base`` (extracted with ``git archive``)
and against the working tree's ``src/``, alternating base/head ``--repeat`` times (``--quick`` unless
``--full``). For each figure: the median value and ratio of each side, and head/base, with the spread over
the repeats. Prints markdown, or one JSON object with ``--json``.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tarfile
import tempfile
from io import BytesIO
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def extract(rev: str, dest: Path) -> Path:
    blob = subprocess.run(["git", "-C", str(ROOT), "archive", rev, "src"], capture_output=True, check=True).stdout
    with tarfile.open(fileobj=BytesIO(blob)) as tar:
        tar.extractall(dest, filter="data")
    return dest / "src"


def run(bench: str, src: Path, full: bool, extra: list[str] = ()) -> dict:
    env = {**os.environ, "PYTHONPATH": str(src)}
    cmd = [sys.executable, str(ROOT / "benchmarks" / f"bench_{bench}.py"), "--json", *([] if full else ["--quick"])]
    cmd += extra
    proc = subprocess.run(cmd, capture_output=True, text=True, env=env, check=False)
    if proc.returncode:
        sys.exit(f"bench_{bench} failed against {src}:\n{proc.stderr[-3000:]}")
    return json.loads(proc.stdout)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--base", required=True, help="git revision of the 'before' side")
    ap.add_argument("--benches", default="assemble,stream,plan")
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--full", action="store_true")
    ap.add_argument("--json", action="store_true")
    ap.add_argument("--bench-args", default="", help="more arguments for every bench script, e.g. '--labels hf'")
    args = ap.parse_args()
    results: dict = {}
    with tempfile.TemporaryDirectory() as tmp:
        base_src = extract(args.base, Path(tmp))
        for bench in args.benches.split(","):
            for _ in range(args.repeat):
                for side, src in (("base", base_src), ("head", ROOT / "src")):
                    for f in run(bench, src, args.full, args.bench_args.split())["figures"]:
                        key = (bench, f["figure"])
                        results.setdefault(key, {"base": [], "head": []})[side].append(f)
    rows = []
    for (bench, name), sides in results.items():
        row = {"bench": bench, "figure": name}
        for side in ("base", "head"):
            vals = [f["value"] for f in sides[side]]
            ratios = [f["ratio"] for f in sides[side] if f["ratio"] is not None]
            row[side] = statistics.median(vals) if vals else None
            row[f"{side}_ratio"] = statistics.median(ratios) if ratios else None
            row[f"{side}_ratio_spread"] = [min(ratios), max(ratios)] if ratios else None
            row["unit"] = (sides[side] or sides["base"] or [{}])[0].get("unit", row.get("unit"))
            row["ratio_means"] = (sides[side] or [{}])[0].get("ratio_means", row.get("ratio_means"))
            if side == "head" and sides[side]:
                row["target"], row["pass"] = sides[side][-1]["target"], sides[side][-1]["pass"]
        rows.append(row)
    if args.json:
        print(json.dumps({"base": args.base, "repeat": args.repeat, "quick": not args.full, "rows": rows}, indent=2))
        return
    print(f"base {args.base} vs working tree; {args.repeat} alternating runs each, medians (spread of the ratio)\n")
    print("| bench | figure | before: value · ratio | after: value · ratio | target | met |")
    print("|---|---|---|---|---|---|")

    def cell(r, side):
        if r[side] is None:
            return "–"
        ratio = r[f"{side}_ratio"]
        spread = r[f"{side}_ratio_spread"]
        extra = f" · {ratio:.3g} ({spread[0]:.3g}–{spread[1]:.3g})" if ratio is not None else ""
        return f"{r[side]:.4g} {r['unit']}{extra}"

    for r in rows:
        met = {True: "yes", False: "**no**", None: "–"}[r.get("pass")]
        print(
            f"| {r['bench']} | {r['figure']} | {cell(r, 'base')} | {cell(r, 'head')} | {r.get('target') or '–'} | {met} |"
        )


if __name__ == "__main__":
    main()
