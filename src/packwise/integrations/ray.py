"""Offline packing on Ray: distributed read, tokenization, assembly and Parquet write, with the same packs
and output as ``packwise pack``.

1. Read + tokenize, on workers. The input is cut into pieces in input order: JSONL byte ranges cut at line
   ends, Parquet row groups (sliced), ``ray.data.Dataset`` blocks (sliced; read with ``preserve_order``), or
   slices of in-memory rows. Each piece runs the local engine's own validation, tokenization, first-label
   normalisation and overflow policy; its samples stay in the object store. (JSONL is not read with
   ``ray.data.read_json``, which infers Arrow types and fails a whole block on one bad row, nor with
   ``read_text``, which also splits lines at U+2028 and other Unicode breaks: byte ranges keep the local
   reader's line numbers and messages. Parquet paths skip Ray Data's read, which cost 2-7 s per call here.)
2. Plan, on the driver. Per-sequence lengths (an ``(N,)`` int array, the only per-row data the driver holds)
   are concatenated in global sequence order and planned with :func:`packwise.plan.plan_packs`.
3. Assemble + write, on workers. Each piece sends its sequences to the writer of their shard group, which
   builds packs with ``PackedColumns.build`` and writes ``packs-*.parquet`` into a temporary directory.
4. Commit, on the driver. ``metadata.json`` is written and the directory renamed into place; a failed run
   leaves no partial output.

On a cluster (``ray_address="auto"`` on a node, or ``"ray://HEAD:10001"``), install packwise (with the
``hf`` extra for text input) on every node, and put the input, the output directory and any local tokenizer
directory on a filesystem every node sees at the same path.
"""

from __future__ import annotations

import json
import math
import os
import shutil
import time
from contextlib import contextmanager
from pathlib import Path

import numpy as np

from .. import __version__
from ..io._read import FORMATS, SKIP_HINT, Format
from ..io._write import FORMAT, METADATA, check_output_dir, shard_name, temp_dir
from ..pipeline._overflow import OVERFLOW_POLICIES, Overflow
from ..pipeline._pack import resolve_chat_template
from ..pipeline._report import PackReport
from ..plan import PackPlan, plan_packs
from ._ray_io import PIECES_PER_CPU, _source
from ._ray_workers import MEDIA_TYPES, _split, _tokenize, _write_group

WRITER_WAIT_S = 600  # after a failure, how long running shard writers may take to finish before cleanup

GROUP_BYTES = 2 << 30  # about the most token bytes one writer task holds


