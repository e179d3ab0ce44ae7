"""Offline packing on Ray (Ray Data + Ray tasks): distributed read, tokenization, assembly and Parquet write,
with the same packs and output as ``packwise pack``, a driver whose memory does not grow with the dataset, and
an object store that never holds the whole tokenized dataset.

The pipeline's own steps run (:mod:`packwise.pipeline.steps`, with one :class:`~packwise.pipeline.PackOptions`);
this module decides where:

1. Pass 1, read + tokenize + overflow, on Ray Data (``_data``). The input is cut into pieces in input
   order: JSONL byte ranges cut at line ends, runs of Parquet row groups, row ranges of the Arrow files of a
   saved HF dataset, ``ray.data.Dataset`` blocks (sliced; read with ``preserve_order``), or slices of
   in-memory rows; paths are local or on any pyarrow filesystem (``s3://...``, see ``_fs``).
   ``map_batches`` runs the steps on each piece, spills the tokenized piece to the run's staging area
   (``_spill``) and streams back only its counts, first bad rows and length histogram. (JSONL is not read
   with ``ray.data.read_json``, which infers Arrow types and fails a whole block on one bad row, nor with
   ``read_text``, which also splits lines at U+2028 and other Unicode breaks: byte ranges keep the local
   reader's line numbers and messages.)
2. Plan, on the driver, from the summed histogram (``plan_from_histogram``): pack templates, O(C + templates)
   memory whatever N. (next_fit and first_fit_shuffle depend on the input order: for them the ``(N,)``
   lengths come to the driver and ``plan`` runs :func:`packwise.plan.plan_packs`.)
3. Pass 2, place + execute + write, on Ray tasks. Each piece is read back from the spill (the input is read
   and tokenized once), places its own sequences from the templates and its per-length offsets (sequences
   of each length in earlier pieces) and spills them into the folder of their shard group; then each
   group's writer reads its rows, runs ``execute`` and ``write_shard`` into a temporary directory (or
   prefix). Rows never pass through the object store or the driver; the driver keeps a bounded number of
   tasks in flight.
4. Commit, on the driver. The plan hash is streamed from the pieces' lengths and the writers' slices of the
   plan order; ``build_report`` merges the counts; ``metadata.json`` is written and the directory renamed
   into place (remote: shards moved from the temporary prefix, ``metadata.json`` last); a failed run leaves
   no partial output. The spill is removed before the commit (or with the staging on failure).

On a cluster (``ray_address="auto"`` on a node, or ``"ray://HEAD:10001"``), either install packwise (with the
``hf`` extra for text input) on every node, or pass ``runtime_env={"py_modules": [packwise.__path__[0]],
"pip": [...]}``; local inputs, outputs and tokenizer directories must be on a filesystem every node sees at the
same path (or use ``s3://`` URIs).
"""

from __future__ import annotations

import math
import os
import shutil
import time
from contextlib import AbstractContextManager, contextmanager, nullcontext
from pathlib import Path

import numpy as np

from ...files import OutputDir, claim_output
from ...pipeline import PackOptions, PackReport, resolve_chat_template
from ...pipeline.steps import PackedCounts, build_report, check_sequences, plans_from_histogram, shard_bounds
from ._data import tokenize_pieces
from ._driver import _check, _commit, _metrics, _plan, _plan_hash
from ._fs import Loc, RemoteOutput, resolve
from ._io import PIECES_PER_CPU, _source
from ._spill import group_folders, remove, spill_root
from ._workers import MEDIA_TYPES, PieceJob, WriteJob, _place, _write_group

WRITER_WAIT_S = 600  # after a failure, how long running shard writers may take to finish before cleanup

GROUP_BYTES = 2 << 30  # about the most token bytes one writer task holds

#: Pass 2 place tasks the driver keeps in flight per cluster CPU (it holds O(CPUs) task references, not
#: O(pieces)).
IN_FLIGHT_PER_CPU = 2


