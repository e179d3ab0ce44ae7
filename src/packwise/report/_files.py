"""``report.json``, ``report.md`` and the plots of a packed dataset directory."""

from __future__ import annotations

import dataclasses
import json
import os
from collections.abc import Mapping
from dataclasses import MISSING
from pathlib import Path

from ..pipeline import PackReport
from ..plan import PackingMetrics
from ._plots import PLOT_TITLES, plot_dependency_error, write_plots
from ._stats import FILL_BINS, LENGTH_BINS, PackStats, check_stats, histogram, read_pack_stats

REPORT_FORMAT = "packwise-report-v1"
REPORT_JSON = "report.json"
REPORT_MD = "report.md"


def report_from_metadata(meta: Mapping, *, source: str = "metadata.json") -> PackReport:
    """Rebuild the :class:`PackReport` of ``packwise pack`` from its ``metadata.json`` content (no timings).

    Raises:
        ValueError: a report field is missing, or ``metrics`` does not match :class:`PackingMetrics`.

    Example:
        >>> import dataclasses
        >>> from packwise.pipeline import pack_dataset
        >>> _, r = pack_dataset([{"input_ids": [1, 2, 3]}, {"input_ids": [4, 5]}], capacity=8)
        >>> report_from_metadata(dataclasses.asdict(r)).metrics == r.metrics
        True
    """
    fields = [f for f in dataclasses.fields(PackReport) if f.name != "timings"]
    names = [f.name for f in fields]
    optional = {f.name for f in fields if f.default is not MISSING or f.default_factory is not MISSING}
    missing = [n for n in names if n not in meta and n not in optional]
    if missing:
        raise ValueError(
            f"{source} lacks report field(s) {missing}; it was written by another packwise version — "
            "re-run `packwise pack` to rebuild the directory"
        )
    m = meta["metrics"]
    want = {f.name for f in dataclasses.fields(PackingMetrics)}
    if not isinstance(m, Mapping) or set(m) != want:
        got = sorted(m) if isinstance(m, Mapping) else type(m).__name__
        raise ValueError(
            f"{source}: metrics has fields {got}, expected {sorted(want)}; re-run `packwise pack` to rebuild it"
        )
    values = {n: meta[n] for n in names if n in meta}
    values["metrics"] = PackingMetrics(**m)
    values["skipped_examples"] = list(meta.get("skipped_examples", []))
    return PackReport(**values)


def load_report(path) -> PackReport:
    """The :class:`PackReport` of a ``packwise pack`` output directory, from its ``metadata.json``.

    Raises:
        ValueError: ``path`` does not exist or is not a packwise packed dataset.
    """
    from ..files import METADATA, read_metadata

    path = Path(path)
    if not path.is_dir():
        raise ValueError(f"{path} is not a directory; pass the output directory of `packwise pack`")
    return report_from_metadata(read_metadata(path), source=str(path / METADATA))


def report_dict(report: PackReport, stats: PackStats, *, plots: list[str], plots_skipped: str | None) -> dict:
    """The content of ``report.json``: every :class:`PackReport` field (``metrics`` nested, no timings), the
    histograms behind the plots, and the plot files.

    Histogram bins are ``(edges[i], edges[i+1]]`` tokens; ``pack_fill`` bins are tokens per pack (divide by
    the capacity for the fill fraction).
    """
    data = {"format": REPORT_FORMAT, **report.to_dict()}
    data.pop("timings", None)
    c = report.capacity
    edges, counts = histogram(stats.seq_lengths, c, LENGTH_BINS)
    fill_edges, fill_counts = histogram(stats.pack_tokens, c, FILL_BINS)
    data["histograms"] = {
        "sequence_length": {"bin_edges": edges, "counts": counts},
        "pack_tokens": {"bin_edges": fill_edges, "counts": fill_counts},
    }
    data["plots"] = plots
    data["plots_skipped"] = plots_skipped
    return data


def _n(x: int) -> str:
    return f"{x:,}"


def _pct(a: float, b: float) -> str:
    return f"{100.0 * a / b:.2f} %" if b else "–"


def _noun(x: int, noun: str) -> str:
    return f"{x:,} {noun}{'' if x == 1 else 's'}"  # 1 row, 2 rows (the console has the same rule)


