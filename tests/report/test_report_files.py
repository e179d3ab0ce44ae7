"""report.json / report.md / plots: figures equal the run's PackingMetrics; plots are real PNGs."""

from __future__ import annotations

import dataclasses
import json
import sys

import pytest
import typer
from typer.testing import CliRunner

from packwise.cli import main
from packwise.cli._report import report
from packwise.files._write import read_metadata
from packwise.pipeline import pack_dataset
from packwise.plan import plan_packs
from packwise.report import PLOT_FILES, load_report, write_report

ROWS = [{"input_ids": list(range(1, n + 1))} for n in (5, 3, 7, 2, 6, 1)]
PNG_SIGNATURE = b"\x89PNG\r\n\x1a\n"


@pytest.fixture
def packed(write_jsonl, tmp_path):
    data = write_jsonl(ROWS)
    out = tmp_path / "out"
    assert main(["pack", str(data), "-o", str(out), "--capacity", "8", "-q"]) == 0
    return data, out


def _app() -> typer.Typer:
    app = typer.Typer()
    app.command()(report)
    app.command("noop")(lambda: None)  # two commands, so the command name is part of the argv
    return app


def test_report_json_equals_packing_metrics(packed):
    data, out = packed
    files = write_report(out)
    assert [f.name for f in files] == ["report.json", "report.md", *PLOT_FILES.values()]
    rep = json.loads((out / "report.json").read_text())
    # the same plan computed directly: BFD at C=8 on 5,3,7,2,6,1 -> [7,1] [6,2] [5,3]
    expected = plan_packs([5, 3, 7, 2, 6, 1], capacity=8, algorithm="bfd").metrics()
    assert rep["metrics"] == expected.to_dict()
    # every figure of metadata.json (the run's PackReport without timings) is copied exactly
    meta = read_metadata(out)
    for key in set(meta) - {"format", "shards"}:
        assert rep[key] == meta[key], key
    assert "timings" not in rep and rep["format"] == "packwise-report-v1"
    m = rep["metrics"]
    # batch_size round(6/3) = 2: batches [5,3] [7,2] [6,1] padded to 5, 7, 6 -> 10 + 14 + 12 = 36 tokens
    assert (m["num_packs"], m["lower_bound_packs"], m["total_tokens"], m["utilisation"]) == (3, 3, 24, 1.0)
    assert (m["pad_to_longest_tokens"], m["pad_to_capacity_tokens"], m["speedup_ceiling"]) == (36, 48, 2.0)
    # lengths 1..8 in bins of one token; every pack holds 8 tokens
    assert rep["histograms"] == {
        "sequence_length": {"bin_edges": [0, 1, 2, 3, 4, 5, 6, 7, 8], "counts": [1, 1, 1, 0, 1, 1, 1, 0]},
        "pack_tokens": {"bin_edges": [0, 1, 2, 3, 4, 5, 6, 7, 8], "counts": [0, 0, 0, 0, 0, 0, 0, 3]},
    }
    assert rep["plots"] == list(PLOT_FILES.values()) and rep["plots_skipped"] is None


def test_in_process_report_matches_regenerated(packed):
    data, out = packed
    _, run = pack_dataset(str(data), capacity=8)
    assert run.timings  # the in-process report has timings; report.json never does
    write_report(out, run, plots=False)
    first = (out / "report.json").read_bytes()
    assert json.loads(first)["metrics"] == dataclasses.asdict(run.metrics)
    write_report(out, plots=False)  # from metadata.json, as `packwise report` does
    assert (out / "report.json").read_bytes() == first
    assert load_report(out).metrics == run.metrics


def test_plots_are_png_and_deterministic(packed):
    _, out = packed
    write_report(out)
    first = {}
    for name in PLOT_FILES.values():
        raw = (out / name).read_bytes()
        assert raw[:8] == PNG_SIGNATURE, name
        assert len(raw) > 5_000, (name, len(raw))
        first[name] = raw
    write_report(out)
    assert {name: (out / name).read_bytes() for name in PLOT_FILES.values()} == first


def test_markdown_has_the_figures_and_embeds_the_plots(packed):
    _, out = packed
    write_report(out)
    md = (out / "report.md").read_text()
    assert md.startswith("# packwise report — ")
    for line in [
        "| capacity (C) | 8 tokens |",
        "| read | 6 | 24 | 18 |",
        "| **packed** | 6 sequences | 24 (100.00 % of read) | 18 |",
        "| packs (P) | 3 |",
        "| utilisation | 1.0000 (24 of 24 token slots) |",
        "| pad-to-longest (batch 2) | 36 | 12 | 1.50× | 1.50× |",
        "| pad-to-capacity (N × C) | 48 | 24 | 2.00× | 2.00× |",
        "![Packed sequence lengths](report-lengths.png)",
        "![Pack fill](report-fill.png)",
        "![Tokens processed](report-tokens.png)",
        "![Speed-up ceiling](report-speedup.png)",
    ]:
        assert line in md.splitlines(), line


def test_without_matplotlib_writes_json_and_md(packed, monkeypatch):
    _, out = packed
    for png in out.glob("*.png"):  # in case `packwise pack` drew them already
        png.unlink()
    monkeypatch.setitem(sys.modules, "matplotlib", None)  # import matplotlib -> ImportError
    files = write_report(out)
    assert [f.name for f in files] == ["report.json", "report.md"]
    rep = json.loads((out / "report.json").read_text())
    assert rep["plots"] == [] and "pip install 'packwise[plot]'" in rep["plots_skipped"]
    assert "Plots skipped: matplotlib is not installed" in (out / "report.md").read_text()
    assert not list(out.glob("*.png"))


def test_report_refuses_modified_directory(packed):
    _, out = packed
    meta = json.loads((out / "metadata.json").read_text())
    meta["packs"] = 4
    (out / "metadata.json").write_text(json.dumps(meta))
    with pytest.raises(ValueError, match=r"says packs = 4 but the Parquet shards hold 3; .* re-run `packwise pack`"):
        write_report(out)


def test_report_rejects_bad_paths(tmp_path):
    with pytest.raises(ValueError, match=r"missing is not a directory; pass the output directory of `packwise pack`"):
        write_report(tmp_path / "missing")
    with pytest.raises(ValueError, match=r"is not a packwise packed dataset \(no metadata.json\)"):
        write_report(tmp_path)
    with pytest.raises(TypeError, match="report must be a PackReport, a metadata dict or None, got int"):
        write_report(tmp_path, 3)


def test_report_command_json_and_quiet(packed):
    _, out = packed
    runner = CliRunner()
    result = runner.invoke(_app(), ["report", str(out), "--json"])
    assert result.exit_code == 0, result.output
    payload = json.loads(result.stdout)
    assert payload["metrics"] == read_metadata(out)["metrics"]
    assert [p.rsplit("/", 1)[-1] for p in payload["files"]] == ["report.json", "report.md", *PLOT_FILES.values()]
    result = runner.invoke(_app(), ["report", str(out), "-q", "--no-plots"])
    assert result.exit_code == 0 and result.stdout == ""
    assert json.loads((out / "report.json").read_text())["plots_skipped"].startswith("disabled")


def test_report_command_table(packed):
    _, out = packed
    result = CliRunner().invoke(_app(), ["report", str(out)])
    assert result.exit_code == 0, result.output
    assert "packs            3 (lower bound 3, +0.000 %)" in result.stdout
    assert "report.json, report.md, report-lengths.png" in result.stdout
