"""The CLI's text: counts in the singular when there is one, no trailing spaces when stdout is a pipe or file,
``loss on`` naming what the input's labels did, and the Ray engine's timing line naming its overflow step."""

from __future__ import annotations

import dataclasses
import io

from rich.console import Console

from packwise import pack_dataset
from packwise.cli import main
from packwise.cli._console import report_table
from packwise.report import pack_view, render_pack


def _pack_output(write_jsonl, tmp_path, capsys, rows) -> list[str]:
    out = tmp_path / "out"
    assert main(["pack", str(write_jsonl(rows)), "-o", str(out), "--capacity", "8", "--no-report"]) == 0
    return capsys.readouterr().out.split("\n")


def test_piped_pack_output_has_no_trailing_spaces_and_singular_counts(write_jsonl, tmp_path, capsys):
    lines = _pack_output(write_jsonl, tmp_path, capsys, [{"input_ids": [1, 2, 3]}])
    assert [line for line in lines if line != line.rstrip()] == []
    assert "rows             1 read · 0 skipped (bad) · 1 sample" in lines
    assert "truncated        0 tokens in 0 samples" in lines
    assert "split            0 samples into 0 extra sequences (no token lost)" in lines
    assert "settings         capacity 8 · best_fit_decreasing · overflow truncate · loss on all" in lines


def test_one_truncated_token_in_one_sample_is_singular(write_jsonl, tmp_path, capsys):
    lines = _pack_output(write_jsonl, tmp_path, capsys, [{"input_ids": list(range(9))}])
    assert "truncated        1 token in 1 sample" in lines


def test_loss_on_names_what_pre_tokenized_labels_did():
    ids_only = pack_dataset([{"input_ids": [1, 2, 3]}], capacity=8)[1]
    unmasked = pack_dataset([{"input_ids": [1, 2, 3], "labels": [1, 2, 3]}], capacity=8)[1]
    all_mask = pack_dataset([{"input_ids": [1, 2, 3], "loss_mask": [1, 1, 1]}], capacity=8)[1]
    masked = pack_dataset([{"input_ids": [1, 2, 3], "labels": [-100, -100, 3]}], capacity=8)[1]
    loss_mask = pack_dataset([{"input_ids": [1, 2, 3], "loss_mask": [1, 0, 1]}], capacity=8)[1]
    assert [r.loss_on for r in (ids_only, unmasked, all_mask, masked, loss_mask)] == [
        "all", "all", "all", "labels", "labels"
    ]  # fmt: skip


def _time_row(report) -> str:
    console = Console(file=io.StringIO(), width=200, color_system=None)
    console.print(report_table(report))
    [row] = [line.rstrip() for line in console.file.getvalue().splitlines() if line.startswith("time")]
    return row


def test_the_ray_engines_timing_line_names_overflow_inside_tokenize():
    report = pack_dataset([{"input_ids": [1, 2, 3]}], capacity=8)[1]
    local = dataclasses.replace(report, timings={"read": 0.1, "tokenize": 0.2, "overflow": 0.3, "plan": 0.4})
    ray = dataclasses.replace(report, timings={"read": 0.1, "tokenize": 0.2, "plan": 0.4})  # pack_ray's keys
    assert _time_row(local) == "time             read 0.10s · tokenize 0.20s · overflow 0.30s · plan 0.40s"
    assert _time_row(ray) == "time             read 0.10s · tokenize+overflow 0.20s · plan 0.40s"


def test_inspect_says_one_document(write_jsonl, tmp_path):
    out = tmp_path / "out"
    assert main(["pack", str(write_jsonl([{"input_ids": [1, 2, 3]}])), "-o", str(out), "--capacity", "8", "-q"]) == 0
    console = Console(file=io.StringIO(), width=100, color_system=None)
    console.print(render_pack({**pack_view(out, 0), "path": "out"}))
    first = console.file.getvalue().splitlines()[0].rstrip()
    assert first == "pack 0 of 1 · 3 of 8 tokens (37.5 % full) · 1 document · 2 loss tokens"


def test_padding_avoided_says_none_when_the_packs_hold_more_slots(write_jsonl, tmp_path, capsys):
    """One 3-token sample in an 8-token pack: pad-to-longest holds 3 slots, the pack 8, pad-to-capacity 8."""
    lines = _pack_output(write_jsonl, tmp_path, capsys, [{"input_ids": [1, 2, 3]}])
    [row] = [line for line in lines if line.startswith("padding avoided")]
    assert row.split(None, 2)[2] == "none (5 tokens more) vs pad-to-longest (batch 1), 0 tokens vs pad-to-capacity"


def test_report_md_counts_in_the_singular(write_jsonl, tmp_path):
    out = tmp_path / "out"
    assert main(["pack", str(write_jsonl([{"input_ids": [1, 2, 3]}])), "-o", str(out), "--capacity", "8"]) == 0
    text = (out / "report.md").read_text()
    assert "1 row read, 0 skipped (bad), 1 sample." in text