def pack_ray(
    ds,
    output,
    *,
    capacity: int = 4096,
    tokenizer=None,
    algorithm: str = "best_fit_decreasing",
    seed: int | None = None,
    overflow: Overflow = "truncate",
    loss_on: str = "assistant",
    chat_template: str | None = None,
    skip_bad_rows: bool = False,
    max_sequences_per_pack: int | None = None,
    format: Format | None = None,  # noqa: A002
    vision=None,
    min_packs: int | None = None,
    pack_count_multiple: int | None = None,
    alignment: int = 1,
    algorithm_options: dict | None = None,
    packs_per_shard: int = 10_000,
    overwrite: bool = False,
    num_cpus: int | None = None,
    ray_address: str | None = None,
) -> PackReport:
    """Pack a dataset on Ray into ``output``, in the ``packwise pack`` format, with the local engine's packs.

    Same input, options and seed give what ``packwise pack`` gives: the same ``plan_hash``, token
    accounting, ``metadata.json`` and Parquet files (byte for byte).

    Args:
        ds: a JSONL file or Parquet file/directory path, or a ``ray.data.Dataset``; or in memory (put in the
            object store from the driver): a list of dict rows, a ``pyarrow.Table``, a ``datasets.Dataset``
            or a :class:`~packwise.io._read.RawInput` (the CLI's default, ``chitchat_input()``).
            Rows hold ``messages``, ``prompt`` + ``completion``, or ``input_ids`` (+ ``labels``/``loss_mask``
            and per-token columns).
        output: output directory; must be empty unless ``overwrite``.
        capacity, tokenizer, algorithm, seed, overflow, loss_on, chat_template, skip_bad_rows,
            max_sequences_per_pack, format, vision, min_packs, pack_count_multiple, alignment,
            algorithm_options: as :func:`packwise.pipeline.pack_columns` (so ``**PackingConfig.pipeline_kwargs()``
            fits); ``tokenizer`` may also be a tokenizer object (put in the object store once).
        packs_per_shard, overwrite: as ``packwise pack``.
        num_cpus: CPUs of the local Ray instance started when Ray is not running (default: all).
        ray_address: connect to this cluster instead. When Ray is already initialised in this process,
            that session is used and ``num_cpus``/``ray_address`` are ignored. A session started here is
            shut down on return.

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
        raise ValueError("pack_ray needs Ray Data: pip install 'packwise[ray]'") from e
    if loss_on not in ("assistant", "all"):
        raise ValueError(f"loss_on must be 'assistant' or 'all', got {loss_on!r}")
    if format not in (None, *FORMATS):
        raise ValueError(f"unknown format {format!r}; use one of {', '.join(FORMATS)}")
    if overflow not in OVERFLOW_POLICIES:
        raise ValueError(f"unknown overflow policy {overflow!r}; use one of {', '.join(OVERFLOW_POLICIES)}")
    checks = {"capacity": capacity, "packs_per_shard": packs_per_shard, "num_cpus": 1 if num_cpus is None else num_cpus}
    for name, value in checks.items():  # num_cpus=0 would start a Ray that runs no task, and wait forever
        if isinstance(value, bool) or not isinstance(value, int) or value < 1:
            raise ValueError(f"{name} must be an integer >= 1, got {value!r}")
    plan_args = {"capacity": capacity, "algorithm": algorithm, "seed": seed, "alignment": alignment}
    plan_args |= {"max_sequences_per_pack": max_sequences_per_pack, **(algorithm_options or {})}
    plan_packs([1], **plan_args)  # checks the algorithm and its options before any work
    plan_args |= {"min_packs": min_packs, "pack_count_multiple": pack_count_multiple}
    out = check_output_dir(output, overwrite=overwrite)
    timings: dict[str, float] = {}
    opts = {"template": resolve_chat_template(chat_template), "loss_on": loss_on}
    limit = capacity // alignment * alignment  # as pack_columns: the longest sequence that still fits once aligned
    opts |= {"capacity": limit, "overflow": overflow, "vision": vision}
    with _session(num_cpus, ray_address):
        t = time.perf_counter()
        cpus = max(1, int(ray.cluster_resources().get("CPU", 1)))
        name, kind, pieces, fingerprint = _source(ray, ds, format, skip_bad_rows, cpus)
        timings["read"] = time.perf_counter() - t

        t = time.perf_counter()
        if tokenizer is None and kind != "tokens":
            tokenizer = "qwen2.5"
        if tokenizer is not None:
            tokenizer = str(tokenizer) if isinstance(tokenizer, (str, os.PathLike)) else [ray.put(tokenizer)]
        opts |= {"name": name, "kind": kind, "tokenizer": tokenizer, "rowsum": fingerprint is None}
        task = ray.remote(_tokenize).options(num_returns=2)
        refs = [task.remote(tag, data, meta, opts, i == 0) for i, (tag, data, meta) in enumerate(pieces)]
        stats = ray.get([s for s, _ in refs])
        samples = [r for _, r in refs]
        first = next((s["first_columns"] for s in stats if s["first_columns"] is not None), None)
        again = [i for i, s in enumerate(stats) if s["first_columns"] not in (None, first)]
        for i, (s, r) in zip(again, [task.remote(*pieces[i], opts | {"extra_names": first}, False) for i in again]):
            stats[i], samples[i] = ray.get(s), r  # as the local engine: the first good row's columns, for all
        del pieces, refs
        if fingerprint is None:  # a ray Dataset: order-aware sum of per-row digests, independent of blocks
            fingerprint = f"{sum(s['digest'] for s in stats) % (1 << 64):016x}"
        elif not isinstance(fingerprint, str):
            fingerprint = ray.get(fingerprint)
        skipped, examples = _check(stats, name, skip_bad_rows)
        lengths = np.concatenate([np.zeros(0, np.int32)] + [s["lengths"] for s in stats]).astype(np.int64)
        if lengths.shape[0] == 0:  # every sample dropped by overflow: pack_columns' message
            dropped = sum(s["overflow"].get("samples_dropped", 0) for s in stats)
            raise ValueError(
                f"{name}: no sequence left to pack ({dropped} of {sum(s['rows'] for s in stats) - skipped} samples "
                f"dropped by overflow={overflow!r} at capacity {capacity}); raise --capacity or use truncate/split"
            )
        timings["tokenize"] = time.perf_counter() - t

        t = time.perf_counter()
        plan = plan_packs(lengths, **plan_args)
        timings["plan"] = time.perf_counter() - t

        t = time.perf_counter()
        tmp = temp_dir(out)
        writers: list = []
        try:
            shards = _assemble(ray, plan, stats, samples, packs_per_shard, tmp, writers, cpus)
            timings["assemble"] = time.perf_counter() - t
            t = time.perf_counter()
            rows = sum(s["rows"] for s in stats)
            tok_name, tok_fingerprint = next((s["info"] for s in stats if s["info"]), (None, None))
            counts = {k: sum(s["overflow"][k] for s in stats) for k in stats[0]["overflow"]}
            multimodal = None
            if any(s["images"] is not None for s in stats):  # as pack_columns, for data with images
                from ..multimodal import VisionSpec

                images = {
                    "images_packed": sum(s["images"] or 0 for s in stats),
                    "images_dropped": counts["images_dropped"],
                }
                multimodal = {**(vision or VisionSpec()).to_dict(), **images}
            counts.pop("images_dropped", None)
            counts.pop("audio_dropped", None)  # audio/video in Ray packing are not reported yet (h18)
            counts.pop("videos_dropped", None)
            report = PackReport(
                input=name, input_fingerprint=fingerprint, tokenizer=tok_name, tokenizer_fingerprint=tok_fingerprint,
                capacity=capacity, algorithm=plan.algorithm, seed=plan.seed, overflow=overflow,
                loss_on=loss_on if kind != "tokens" else "labels",
                rows_read=rows, rows_skipped=skipped, samples=rows - skipped, **counts,
                tokens_read=sum(s["tokens"] for s in stats), loss_tokens_read=sum(s["loss"] for s in stats),
                sequences_packed=plan.num_sequences, tokens_packed=sum(s[2] for s in shards),
                loss_tokens_packed=sum(s[3] for s in shards), loss_tokens_masked_at_boundary=sum(s[4] for s in shards),
                packs=plan.num_packs, plan_hash=plan.plan_hash(), metrics=plan.metrics(), packwise_version=__version__,
                timings=timings, skipped_examples=examples, alignment=plan.alignment,
                algorithm_options=dict(algorithm_options or {}), multimodal=multimodal,
            )  # fmt: skip
            report.check()
            _commit(tmp, out, report, [{"file": shard_name(s[0], len(shards)), "packs": s[1]} for s in shards])
        except BaseException as e:
            # Let running writers finish before removing their directory. Not ray.cancel: cancelling a task
            # whose reply is in flight aborts the driver process (a fatal check in Ray's TaskManager, seen
            # with ray 2.60 here). On Ctrl-C nothing waits: the session's shutdown stops the workers.
            if writers and isinstance(e, Exception):
                ray.wait(writers, num_returns=len(writers), timeout=WRITER_WAIT_S)
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
    **overrides,
) -> PackReport:
    """:func:`pack_ray` driven by a :class:`~packwise.PackingConfig` (what ``packwise pack --engine ray
    --config FILE`` runs).

    Args:
        ds, output: as :func:`pack_ray`.
        config: a ``PackingConfig``, a path to one (.yaml/.toml/.json), or None (defaults).
        packs_per_shard, overwrite, num_cpus, ray_address: as :func:`pack_ray`.
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
    from ..config import PackingConfig

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
        num_cpus=num_cpus, ray_address=ray_address,
    )  # fmt: skip


