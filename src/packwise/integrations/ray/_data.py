"""Ray engine, pass 1 on Ray Data: read + tokenize + overflow every piece in ``map_batches``, streaming.

The pieces (JSONL byte ranges, Parquet row-group runs, Arrow file ranges, in-memory or ``ray.data`` blocks;
see ``_io``) become a Ray Dataset of piece numbers; ``map_batches`` runs the pipeline's read, tokenize and
overflow steps on one piece per batch (``_workers._tokenize``: packwise's own readers, so bad rows are
named by file, line and field as the local engine names them), spills the tokenized piece to the run's
staging area (``_spill``: pass 2 reads it there, not the input) and emits only the piece's small
:class:`~packwise.integrations.ray._workers.PieceStats` (counts, first bad rows, length histogram). Ray Data
streams the pieces with its object-store limit set to :data:`STORE_FRACTION` of the cluster's store
(``DataContext`` resource limits, restored afterwards); the driver receives O(pieces × distinct lengths).
"""

from __future__ import annotations

import pickle

import numpy as np

from ...pipeline import PackOptions
from ._spill import write_piece
from ._workers import PieceJob, PieceStats, _tokenize

#: Share of the cluster's object store that pass 1 (Ray Data's resource limit) may fill.
STORE_FRACTION = 0.5


def store_budget(ray) -> int:
    """Bytes of object store pass 1 may use: :data:`STORE_FRACTION` of the cluster's."""
    return max(1 << 20, int(ray.cluster_resources().get("object_store_memory", 1 << 30) * STORE_FRACTION))


def _stats_batch(batch: dict, *, pieces: list, options: PackOptions, jobs: list[PieceJob]) -> dict:
    """``map_batches`` function: the pieces numbered in ``batch["piece"]`` through read/tokenize/overflow;
    their :class:`PieceStats`, pickled (a few KB each)."""
    out = []
    for i in batch["piece"].tolist():
        tag, data, meta = pieces[i]  # a piece is (tag, data or ObjectRef, meta): _io._source
        stats, samples, lengths = _tokenize(tag, data, meta, options, jobs[i])
        if jobs[i].keep_lengths and lengths is not None:
            stats.lengths = lengths
        if jobs[i].spill is not None and samples is not None:
            write_piece(jobs[i].spill, i, samples, lengths)
        out.append(pickle.dumps(stats, protocol=5))
    return {"piece": batch["piece"], "stats": np.array(out, dtype=object)}


def stats_pass(ray, pieces: list, options: PackOptions, jobs: list[PieceJob], which: list[int]) -> dict:
    """Pass 1 over the pieces numbered ``which``: ``{piece: PieceStats}``, streamed through Ray Data."""
    import ray.data

    ctx = ray.data.DataContext.get_current()
    saved = ctx.execution_options.resource_limits, ctx.enable_progress_bars, ctx.execution_options.preserve_order
    limits = ctx.execution_options.resource_limits.copy(object_store_memory=store_budget(ray))
    ctx.execution_options.resource_limits, ctx.enable_progress_bars = limits, False
    ctx.execution_options.preserve_order = False
    try:
        ds = ray.data.from_items([{"piece": i} for i in which], override_num_blocks=max(1, len(which)))
        kwargs = {"pieces": pieces, "options": options, "jobs": jobs}
        ds = ds.map_batches(_stats_batch, batch_size=1, batch_format="numpy", fn_kwargs=kwargs, num_cpus=1)
        return {int(row["piece"]): pickle.loads(row["stats"]) for row in ds.iter_rows()}
    finally:
        ctx.execution_options.resource_limits, ctx.enable_progress_bars = saved[0], saved[1]
        ctx.execution_options.preserve_order = saved[2]


def tokenize_pieces(ray, pieces: list, options: PackOptions, job: PieceJob) -> tuple[list[PieceStats], list]:
    """Pass 1 over every piece: ``(stats, jobs)`` in piece order. Pre-tokenized rows take the per-token
    columns of the input's first good row: a piece that saw other columns first runs again with those, and
    its job (what pass 2 runs it with) says so."""
    jobs = [job] * len(pieces)
    got = stats_pass(ray, pieces, options, jobs, list(range(len(pieces))))
    stats = [got[i] for i in range(len(pieces))]
    first = next((s.first_columns for s in stats if s.first_columns is not None), None)
    again = [i for i, s in enumerate(stats) if s.first_columns not in (None, first)]
    if again:
        jobs = [job.with_extra_names(first) if i in set(again) else job for i in range(len(pieces))]
        for i, s in stats_pass(ray, pieces, options, jobs, again).items():
            stats[i] = s
    return stats, jobs