def _table(header: tuple[str, ...], rows: list[tuple]) -> list[str]:
    lines = ["| " + " | ".join(header) + " |", "|" + "|".join("---" for _ in header) + "|"]
    lines += ["| " + " | ".join(str(v) for v in row) + " |" for row in rows]
    return [*lines, ""]


def report_markdown(data: dict) -> str:
    """``report.md``: the figures of ``report.json`` as Markdown tables, with the plots embedded.

    ``data`` is :func:`report_dict`'s output; exact values stay in ``report.json``, this rounds for reading.
    """
    r, m = data, data["metrics"]
    c = r["capacity"]
    slots = m["num_packs"] * c
    tok = f"{r['tokenizer']} (`{r['tokenizer_fingerprint']}`)" if r["tokenizer"] else "none (pre-tokenized)"
    lines = [
        f"# packwise report — {r['input']}",
        "",
        f"packwise {r['packwise_version']} · plan hash `{r['plan_hash'][:16]}` · exact figures in `{REPORT_JSON}`",
        "",
        "## Settings",
        "",
        *_table(
            ("setting", "value"),
            [
                ("capacity (C)", f"{_n(c)} tokens"),
                ("algorithm", r["algorithm"]),
                ("seed", "–" if r["seed"] is None else r["seed"]),
                ("overflow", r["overflow"]),
                ("loss on", r["loss_on"]),
                ("tokenizer", tok),
                ("input fingerprint", f"`{r['input_fingerprint']}`"),
            ],
        ),
        "## Token accounting",
        "",
        f"{_noun(r['rows_read'], 'row')} read, {_n(r['rows_skipped'])} skipped (bad), {_noun(r['samples'], 'sample')}.",
        "",
        f"Packs without a loss token: {_n(r.get('packs_without_loss', 0))} of {_n(r['packs'])}"
        + (
            f"; fields dropped: {', '.join(r['drop_fields'])} ({_noun(r['field_values_dropped'], 'value')})."
            if r.get("drop_fields")
            else "."
        ),
        "",
        *_table(
            ("", "samples", "tokens", "loss tokens"),
            [
                ("read", _n(r["samples"]), _n(r["tokens_read"]), _n(r["loss_tokens_read"])),
                (
                    "truncated",
                    _n(r["samples_truncated"]),
                    _n(r["tokens_truncated"]),
                    _n(r["loss_tokens_truncated"]),
                ),
                ("split (extra sequences)", f"{_n(r['samples_split'])} (+{_n(r['pieces_added'])})", "–", "–"),
                ("dropped", _n(r["samples_dropped"]), _n(r["tokens_dropped"]), _n(r["loss_tokens_dropped"])),
                ("masked at boundaries", "–", "–", _n(r["loss_tokens_masked_at_boundary"])),
                (
                    "**packed**",
                    f"{_n(r['sequences_packed'])} sequences",
                    f"{_n(r['tokens_packed'])} ({_pct(r['tokens_packed'], r['tokens_read'])} of read)",
                    _n(r["loss_tokens_packed"]),
                ),
            ],
        ),
        "## Packing",
        "",
        *_table(
            ("metric", "value"),
            [
                ("packs (P)", _n(r["packs"])),
                ("lower bound (L1)", f"{_n(m['lower_bound_packs'])} (+{m['excess_packs_pct']:.3f} % over L1)"),
                ("utilisation", f"{m['utilisation']:.4f} ({_n(m['total_tokens'])} of {_n(slots)} token slots)"),
                ("waste", f"{_n(m['waste_tokens'])} tokens"),
                ("fill min / mean / max", f"{m['fill_min']:.3f} / {m['fill_mean']:.3f} / {m['fill_max']:.3f}"),
                ("fill balance", f"{m['fill_balance']:.3f}"),
                ("sequences per pack", f"up to {m['max_sequences_in_pack']}"),
            ],
        ),
        "## Tokens processed and speed-up",
        "",
        "Speed-ups count tokens processed, not FLOPs; the ceiling of a baseline is 1 / (1 − its waste).",
        "",
        *_table(
            ("layout", "tokens processed", "padding avoided by packing", "speed-up", "ceiling"),
            [
                ("real tokens", _n(m["total_tokens"]), "–", "–", "–"),
                ("packed (P × C)", _n(slots), "–", "1.00×", "–"),
                (
                    f"pad-to-longest (batch {m['batch_size']})",
                    _n(m["pad_to_longest_tokens"]),
                    _n(m["padding_avoided_vs_longest"]),
                    f"{m['speedup_vs_longest']:.2f}×",
                    f"{m['speedup_ceiling_vs_longest']:.2f}×",
                ),
                (
                    "pad-to-capacity (N × C)",
                    _n(m["pad_to_capacity_tokens"]),
                    _n(m["padding_avoided_vs_capacity"]),
                    f"{m['speedup_vs_capacity']:.2f}×",
                    f"{m['speedup_ceiling']:.2f}×",
                ),
            ],
        ),
        "## Plots",
        "",
    ]
    if r["plots"]:
        for name in r["plots"]:
            lines += [f"![{PLOT_TITLES.get(name, name)}]({name})", ""]
    else:
        lines += [f"Plots skipped: {r['plots_skipped']}", ""]
    if r.get("multimodal"):
        lines += ["## Images", "", *_table(("field", "value"), [(k, v) for k, v in r["multimodal"].items()])]
    if r.get("skipped_examples"):
        lines += ["## Skipped rows (first examples)", "", *(f"- {msg}" for msg in r["skipped_examples"]), ""]
    return "\n".join(lines)