def pack_ray(
    ds,
    output,
    *,
    options: PackOptions | None = None,
    packs_per_shard: int = 10_000,
    overwrite: bool = False,
    num_cpus: int | None = None,
    ray_address: str | None = None,
    runtime_env: dict | None = None,
    filesystem=None,
    **fields,
) -> PackReport:
    """Pack a dataset on Ray into ``output``, in the ``packwise pack`` format, with the local engine's packs.

    Same input, options and seed give what ``packwise pack`` gives: the same ``plan_hash``, token
    accounting, ``metadata.json`` and Parquet files (byte for byte). The same pipeline steps run
    (:mod:`packwise.pipeline.steps`); Ray decides where.

    Args:
        ds: a JSONL file, a Parquet file/directory or a saved HF dataset directory, as a local path or a
            pyarrow filesystem URI (``s3://bucket/data/?endpoint_override=...``); or a ``ray.data.Dataset``;
            or in memory (put in the object store from the driver): a list of dict rows, a
            ``pyarrow.Table``, a ``datasets.Dataset`` or a :class:`~packwise.files._read.RawInput` (the CLI's
            default, ``chitchat_input()``). Rows hold ``messages``, ``prompt`` + ``completion``, or
            ``input_ids`` (+ ``labels``/``loss_mask`` and per-token columns).
        output: output directory (local path or URI); must be empty unless ``overwrite`` (remote output must
            be an empty or new prefix: packwise does not replace remote objects). While the run lasts, the
            tokenized rows are spilled inside ``output``'s staging area (about one copy of them: ~8 bytes per
            token), and removed before the commit.
        options: a :class:`~packwise.pipeline.PackOptions`; ``**fields`` (its field names: ``capacity``,
            ``tokenizer``, ``algorithm``, ...) build one or replace its values, so
            ``**PackingConfig.pipeline_kwargs()`` fits. ``tokenizer`` may also be a tokenizer object.
        packs_per_shard, overwrite: as ``packwise pack``.
        num_cpus: CPUs of the local Ray instance started when Ray is not running (default: all).
        ray_address: connect to this cluster instead. When Ray is already initialised in this process,
            that session is used and ``num_cpus``/``ray_address`` are ignored. A session started here is
            shut down on return.
        runtime_env: Ray ``runtime_env`` of the session started here, e.g. ``{"py_modules":
            [packwise.__path__[0]], "pip": ["transformers"]}`` so nodes need only Ray; an error when Ray is
            already initialised (pass it to your ``ray.init`` instead).
        filesystem: a ``pyarrow.fs.FileSystem`` that ``ds`` and ``output`` paths are on (instead of URIs).

    Returns:
        The :class:`~packwise.pipeline.PackReport` (also in ``metadata.json``, without timings). Timings in
        seconds: ``read`` (cutting the input), ``tokenize`` (read + tokenize + overflow on workers),
        ``plan``, ``assemble`` (shuffle + Parquet shards on workers), ``write`` (metadata + rename).

    Raises:
        ValueError: Ray is not installed; bad options; bad input (the first bad row by file, line or row, and
            field, as the local engine names it) unless ``skip_bad_rows``; a sample over capacity with
            ``overflow="error"``; ``output`` not empty without ``overwrite``.
        TypeError: ``ds`` of another type, or a list holding a non-dict row.
        ray.exceptions.RayTaskError: a worker failed otherwise (a disk error, a killed worker). On any error,
            ``output`` is left as it was: no partial shards, no temporary directory.

    Example (not run as a doctest: it needs Ray, and ``ray.init`` takes seconds):
        >>> rows = [{"input_ids": [1, 2, 3]}, {"input_ids": [4, 5, 6]}, {"input_ids": [7, 8]}]
        >>> report = pack_ray(rows, "out", capacity=6, num_cpus=2)  # doctest: +SKIP
        >>> report.packs, report.tokens_packed, report.metrics.utilisation  # doctest: +SKIP
        (2, 8, 0.666...)
    """
    try:
        import ray
    except ImportError as e:
        raise ValueError("pack_ray needs Ray: pip install 'packwise[ray]'") from e
    opts = PackOptions.of(options, **fields)
    checks = {"packs_per_shard": packs_per_shard, "num_cpus": 1 if num_cpus is None else num_cpus}
    for name, value in checks.items():  # num_cpus=0 would start a Ray that runs no task, and wait forever
        if isinstance(value, bool) or not isinstance(value, int) or value < 1:
            raise ValueError(f"{name} must be an integer >= 1, got {value!r}")
    if runtime_env is not None and not isinstance(runtime_env, dict):
        raise TypeError(f"runtime_env must be a dict (Ray's runtime_env), got {type(runtime_env).__name__}")
    remote = resolve(output, filesystem)
    out: RemoteOutput | OutputDir
    claim: AbstractContextManager
    if remote is not None:
        out, owner, claim = RemoteOutput(remote, overwrite=overwrite), True, nullcontext()
    else:  # locked below; the caller commits when it opened it
        out = claim = claim_output(output, overwrite=overwrite)
        owner = out._depth == 0
    timings: dict[str, float] = {}
    template = resolve_chat_template(opts.chat_template)
    with claim, _session(num_cpus, ray_address, runtime_env):
        t = time.perf_counter()
        cpus = max(1, int(ray.cluster_resources().get("CPU", 1)))
        name, kind, pieces, fingerprint = _source(ray, ds, opts.format, opts.skip_bad_rows, cpus, filesystem)
        if kind != "tokens" and remote is None:  # images: the local engine's absolute media root, in every worker
            from ...pipeline import with_media_root

            opts = opts.replace(vision=with_media_root(opts.vision, name))
        timings["read"] = time.perf_counter() - t

        staging: Loc | Path = out.start() if isinstance(out, RemoteOutput) else out.staging()
        tmp: Loc | Path | None = staging  # None once committed
        writers: list = []
        try:
            t = time.perf_counter()
            keep = not plans_from_histogram(opts)  # next_fit, first_fit_shuffle: every length comes to the driver
            spill = spill_root(staging)
            job = PieceJob(name, kind, template, digest_rows=fingerprint is None, keep_lengths=keep, spill=spill)
            stats, _ = tokenize_pieces(ray, pieces, opts, job)
            if fingerprint is None:  # a ray Dataset: order-aware sum of per-row digests, independent of blocks
                fingerprint = f"{sum(s.digest for s in stats) % (1 << 64):016x}"
            elif not isinstance(fingerprint, str):
                fingerprint = ray.get(fingerprint)
            counts, skipped = _check(stats, name, opts.skip_bad_rows)
            check_sequences(name, counts, opts)
            timings["tokenize"] = time.perf_counter() - t

            t = time.perf_counter()
            plan = _plan(stats, opts)
            timings["plan"] = time.perf_counter() - t

            t = time.perf_counter()
            shards, fills, order, pad = _assemble(ray, plan, stats, spill, packs_per_shard, staging, writers, cpus)
            plan_hash = _plan_hash(ray, plan, spill, [i for i, s in enumerate(stats) if s.counts.sequences], order)
            remove(spill)  # before the commit: the staging's files become the output
            timings["assemble"] = time.perf_counter() - t
            t = time.perf_counter()
            tok = next((s.tokenizer for s in stats if s.tokenizer), (None, None))
            report = build_report(
                source=(name, fingerprint, kind), tokenizer=tok,
                options=opts, counts=counts, packed=sum((c for _, c in shards), PackedCounts()), plan=plan,
                plan_hash=plan_hash, metrics=_metrics(plan, fills, pad), timings=timings, skipped=skipped,
            )  # fmt: skip
            _commit(staging, out if owner else None, report, [entry for entry, _ in shards])
            tmp = None
        except BaseException as e:
            # Let running writers finish before removing their directory. Not ray.cancel: cancelling a task
            # whose reply is in flight aborts the driver process (a fatal check in Ray's TaskManager, seen
            # with ray 2.60 here). On Ctrl-C nothing waits: the session's shutdown stops the workers.
            if writers and isinstance(e, Exception):
                ray.wait(writers, num_returns=len(writers), timeout=WRITER_WAIT_S)
            if isinstance(out, RemoteOutput):
                out.abort()  # the temporary prefix, spill included
            elif isinstance(tmp, Path):  # None once committed
                shutil.rmtree(tmp, ignore_errors=True)
            raise
        timings["write"] = time.perf_counter() - t
    return report