@contextmanager
def _session(num_cpus: int | None, address: str | None):
    import ray

    if ray.is_initialized():
        yield
        return
    if address is None:
        ray.init(num_cpus=num_cpus, include_dashboard=False, log_to_driver=False)
    else:
        ray.init(address=address, log_to_driver=False)
    try:
        yield
    finally:
        ray.shutdown()


def _check(stats: list[dict], name: str, skip: bool) -> tuple[int, list[str]]:
    """Raise what the local engine would raise first; else ``(rows skipped, first 5 skip messages)``."""
    errors = sorted((r, i, row, msg) for i, s in enumerate(stats) for r, row, msg in s["errors"])
    fatal = next((s["fatal"] for s in stats if s["fatal"]), None)
    if errors and not skip and (errors[0][0] <= 1 or fatal is None):
        raise ValueError(errors[0][3])
    if fatal is not None:
        raise ValueError(fatal)
    skipped = sum(s["skipped"] for s in stats)
    if sum(s["rows"] for s in stats) == skipped:
        raise ValueError(f"{name}: no usable rows ({skipped} skipped); nothing to pack")
    too_long = next((s["too_long"] for s in stats if s["too_long"]), None)
    if too_long is not None:
        raise ValueError(too_long)
    columns = {tuple(c for c in s["columns"] if c != MEDIA_TYPES) for s in stats if len(s["lengths"])}
    if len(columns) > 1:
        raise ValueError(
            f"{name}: rows carry different per-token columns ({' vs '.join(map(str, sorted(columns)))}); give every "
            "row the same per-token columns, or use the local engine, which skips odd rows with --skip-bad-rows"
        )
    return skipped, [msg.removesuffix(f"; {SKIP_HINT}") for *_, msg in errors[:5]]


