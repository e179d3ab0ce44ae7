"""``packwise plan``: algorithms x capacities on a file of lengths."""

from __future__ import annotations

import io
import json
import re

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
import typer
from rich.console import Console
from typer.testing import CliRunner

from packwise.cli import main
from packwise.cli._plan import plan, plan_table
from packwise.plan import ALGORITHMS
from packwise.report import compare_plans, read_lengths

LENGTHS = [6, 5, 4, 3, 2]


def _app() -> typer.Typer:
    app = typer.Typer()
    app.command()(plan)
    app.command("noop")(lambda: None)
    return app


def _run(*args: str) -> dict:
    result = CliRunner().invoke(_app(), ["plan", *args, "--json"])
    assert result.exit_code == 0, result.output
    return json.loads(result.stdout)


def _packs(result: dict) -> dict:
    return {(r["capacity"], r["algorithm"]): r["packs"] for r in result["rows"]}


def test_golden_capacity_10():
    r = compare_plans(LENGTHS, capacities=[10], algorithms=["greedy_knapsack", "next_fit", "bfd", "ffd"])
    # L1 = ceil(20 / 10) = 2. greedy knapsack and FFD/BFD fill [6,4] [5,3,2];
    # next fit closes a pack whenever the next length does not fit: [6] [5,4] [3,2]
    assert [(x["algorithm"], x["packs"], x["lower_bound"], x["utilisation"], x["excess_pct"]) for x in r["rows"]] == [
        ("greedy_knapsack", 2, 2, 1.0, 0.0),
        ("next_fit", 3, 2, 20 / 30, 50.0),
        ("best_fit_decreasing", 2, 2, 1.0, 0.0),
        ("first_fit_decreasing", 2, 2, 1.0, 0.0),
    ]
    assert (r["sequences"], r["tokens"], r["skipped"]) == (5, 20, [])
    assert r["clipped"] == [{"capacity": 10, "sequences": 0, "tokens_cut": 0}]


def test_clipping_per_capacity():
    r = compare_plans(LENGTHS, capacities=[10, 4], algorithms=["bfd"])
    # at C=4: 6 and 5 are clipped to 4 (3 tokens cut) -> 4,4,4,3,2 = 17 tokens, L1 = ceil(17/4) = 5
    assert r["clipped"] == [
        {"capacity": 10, "sequences": 0, "tokens_cut": 0},
        {"capacity": 4, "sequences": 2, "tokens_cut": 3},
    ]
    row = r["rows"][1]
    assert (row["capacity"], row["packs"], row["lower_bound"], row["utilisation"], row["clipped"]) == (4, 5, 5, 0.85, 2)


def test_first_fit_shuffle_skipped_above_limit_unless_named():
    r = compare_plans(LENGTHS, capacities=[10], ffs_limit=4)
    assert r["algorithms"] == [a for a in ALGORITHMS if a != "first_fit_shuffle"]
    assert r["skipped"] == [
        {
            "algorithm": "first_fit_shuffle",
            "reason": "5 sequences > 4 (item-level Python); name it in --algorithm to run it anyway",
        }
    ]
    named = compare_plans(LENGTHS, capacities=[10], algorithms=["ffs"], ffs_limit=4)
    assert named["algorithms"] == ["first_fit_shuffle"] and named["skipped"] == []
    assert compare_plans(LENGTHS, capacities=[10])["algorithms"] == list(ALGORITHMS)


@pytest.mark.parametrize("kind", ["txt", "npy", "parquet-length", "parquet-seq_lengths"])
def test_command_reads_every_lengths_format(kind, tmp_path):
    if kind == "txt":
        path = tmp_path / "l.txt"
        path.write_text("6\n5\n\n4\n3\n2\n")
    elif kind == "npy":
        path = tmp_path / "l.npy"
        np.save(path, np.array(LENGTHS, dtype=np.int32))
    elif kind == "parquet-length":
        path = tmp_path / "l.parquet"
        pq.write_table(pa.table({"id": [0, 1, 2, 3, 4], "length": LENGTHS}), path)
    else:
        path = tmp_path / "l.parquet"
        pq.write_table(pa.table({"seq_lengths": [[6, 5], [4], [3, 2]]}), path)
    assert read_lengths(path).tolist() == LENGTHS
    r = _run(str(path), "--capacity", "10", "--algorithm", "greedy_knapsack,next_fit")
    assert _packs(r) == {(10, "greedy_knapsack"): 2, (10, "next_fit"): 3}
    assert r["source"] == str(path)