def _write_atomic(path: Path, text: str) -> None:
    tmp = path.with_name(f".{path.name}.tmp-{os.getpid()}")
    try:
        tmp.write_text(text)
        os.replace(tmp, path)
    finally:
        tmp.unlink(missing_ok=True)


def write_report(out_dir, report: PackReport | Mapping | None = None, *, plots: bool = True) -> list[Path]:
    """Write ``report.json``, ``report.md`` and the PNG plots next to the data of a ``packwise pack`` output.

    Args:
        out_dir: the output directory of ``packwise pack`` (Parquet shards + ``metadata.json``).
        report: the run's :class:`PackReport`, or ``metadata.json`` content; default: read ``metadata.json``.
        plots: draw the plots (needs matplotlib, the ``plot`` extra). Without matplotlib the JSON and
            Markdown are still written and ``report.json``'s ``plots_skipped`` says why.

    Returns:
        The paths written: ``report.json``, ``report.md``, then the plots (``report-*.png``).

    Raises:
        ValueError: ``out_dir`` is not a packwise packed dataset, its shards disagree with the report, or a report
            file there was not written by packwise (or changed since): it is never overwritten.

    Example:
        >>> import json, tempfile
        >>> from pathlib import Path
        >>> from packwise.cli import main
        >>> d = Path(tempfile.mkdtemp())
        >>> _ = (d / "in.jsonl").write_text('{"input_ids": [1, 2, 3]}\\n{"input_ids": [4, 5]}\\n')
        >>> main(["pack", str(d / "in.jsonl"), "-o", str(d / "out"), "--capacity", "8", "-q"])
        0
        >>> [p.name for p in write_report(d / "out", plots=False)]
        ['report.json', 'report.md']
        >>> json.loads((d / "out" / "report.json").read_text())["metrics"]["utilisation"]
        0.625
    """
    out_dir = Path(out_dir)
    if report is None:
        report = load_report(out_dir)
    elif isinstance(report, Mapping):
        report = report_from_metadata(report)
    elif not isinstance(report, PackReport):
        raise TypeError(f"report must be a PackReport, a metadata dict or None, got {type(report).__name__}")
    stats = read_pack_stats(out_dir)
    check_stats(stats, report, out_dir)
    from ..files import check_replaceable

    check_replaceable(out_dir, [REPORT_JSON, REPORT_MD, *PLOT_TITLES])  # never over a file packwise did not write
    written: list[Path] = []
    skipped = None if plots else "disabled (plots=False / --no-plots)"
    if plots and (skipped := plot_dependency_error()) is None:
        written = write_plots(out_dir, report, stats)
    data = report_dict(report, stats, plots=[p.name for p in written], plots_skipped=skipped)
    json_path, md_path = out_dir / REPORT_JSON, out_dir / REPORT_MD
    _write_atomic(json_path, json.dumps(data, indent=2) + "\n")
    _write_atomic(md_path, report_markdown(data))
    from ..files import register_files

    register_files(out_dir, [p.name for p in (json_path, md_path, *written)])  # --overwrite may replace them
    return [json_path, md_path, *written]
