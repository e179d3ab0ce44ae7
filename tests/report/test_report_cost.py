"""The report's cost (issue 29): its read-back of the packs imports no pandas, refuses what it cannot read,
and matplotlib is imported on a thread while ``packwise pack`` works."""

from __future__ import annotations

import subprocess
import sys

import numpy as np
import pyarrow as pa
import pytest

from packwise.cli import main
from packwise.report import load_report
from packwise.report._plots import preload, write_plots
from packwise.report._stats import _ints, read_pack_stats

ROWS = [{"input_ids": list(range(1, n + 1))} for n in (5, 3, 7, 2, 6, 1)]


def test_read_pack_stats_imports_no_pandas(write_jsonl, tmp_path):
    out = tmp_path / "out"
    assert main(["pack", str(write_jsonl(ROWS)), "-o", str(out), "--capacity", "8", "--no-report", "-q"]) == 0
    stats = read_pack_stats(out)  # BFD at 8: [7, 1] [6, 2] [5, 3]
    assert stats.seq_lengths.tolist() == [7, 1, 6, 2, 5, 3]
    assert stats.pack_tokens.tolist() == [8, 8, 8] and stats.pack_sequences.tolist() == [2, 2, 2]
    code = f"import sys; from packwise.report._stats import read_pack_stats; read_pack_stats({str(out)!r}); " \
           "print('pandas' in sys.modules)"  # fmt: skip
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert proc.stdout.strip() == "False"  # Array.to_numpy imports pandas: ~1.5 s of every report


def test_ints_reads_sliced_arrays_and_refuses_other_types():
    lists = pa.array([[1, 2], [3], [4, 5, 6]], type=pa.list_(pa.int32())).slice(1)
    assert _ints(lists.flatten(), "f").tolist() == [3, 4, 5, 6]
    assert np.diff(_ints(lists.offsets, "f")).tolist() == [1, 3]
    assert _ints(pa.array([], type=pa.int64()), "f").tolist() == []
    with pytest.raises(ValueError, match="f: seq_lengths holds double, not integers"):
        _ints(pa.array([1.0]), "f")


def test_preload_then_plots(write_jsonl, tmp_path):
    out = tmp_path / "out"
    assert main(["pack", str(write_jsonl(ROWS)), "-o", str(out), "--capacity", "8", "--no-report", "-q"]) == 0
    thread = preload()
    paths = write_plots(out, load_report(out), read_pack_stats(out))  # joins the thread first
    assert not thread.is_alive()
    assert [p.name for p in paths] == ["report-lengths.png", "report-fill.png", "report-tokens.png",
                                       "report-speedup.png"]  # fmt: skip
    assert all(p.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" for p in paths)
