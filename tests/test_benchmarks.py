"""Every benchmark's ``--quick`` path runs on tiny inputs, so the scripts cannot rot (issue 29).

Each script runs in its own process with ``--json``; the test reads its one JSON object and checks the
figures a human can: the run was quick, it has figures, and its own validity checks held (same plan hash,
same packs). Timings are never asserted: speed lives in the scripts, as ratios. The ones that start
subprocess packs or Ray are ``slow``.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

ROOT = Path(__file__).resolve().parents[1]
BENCH = ROOT / "benchmarks"

QUICK = {
    "plan": ["--sizes", "2e3", "--repeat", "1"],
    "assemble": ["--packs", "16", "--repeat", "1", "--rounds", "1"],
    "plan_histogram": ["--n", "1e4"],
}
SLOW = {
    "stream": ["--samples", "20000", "--repeat", "1"],  # forks RSS-measuring children
    "train": ["--samples", "8", "--warmup", "0", "--repeat", "1"],
    "cli": ["--quick-rows", "20", "--repeat", "1"],
    "ray": ["--rows", "2000", "--repeat", "1"],
    "ray_scaling": ["--rows", "4e3"],
}


def run_bench(name: str, extra: list[str], timeout: int = 600) -> dict:
    env = {**os.environ, "PYTHONPATH": str(ROOT / "src"), "OMP_NUM_THREADS": "1"}
    cmd = [sys.executable, str(BENCH / f"bench_{name}.py"), "--quick", "--json", *extra]
    proc = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=timeout, check=False, cwd=ROOT)
    assert proc.returncode == 0, proc.stderr[-3000:]
    return json.loads(proc.stdout)


def _check(out: dict, name: str) -> None:
    assert out["benchmark"] == name and out["quick"] is True
    assert out["figures"], "a benchmark with no figure measured nothing"
    for f in out["figures"]:
        if f["figure"].startswith(("same ", "the same ")):  # the scripts' own validity checks
            assert f["pass"] is True, f


@pytest.mark.parametrize("name", sorted(QUICK))
def test_quick_path_runs(name):
    _check(run_bench(name, QUICK[name]), name)


@pytest.mark.slow
@pytest.mark.parametrize("name", sorted(SLOW))
def test_quick_path_runs_slow(name):
    _check(run_bench(name, SLOW[name]), name)


def _bench_plan():
    sys.path.insert(0, str(BENCH))
    try:
        import bench_plan
    finally:
        sys.path.remove(str(BENCH))
    return bench_plan


def test_peer_validation_counts_packs_from_split_points():
    """seqpacker's pack_flat gives split points (no 0, no N): P is len + 1, not len - 1 (issue 29)."""
    bp = _bench_plan()
    lengths = np.array([5, 3, 4, 4, 6, 2])  # L1 = ceil(24 / 8) = 3
    order = np.array([0, 1, 2, 3, 4, 5])  # packs [5, 3] [4, 4] [6, 2]
    assert bp.check_packing(order, [2, 4], lengths, 8, "peer") == 3
    assert bp.check_packing(order, [0, 2, 4, 6], lengths, 8, "peer") == 3


@pytest.mark.parametrize(
    ("order", "offsets", "why"),
    [
        ([0, 1, 2, 3, 4, 4], [0, 2, 4, 6], "not a permutation"),
        ([0, 2, 1, 3, 4, 5], [0, 2, 4, 6], "packs over capacity 8"),  # [5, 4] = 9
        ([0, 1, 2, 3, 4, 5], [0, 2, 2, 4, 6], "empty pack"),
    ],
)
def test_peer_validation_refuses_invalid_output(order, offsets, why):
    bp = _bench_plan()
    with pytest.raises(bp.PeerError, match=why):
        bp.check_packing(np.array(order), np.array(offsets), np.array([5, 3, 4, 4, 6, 2]), 8, "peer")


def test_peer_validation_refuses_a_count_below_l1():
    bp = _bench_plan()
    with pytest.raises(bp.PeerError, match="below the lower bound L1 = 3"):
        bp.check_count(2, np.array([5, 3, 4, 4, 6, 2]), 8, "peer")
    with pytest.raises(bp.PeerError, match="not the input lengths"):
        bp.check_multiset([[5, 3], [4, 4]], np.array([5, 3, 4, 4, 6, 2]), 8, "peer")
    assert bp.check_multiset([[5, 3], [4, 4], [6, 2]], np.array([5, 3, 4, 4, 6, 2]), 8, "peer") == 3


def test_summary_writes_readmes_only_with_write(tmp_path):
    saved = [{"benchmark": "plan", "date": "2026-12-02T00:00:00+00:00", "command": "python x", "wall_s": 1.0,
              "machine": {"cpus": 2, "processor": "cpu", "python": "3.11", "numpy": "2", "loadavg_1m": 1.0},
              "figures": [{"figure": "f", "value": 2.0, "unit": "s", "baseline": "b s", "baseline_value": 1.0,
                           "ratio": 2.0, "ratio_means": "", "target": "<= 3", "pass": True}]}]  # fmt: skip
    run = tmp_path / "run.json"
    run.write_text(json.dumps(saved))
    before = {p: p.read_bytes() for p in (ROOT / "README.md", BENCH / "README.md")}
    proc = subprocess.run([sys.executable, str(BENCH / "summary.py"), "--load", str(run)], capture_output=True,
                          text=True, check=False)  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    assert "| f | 2.00 s | b s: 1.00 | 2.00 | <= 3 | yes |" in proc.stdout
    assert "--write" in proc.stderr
    assert {p: p.read_bytes() for p in before} == before