def _assemble(ray, plan: PackPlan, stats: list, samples: list, per_shard: int, tmp: Path, writers: list, cpus: int):
    """Send sequences to shard-group writers; ``[(shard, packs, tokens, loss tokens, masked)]`` in shard order."""
    n_shards = max(1, math.ceil(plan.num_packs / per_shard))
    pack_bounds = np.minimum(np.arange(n_shards + 1) * per_shard, plan.num_packs)
    n_groups = min(n_shards, max(PIECES_PER_CPU * cpus, math.ceil(int(plan.lengths.sum()) * 8 / GROUP_BYTES)))
    groups = np.array_split(np.arange(n_shards), n_groups)
    seq_bounds = plan.offsets[pack_bounds[[g[0] for g in groups] + [n_shards]]]
    pos = np.empty(plan.num_sequences, dtype=np.int64)  # position of each sequence in plan order
    pos[plan.order] = np.arange(plan.num_sequences, dtype=np.int64)
    split = ray.remote(_split).options(num_returns=n_groups)
    parts, seq, row = [], 0, 0
    for s, ref in zip(stats, samples):
        n = len(s["lengths"])
        if n:  # a piece whose rows were all skipped or dropped sends nothing (its ref holds None)
            out = split.remote(ref, pos[seq : seq + n], seq_bounds, row)
            parts.append([out] if n_groups == 1 else out)
        seq, row = seq + n, row + s["rows"]
    samples.clear()
    columns = {k: v for s in stats if len(s["lengths"]) for k, v in s["columns"].items()}  # pieces agree
    write = ray.remote(_write_group)
    for g, shards in enumerate(groups):
        p0, p1 = int(pack_bounds[shards[0]]), int(pack_bounds[shards[-1] + 1])
        jobs = [(int(s), int(pack_bounds[s]) - p0, int(pack_bounds[s + 1]) - p0) for s in shards]
        meta = (str(tmp), n_shards, jobs, plan.offsets[p0 : p1 + 1], plan.capacity, plan.algorithm, columns)
        writers.append(write.remote(meta, *[p[g] for p in parts]))
    return [shard for group in ray.get(writers) for shard in group]


def _commit(tmp: Path, out: Path, report: PackReport, shards: list[dict]) -> None:
    """``metadata.json`` as ``packwise pack`` writes it, then ``tmp`` renamed to ``out`` (replacing it)."""
    from ..cli._pack import metadata

    meta = {"format": FORMAT, **metadata(report), "shards": shards}
    (tmp / METADATA).write_text(json.dumps(meta, indent=2, sort_keys=True) + "\n")
    old = out.parent / f".{out.name}.old-{os.getpid()}" if out.exists() else None
    if old is not None:
        os.replace(out, old)
    os.replace(tmp, out)
    if old is not None:
        shutil.rmtree(old, ignore_errors=True)


__all__ = ["pack_dataset", "pack_ray"]
