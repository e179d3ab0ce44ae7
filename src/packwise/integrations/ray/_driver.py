"""Ray engine, driver side: what the local engine would raise, the plan, its hash and metrics, the commit."""

from __future__ import annotations

import numpy as np

from ...files import metadata_text, write_metadata
from ...pipeline import PackOptions, PackReport
from ...pipeline.steps import PieceCounts, check_rows, plan, plan_from_histogram, plans_from_histogram
from ._fs import RemoteOutput
from ._spill import read_lengths
from ._workers import MEDIA_TYPES, PieceStats


def _check(stats: list[PieceStats], name: str, skip: bool) -> tuple[PieceCounts, list[str]]:
    """Raise what the local engine would raise first; else ``(the pieces' counts merged, skip messages)``."""
    errors = sorted((r, i, row, msg) for i, s in enumerate(stats) for r, row, msg in s.errors)
    fatal = next((s.fatal for s in stats if s.fatal), None)
    if errors and not skip and (errors[0][0] <= 1 or fatal is None):
        raise ValueError(errors[0][3])
    if fatal is not None:
        raise ValueError(fatal)
    _check_tokenizers(stats, name)
    counts = sum((s.counts for s in stats), PieceCounts())
    check_rows(name, counts)
    too_long = next((s.too_long for s in stats if s.too_long), None)
    if too_long is not None:
        raise ValueError(too_long)
    columns = {tuple(c for c in s.columns if c != MEDIA_TYPES) for s in stats if s.counts.sequences}
    if len(columns) > 1:
        raise ValueError(
            f"{name}: rows carry different per-token columns ({' vs '.join(map(str, sorted(columns)))}); give every "
            "row the same per-token columns, or use the local engine, which skips odd rows with --skip-bad-rows"
        )
    in_rows = sorted({(i, row, msg) for _, i, row, msg in errors})  # pieces are in input order
    return counts, [msg for *_, msg in in_rows[:5]]


def _check_tokenizers(stats: list[PieceStats], name: str) -> None:
    """Refuse a run whose pieces were tokenized by different tokenizers (workers on nodes that load different
    files or package versions): one output must come from one tokenizer, the one its report names."""
    first: dict[tuple, int] = {}
    for i, s in enumerate(stats):
        if s.tokenizer is not None:
            first.setdefault(tuple(s.tokenizer), i)
    if len(first) > 1:
        (a, i), (b, j) = list(first.items())[:2]
        raise ValueError(
            f"{name}: piece {i} was tokenized by {a[0]} (fingerprint {a[1]}) but piece {j} by {b[0]} (fingerprint "
            f"{b[1]}); the Ray workers loaded different tokenizers — give every node the same tokenizer files (a "
            "directory every node sees) and the same tokenizers/transformers versions, or use the local engine"
        )


def _plan(stats: list[PieceStats], options: PackOptions):
    """The plan step on the driver: a :class:`HistogramPlan` from the pieces' length histograms (the driver
    never sees a per-sequence array), or, for the order-dependent planners (next_fit, first_fit_shuffle), a
    ``PackPlan`` from the lengths pass 1 returned in input order (O(N) driver memory: said in the docs)."""
    if not plans_from_histogram(options):
        real: list[np.ndarray] = []
        for s in stats:
            if not s.counts.sequences:
                continue
            if s.lengths is None:  # the engine sets keep_lengths for these planners: a piece that did not is a bug
                raise RuntimeError("packwise: a Ray piece returned no lengths for an order-dependent planner")
            real.append(s.lengths)
        return plan(np.concatenate(real).astype(np.int64), options)
    counts = np.zeros(options.capacity + 1, dtype=np.int64)
    for s in stats:
        np.add.at(counts, s.hist[0], s.hist[1])
    return plan_from_histogram(counts, options)


def _plan_hash(ray, plan, spill, pieces: list[int], order: list) -> str:
    """``PackPlan.plan_hash``. For a histogram plan one worker task streams it from the lengths pass 1 spilled
    (pieces numbered ``pieces``, in input order) and the writers' slices of the plan order, one at a time: O(N)
    time in that task, O(piece) memory, and the driver never reads per-row data (its memory stays flat)."""
    from ...plan import HistogramPlan

    if not isinstance(plan, HistogramPlan):
        return plan.plan_hash()
    return ray.get(ray.remote(_stream_hash).remote(plan, spill, pieces, order))


def _stream_hash(plan, spill, pieces: list[int], order: list) -> str:
    """Worker: the plan hash from the spilled lengths and a list of ObjectRefs (fetched and released one by
    one)."""
    import ray

    def consume(refs: list):
        refs.reverse()
        while refs:
            yield ray.get(refs.pop())

    return plan.plan_hash((read_lengths(spill, i) for i in pieces), consume(list(order)))


def _metrics(plan, fills: np.ndarray, pad: int):
    from ...plan import HistogramPlan

    if not isinstance(plan, HistogramPlan):
        return plan.metrics()
    return plan.metrics(pad_to_longest_tokens=pad, pack_length_counts=fills)


def _commit(tmp, out, report: PackReport, shards: list[dict]) -> None:
    """``metadata.json`` as ``packwise pack`` writes it, then the staging committed into ``out`` (an
    ``OutputDir``; None when the caller that opened it commits); for remote output, shards moved from the
    temporary prefix and ``metadata.json`` written last."""
    if isinstance(out, RemoteOutput):
        out.commit([s["file"] for s in shards], metadata_text(report.metadata(), shards))
        return
    write_metadata(tmp, report.metadata(), shards)
    if out is not None:
        out.commit()