def pack_dataset(
    ds,
    output,
    config=None,
    *,
    packs_per_shard: int = 10_000,
    overwrite: bool = False,
    num_cpus: int | None = None,
    ray_address: str | None = None,
    runtime_env: dict | None = None,
    filesystem=None,
    **overrides,
) -> PackReport:
    """:func:`pack_ray` driven by a :class:`~packwise.PackingConfig` (what ``packwise pack --engine ray
    --config FILE`` runs).

    Args:
        ds, output: as :func:`pack_ray`.
        config: a ``PackingConfig``, a path to one (.yaml/.toml/.json), or None (defaults).
        packs_per_shard, overwrite, num_cpus, ray_address, runtime_env, filesystem: as :func:`pack_ray`.
        **overrides: config fields that replace the config's (``capacity=8192``).

    Returns:
        The :class:`~packwise.pipeline.PackReport`.

    Raises:
        ValueError: an invalid config (pydantic's ``ValidationError``) and everything :func:`pack_ray` raises.

    Example (not run as a doctest: ``ray.init`` takes seconds):
        >>> report = pack_dataset([{"input_ids": [1, 2, 3]}], "out", capacity=8, num_cpus=1)  # doctest: +SKIP
        >>> report.packs  # doctest: +SKIP
        1
    """
    from ...config import PackingConfig

    if config is None:
        cfg = PackingConfig(**overrides)
    elif isinstance(config, PackingConfig):
        cfg = PackingConfig(**{**config.model_dump(), **overrides}) if overrides else config
    elif isinstance(config, (str, os.PathLike)):
        cfg = PackingConfig.from_file(config, **overrides)
    else:
        raise TypeError(f"config is a {type(config).__name__}; pass a PackingConfig, a path to one, or None")
    return pack_ray(
        ds, output, **cfg.pipeline_kwargs(), packs_per_shard=packs_per_shard, overwrite=overwrite,
        num_cpus=num_cpus, ray_address=ray_address, runtime_env=runtime_env, filesystem=filesystem,
    )  # fmt: skip