def test_command_from_packed_directory(write_jsonl, tmp_path):
    rows = [{"input_ids": list(range(1, n + 1))} for n in LENGTHS]
    out = tmp_path / "out"
    assert main(["pack", str(write_jsonl(rows)), "-o", str(out), "--capacity", "10", "-q"]) == 0
    r = _run("--from", str(out), "--capacity", "10,4", "--algorithm", "next_fit,bfd")
    assert (r["sequences"], r["tokens"]) == (5, 20)
    assert _packs(r)[(10, "best_fit_decreasing")] == 2 and _packs(r)[(4, "best_fit_decreasing")] == 5
    # lengths come back in input order (source_index), not as BFD grouped them ([6, 4], [5, 3, 2]): next fit
    # over the file's order 6, 5, 4, 3, 2 needs 3 packs, as on the file itself, not the 2 of the packed order
    assert _packs(r)[(10, "next_fit")] == 3


def test_command_table(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)  # a short relative path: the header line's width does not depend on pytest's tmp dir
    path = tmp_path / "l.txt"
    path.write_text("\n".join(map(str, LENGTHS)))
    path = path.relative_to(tmp_path)
    result = CliRunner().invoke(_app(), ["plan", str(path), "--capacity", "10,4", "--algorithm", "bfd,next_fit"])
    assert result.exit_code == 0, result.output
    text = result.stdout
    assert text.startswith(f"packwise plan — {path}: 5 sequences, 20 tokens")
    assert re.search(r"│\s+10 │ next_fit\s+│\s+3 │\s+2 │\s+0\.6667 │\s+50\.000 % │", text)
    assert re.search(r"│\s+4 │ best_fit_decreasing\s+│\s+5 │\s+5 │\s+0\.8500 │\s+0\.000 % │", text)
    assert "capacity 4: 2 sequences over it clipped (3 tokens cut)" in text


def test_table_caption_lists_skipped_algorithms():
    r = compare_plans(LENGTHS, capacities=[10], ffs_limit=4)
    console = Console(file=io.StringIO(), width=200, color_system=None)
    console.print(plan_table("x", r))
    text = console.file.getvalue()
    assert "no sequence is longer than any capacity (nothing clipped)" in text
    assert "first_fit_shuffle skipped: 5 sequences > 4 (item-level Python)" in text


def test_errors_name_value_limit_and_fix(tmp_path):
    bad = tmp_path / "bad.txt"
    bad.write_text("6\nfive\n")
    with pytest.raises(ValueError, match=r"bad.txt:2: 'five' is not an integer; write one length \(tokens\) per line"):
        read_lengths(bad)
    zero = tmp_path / "zero.txt"
    zero.write_text("3\n0\n")
    with pytest.raises(ValueError, match=r"zero.txt: sequence 1 has length 0; every length must be >= 1 token"):
        read_lengths(zero)
    other = tmp_path / "l.csv"
    other.write_text("1\n")
    with pytest.raises(ValueError, match=r"unsupported suffix '.csv'; pass a .npy, .parquet, .txt file"):
        read_lengths(other)
    pq.write_table(pa.table({"n": [1]}), tmp_path / "n.parquet")
    with pytest.raises(ValueError, match=r"has no length column \(columns: \['n'\]\); name it one of length, lengths"):
        read_lengths(tmp_path / "n.parquet")
    with pytest.raises(ValueError, match=r"is a directory; pass a packed dataset with --from"):
        read_lengths(tmp_path)
    with pytest.raises(ValueError, match=r"pass LENGTHS or --from DIR, not neither"):
        plan(None)
    with pytest.raises(
        ValueError, match=r"--capacity '10,abc': 'abc' is not an integer >= 1; pass e.g. 2048,4096,8192"
    ):
        plan(bad, capacity="10,abc")
    with pytest.raises(ValueError, match=r"unknown packing algorithm 'magic'; valid names"):
        plan(bad, algorithm="bfd,magic")