@contextmanager
def _session(num_cpus: int | None, address: str | None, runtime_env: dict | None = None):
    import ray

    if ray.is_initialized():
        if runtime_env is not None:
            raise ValueError(
                "runtime_env applies to the Ray session pack_ray starts; Ray is already initialised in this "
                "process: pass runtime_env to your ray.init, or call pack_ray before it"
            )
        yield
        return
    if address is None:
        ray.init(num_cpus=num_cpus, include_dashboard=False, log_to_driver=False, runtime_env=runtime_env)
    else:
        ray.init(address=address, log_to_driver=False, runtime_env=runtime_env)
    try:
        yield
    finally:
        ray.shutdown()


def _assemble(ray, plan, stats: list, spill, per_shard: int, tmp: Path | Loc, writers: list, cpus: int):
    """Pass 2: each piece, read from pass 1's spill (not from the input), places its sequences and spills
    them by shard group (``_spill.write_part``); then one writer per group reads its rows and writes its
    shards. Rows never pass through the object store or the driver. The driver keeps at most
    :data:`IN_FLIGHT_PER_CPU` × CPUs place tasks in flight and folds each one's pad share into a running sum
    as it finishes, so it holds O(CPUs + groups) references whatever the number of pieces.

    Returns ``(shards, pack_length_counts, order refs, pad)``: ``[(metadata.json entry, PackedCounts)]`` in
    shard order, ``(C+1,)`` packs per real token count, one ObjectRef per writer to its slice of the plan
    order, and the pad-to-longest baseline in tokens."""
    from ...plan import HistogramPlan

    hist = isinstance(plan, HistogramPlan)
    n_seq, n_packs = plan.num_sequences, plan.num_packs
    pack_bounds = shard_bounds(n_packs, per_shard)
    n_shards = pack_bounds.shape[0] - 1
    token_bytes = 8 * sum(int((s.hist[0].astype(np.int64) * s.hist[1]).sum()) for s in stats)  # ids + labels
    n_groups = min(n_shards, max(PIECES_PER_CPU * cpus, math.ceil(token_bytes / GROUP_BYTES)))
    groups = np.array_split(np.arange(n_shards), n_groups)
    group_packs = pack_bounds[[g[0] for g in groups] + [n_shards]]
    seq_bounds = plan.pack_offsets(group_packs) if hist else plan.offsets[group_packs]
    batch = max(1, round(n_seq / n_packs)) if n_packs else 1  # PackingMetrics' pad-to-longest batch size
    if hist:
        plan_ref = ray.put(plan)
    else:
        pos = np.empty(n_seq, dtype=np.int64)  # position of each sequence in plan order
        pos[plan.order] = np.arange(n_seq, dtype=np.int64)
    columns = {k: v for s in stats if s.counts.sequences for k, v in s.columns.items()}  # pieces agree
    media = any(s.counts.media for s in stats)  # PieceCounts.media: samples.media is not None, as the local engine
    if media:  # the pieces with media may have kept no sequence: the local engine still writes the column
        columns.setdefault(MEDIA_TYPES, np.dtype(np.int8).str)
    group_folders(spill, n_groups)
    place = ray.remote(_place)
    cost_offsets = np.zeros(plan.capacity + 1, dtype=np.int64)
    running: list = []  # ObjectRefs of the place tasks in flight
    seq, row, whole = 0, 0, 0
    edges: dict[int, tuple[int, int]] = {}  # batch -> (longest, rows) of the batches cut by pieces' edges

    def fold(done: list) -> None:
        nonlocal whole
        for share, cut in ray.get(done):
            whole += share
            for b, longest, rows in cut:
                m, r = edges.get(b, (0, 0))
                edges[b] = (max(m, longest), r + rows)

    for i, s in enumerate(stats):
        n = s.counts.sequences
        if n:  # a piece whose rows were all skipped or dropped sends nothing
            if hist:  # per cost of this piece (only those), the sequences of that cost in earlier pieces
                costs = np.unique(plan.costs_of(s.hist[0]))
                where: tuple[object, object] = (plan_ref, (costs, cost_offsets[costs]))
                np.add.at(cost_offsets, plan.costs_of(s.hist[0]), s.hist[1])
            else:
                where = (None, pos[seq : seq + n])
            running.append(place.remote(spill, i, *where, seq_bounds, row, seq, batch))
            writers[:] = running  # what a failure waits for before the staging is removed
            if len(running) >= IN_FLIGHT_PER_CPU * cpus:
                done, running = ray.wait(running, num_returns=1)
                fold(done)
        seq, row = seq + n, row + s.counts.rows_read
    fold(running)
    write = ray.remote(_write_group).options(num_returns=3)
    results = []
    for g, shards in enumerate(groups):
        p0, p1 = int(pack_bounds[shards[0]]), int(pack_bounds[shards[-1] + 1])
        jobs_g = [(int(k), int(pack_bounds[k]) - p0, int(pack_bounds[k + 1]) - p0) for k in shards]
        offsets = (plan_ref, p0, p1) if hist else plan.offsets[p0 : p1 + 1]  # histogram: the writer computes them
        job = WriteJob(str(tmp) if isinstance(tmp, Path) else tmp, n_shards, jobs_g, offsets, plan.capacity,
                       plan.algorithm, columns, media)  # fmt: skip
        results.append(write.remote(job, spill, g))
    writers[:] = [r[0] for r in results]
    done = ray.get(writers)
    fills = sum((ray.get(r[1]) for r in results), np.zeros(plan.capacity + 1, dtype=np.int64))
    pad = whole + sum(m * r for m, r in edges.values())
    return [shard for group in done for shard in group], fills, [r[2] for r in results], pad


__all__ = ["pack_ray"]  # pack_dataset(config=) stays importable: the PackingConfig front door of pack_ray
