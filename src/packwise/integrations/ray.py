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

import hashlib
import json
import math
import os
import shutil
import tempfile
import time
from contextlib import contextmanager
from dataclasses import asdict, dataclass
from pathlib import Path

import numpy as np
import pyarrow as pa

from .. import __version__
from ..constants import IGNORE_INDEX
from ..io._read import FORMATS, SKIP_HINT, Format, RawInput, _digest, detect_format, detect_kind, from_rows
from ..io._write import FORMAT, METADATA, ROW_GROUP_PACKS, check_output_dir, shard_name
from ..pipeline._overflow import OVERFLOW_POLICIES, Overflow, apply_overflow
from ..pipeline._pack import resolve_chat_template
from ..pipeline._report import PackReport
from ..pipeline._samples import Samples, tokenize_rows
from ..pipeline._table import PackedColumns
from ..pipeline._tokens import tokens_from_rows
from ..plan import PackPlan, plan_packs

PIECES_PER_CPU = 4  # tokenization tasks per cluster CPU, for load balance
PIECE_ROWS = (16, 100_000)  # rows per task: min, max
PIECE_BYTES = (64 << 10, 64 << 20)  # JSONL bytes per task: min, max
GROUP_BYTES = 2 << 30  # about the most token bytes one writer task holds
MEDIA_TYPES = "mm_token_type_ids"  # per-token column of data with images (absent from pieces without)


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
    opts |= {"capacity": capacity, "overflow": overflow, "vision": vision}
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
        del pieces
        stats = ray.get([s for s, _ in refs])
        samples = [r for _, r in refs]
        del refs
        if fingerprint is None:  # a ray Dataset: order-aware sum of per-row digests, independent of blocks
            fingerprint = f"{sum(s['digest'] for s in stats) % (1 << 64):016x}"
        elif not isinstance(fingerprint, str):
            fingerprint = ray.get(fingerprint)
        skipped, examples = _check(stats, name, skip_bad_rows)
        lengths = np.concatenate([np.zeros(0, np.int32)] + [s["lengths"] for s in stats]).astype(np.int64)
        timings["tokenize"] = time.perf_counter() - t

        t = time.perf_counter()
        plan = plan_packs(lengths, **plan_args)
        timings["plan"] = time.perf_counter() - t

        t = time.perf_counter()
        out.parent.mkdir(parents=True, exist_ok=True)
        tmp = Path(tempfile.mkdtemp(prefix=f".{out.name}.tmp-", dir=out.parent))  # as packwise.io._write
        umask = os.umask(0)
        os.umask(umask)
        tmp.chmod(0o777 & ~umask)
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
            report = PackReport(
                input=name, input_fingerprint=fingerprint, tokenizer=tok_name, tokenizer_fingerprint=tok_fingerprint,
                capacity=capacity, algorithm=plan.algorithm, seed=plan.seed, overflow=overflow, loss_on=loss_on,
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
        except BaseException:
            for ref in writers:  # stop writers before removing their directory
                ray.cancel(ref)
            if writers:
                ray.wait(writers, num_returns=len(writers), timeout=60)
            shutil.rmtree(tmp, ignore_errors=True)
            raise
        timings["write"] = time.perf_counter() - t
    return report


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


def _source(ray, data, fmt: str | None, skip: bool, cpus: int) -> tuple[str, str, list, object]:
    """``(name, kind, pieces, fingerprint)``; a piece is ``(tag, data or ObjectRef, meta)``, in input order.
    The fingerprint is a string, an ObjectRef to one, or None (summed from per-row digests by the pieces)."""
    if isinstance(data, (list, tuple, RawInput, pa.Table)) or type(data).__module__.startswith("datasets"):
        raw = data if isinstance(data, RawInput) else from_rows(data, name=type(data).__name__)
        if raw.line_numbers is not None or raw.errors:
            raise TypeError(f"{raw.name}: pass a file as its path to pack_ray, not as a RawInput read from it")
        step = _piece_rows(raw.num_rows, cpus)
        if raw.rows is not None:
            pieces = [("rows", ray.put(raw.rows[a : a + step]), (a,)) for a in range(0, raw.num_rows, step)]
        else:
            ref = ray.put(raw.table)
            pieces = [("block", ref, (a, min(a + step, raw.num_rows), a)) for a in range(0, raw.num_rows, step)]
        return raw.name, raw.kind, pieces, raw.fingerprint
    if type(data).__module__.startswith("ray.data") and isinstance(data, ray.data.Dataset):  # no Ray Data import
        name = data.name or "ray.data.Dataset"
        pieces, names = _dataset_pieces(data, cpus)
        if not pieces:
            raise ValueError(f"{name}: no rows")
        return name, detect_kind(names, name), pieces, None
    if not isinstance(data, (str, os.PathLike)):
        raise TypeError(
            f"pack_ray takes a JSONL/Parquet path, a ray.data.Dataset, a list of dict rows, a pyarrow.Table or a "
            f"datasets.Dataset, got {type(data).__name__}; convert it to one of those"
        )
    path = Path(data)
    if not path.exists():
        raise ValueError(f"input {path} does not exist")
    fmt = fmt or detect_format(path)
    if fmt == "jsonl":
        kind = _jsonl_kind(path, skip)
        step = min(max(math.ceil(path.stat().st_size / (PIECES_PER_CPU * cpus)), PIECE_BYTES[0]), PIECE_BYTES[1])
        ranges = _jsonl_ranges(path, step)
        count = ray.remote(_count_newlines)
        newlines = ray.get([count.remote(str(path), lo, hi) for lo, hi in ranges])
        first = np.cumsum([1, *newlines[:-1]]).tolist()  # 1-based number of each range's first line
        pieces = [("jsonl", str(path), (lo, hi, n)) for (lo, hi), n in zip(ranges, first)]
        return str(path), kind, pieces, ray.remote(_digest).remote([path])
    if fmt != "parquet":
        raise ValueError(
            f"input {path}: the Ray engine reads JSONL and Parquet, not {fmt}; pass "
            "ray.data.from_huggingface(datasets.load_from_disk(path)) or use the local engine (packwise pack)"
        )
    import pyarrow.parquet as pq

    files = sorted(path.glob("*.parquet")) if path.is_dir() else [path]
    schema = pa.unify_schemas([pq.read_schema(f) for f in files], promote_options="default")
    footers = [pq.ParquetFile(f).metadata for f in files]
    total = sum(m.num_rows for m in footers)
    if total == 0:
        raise ValueError(f"input {path} is empty (no rows)")
    step, read, pieces, row = _piece_rows(total, cpus), ray.remote(_read_parquet), [], 0
    for f, meta in zip(files, footers):
        groups, n = [], 0
        for g in range(meta.num_row_groups):  # read units of whole row groups, sliced into pieces
            groups.append(g)
            n += meta.row_group(g).num_rows
            if n >= step or g == meta.num_row_groups - 1:
                ref = read.remote(str(f), groups, schema)
                pieces += [("block", ref, (a, min(a + step, n), row + a)) for a in range(0, n, step)]
                groups, n, row = [], 0, row + n
    return str(path), detect_kind(schema.names, str(path)), pieces, ray.remote(_digest).remote(files)


def _piece_rows(total: int, cpus: int) -> int:
    return min(max(math.ceil(total / (PIECES_PER_CPU * cpus)), PIECE_ROWS[0]), PIECE_ROWS[1])


def _dataset_pieces(ds, cpus: int) -> tuple[list, list[str]]:
    """Blocks of a Ray Dataset in order, cut into slices (zero-copy), and its column names."""
    ctx = ds.context
    saved = ctx.execution_options.preserve_order, ctx.enable_progress_bars
    ctx.execution_options.preserve_order, ctx.enable_progress_bars = True, False
    try:
        blocks, names = [], []
        for bundle in ds.iter_internal_ref_bundles():
            names = names or (list(bundle.schema.names) if bundle.schema is not None else [])
            for entry, part in zip(bundle.blocks, bundle.slices):
                lo, hi = (0, entry.metadata.num_rows) if part is None else (part.start_offset, part.end_offset)
                if hi is None:
                    raise RuntimeError("packwise: a Ray Data block without a row count; materialize() the dataset")
                blocks.append((entry.ref, lo, hi))
    finally:
        ctx.execution_options.preserve_order, ctx.enable_progress_bars = saved
    step, pieces, row = _piece_rows(sum(hi - lo for _, lo, hi in blocks), cpus), [], 0
    for ref, lo, hi in blocks:
        pieces += [("block", ref, (a, min(a + step, hi), row + a - lo)) for a in range(lo, hi, step)]
        row += hi - lo
    return pieces, names


def _parse_line(raw: bytes, path: str, lineno: int) -> dict:
    """One JSONL line, parsed and reported as the local reader does."""
    try:
        row = json.loads(raw)
        if not isinstance(row, dict):
            raise ValueError(f"expected a JSON object, got {type(row).__name__}")
    except ValueError as e:
        raise ValueError(f"{path} line {lineno}: malformed JSON ({e}); {SKIP_HINT}") from None
    return row


def _jsonl_kind(path: Path, skip: bool) -> str:
    """The row kind, from the first valid line as the local reader decides it (reads only that far)."""
    bad = 0
    with open(path, "rb") as f:
        for lineno, raw in enumerate(f, start=1):
            if not raw.strip():
                continue
            try:
                row = _parse_line(raw, str(path), lineno)
            except ValueError:
                if not skip:
                    raise
                bad += 1
                continue
            return detect_kind(row.keys(), f"{path} line {lineno}")
    raise ValueError(
        f"input {path}: no line is valid JSON ({bad} bad lines)" if bad else f"input {path} is empty (no rows)"
    )


def _jsonl_ranges(path: Path, step: int) -> list[tuple[int, int]]:
    """Byte ranges of about ``step`` bytes, each ending just after a newline or at the end of the file."""
    size, cuts = path.stat().st_size, [0]
    with open(path, "rb") as f:
        while cuts[-1] + step < size:
            f.seek(cuts[-1] + step)
            cuts.append(cuts[-1] + step + len(f.readline()))
    return [(lo, hi) for lo, hi in zip(cuts, [*cuts[1:], size]) if lo < hi]


def _count_newlines(path: str, lo: int, hi: int) -> int:
    with open(path, "rb") as f:
        f.seek(lo)
        return f.read(hi - lo).count(b"\n")


def _read_parquet(path: str, groups: list[int], schema: pa.Schema) -> pa.Table:
    """Row groups of one file, with the columns and types of all files together (as the local reader)."""
    import pyarrow.parquet as pq

    return pa.concat_tables(
        [schema.empty_table(), pq.ParquetFile(path).read_row_groups(groups)], promote_options="default"
    )


@dataclass
class _Piece(RawInput):
    """Rows numbered from ``start``, so error messages name rows of the whole input."""

    start: int = 0

    def locate(self, i: int) -> str:
        return super().locate(i) if self.line_numbers is not None else f"{self.name} row {self.start + i}"


def _read_piece(tag: str, data, meta: tuple, name: str, kind: str) -> _Piece:
    if tag == "rows":
        return _Piece(name=name, kind=kind, rows=data, start=meta[0])
    if tag == "block":
        if not isinstance(data, pa.Table):
            from ray.data.block import BlockAccessor

            data = BlockAccessor.for_block(data).to_arrow()
        return _Piece(name=name, kind=kind, table=data.slice(meta[0], meta[1] - meta[0]), start=meta[2])
    lo, hi, first = meta
    with open(data, "rb") as f:
        f.seek(lo)
        lines = f.read(hi - lo).split(b"\n")
    rows, numbers, errors = [], [], []
    for k, raw in enumerate(lines):
        if raw.strip():  # the local reader sees each line with its newline: same JSON error positions
            try:
                rows.append(_parse_line(raw + b"\n" if k < len(lines) - 1 else raw, name, first + k))
            except ValueError as e:
                errors.append((len(rows), str(e)))
                rows.append(None)
            numbers.append(first + k)
    return _Piece(name=name, kind=kind, rows=rows, errors=errors, line_numbers=numbers)


_TOKENIZERS: dict = {}


def _load_tokenizer(handle):
    """``None``, a name or path (cached by ``load_tokenizer``), or ``[ObjectRef]`` (cached per worker)."""
    from ..tokenize import load_tokenizer

    if handle is None or isinstance(handle, str):
        return None if handle is None else load_tokenizer(handle)
    import ray

    key = handle[0].hex()
    if key not in _TOKENIZERS:
        _TOKENIZERS[key] = load_tokenizer(ray.get(handle[0]))
    return _TOKENIZERS[key]


def _rank(j: int, msg: str, n_parse: int, raw: RawInput) -> int:
    """Sorting bad rows by (rank, piece, row) gives the local engine's order: unparsable lines first, then
    each check in the order the local engine runs it over the whole input."""
    tail = msg[msg.rfind(": field ") :]
    if j < n_parse:
        return 0
    if raw.kind != "tokens":
        return 2 if "tokenizes to 0 tokens" in tail else 1
    if raw.table is None or "is empty or null" in tail:
        return 1
    if "outside the vocabulary" in tail:
        return 2
    return 3 if tail.startswith((": field 'labels'", ": field 'loss_mask'")) else 4


def _tokenize(tag: str, data, meta: tuple, o: dict, info: bool):
    """Worker: one piece through the local engine's validate/tokenize/normalise/overflow steps.

    Returns ``(stats, samples)``: ``stats`` is small (counts, the first 5 bad rows, per-sequence lengths);
    ``samples`` (sources numbered within the piece) stays in the object store.
    """
    from ..tokenize import tokenizer_fingerprint, tokenizer_name

    stats = {"rows": 0, "skipped": 0, "errors": [], "fatal": None, "too_long": None, "info": None, "digest": 0}
    stats["images"] = None
    stats |= {"tokens": 0, "loss": 0, "overflow": {}, "lengths": np.zeros(0, np.int32), "columns": {}}
    try:
        raw = _read_piece(tag, data, meta, o["name"], o["kind"])
        stats["rows"] = raw.num_rows
        if o["rowsum"]:
            for i, row in enumerate(raw.rows if raw.rows is not None else raw.table.to_pylist()):
                text = f"{raw.start + i}\0{json.dumps(row, sort_keys=True, default=str)}"
                stats["digest"] += int.from_bytes(hashlib.sha256(text.encode()).digest()[:8], "little")
        tok = _load_tokenizer(o["tokenizer"])
        if info and tok is not None:
            stats["info"] = (tokenizer_name(tok), tokenizer_fingerprint(tok, o["template"]))
        if o["kind"] == "tokens":
            samples, skipped = tokens_from_rows(raw, vocab_size=len(tok) if tok else None, skip_bad_rows=True)
        else:
            samples, skipped = tokenize_rows(
                raw, tok, loss_on=o["loss_on"], chat_template=o["template"], skip_bad_rows=True, vision=o["vision"]
            )
    except ValueError as e:  # the input as a whole is unusable: a bad tokenizer, a column of the wrong type
        stats["fatal"] = str(e)
        return stats, None
    stats["skipped"] = len(skipped)
    stats["errors"] = sorted((_rank(j, m, len(raw.errors), raw), r, m) for j, (r, m) in enumerate(skipped))[:5]
    samples.labels[samples.offsets[:-1]] = IGNORE_INDEX  # as pack_columns: a first label is never a target
    stats["tokens"], stats["loss"] = samples.num_tokens, int((samples.labels != IGNORE_INDEX).sum())
    try:
        samples, counts = apply_overflow(samples, o["capacity"], o["overflow"], raw.locate, o["vision"])
    except ValueError as e:
        stats["too_long"] = str(e)
        return stats, None
    stats["overflow"], stats["lengths"] = asdict(counts), samples.lengths.astype(np.int32)
    stats["columns"] = {k: v.dtype.str for k, v in samples.columns.items()}
    stats["images"] = None if samples.media is None else sum(len(m) for m in samples.media)
    return stats, samples if samples.num_sequences else None


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
    return skipped, [msg for *_, msg in errors[:5]]


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
        if ref is not None:
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


def _split(samples: Samples, pos: np.ndarray, bounds: np.ndarray, row_start: int):
    """Worker: one piece's sequences cut by writer group, as ``(Samples, plan positions)``; global sources."""
    group = np.searchsorted(bounds, pos, side="right") - 1
    order = np.argsort(group, kind="stable")
    cuts = np.searchsorted(group[order], np.arange(bounds.shape[0]))
    out = []
    for g in range(bounds.shape[0] - 1):
        sel = order[cuts[g] : cuts[g + 1]]
        lens = samples.lengths[sel]
        offsets = np.zeros(sel.shape[0] + 1, dtype=np.int64)
        np.cumsum(lens, out=offsets[1:])
        idx = np.repeat(samples.offsets[:-1][sel] - offsets[:-1], lens) + np.arange(offsets[-1])
        cols = {k: v[idx] for k, v in samples.columns.items()}
        part = Samples(samples.ids[idx], samples.labels[idx], offsets, samples.source[sel] + row_start, cols)
        part.media = None if samples.media is None else [samples.media[i] for i in sel]
        out.append((part, pos[sel]) if sel.size else None)
    return out[0] if len(out) == 1 else tuple(out)


def _write_group(meta: tuple, *parts):
    """Worker: build and write the Parquet shards of one group from the sequences the pieces sent."""
    import pyarrow.parquet as pq

    tmp, n_shards, jobs, offsets, capacity, algorithm, columns = meta
    parts = [p for p in parts if p is not None]

    def cat(values: list, dtype: str) -> np.ndarray:
        return np.concatenate([np.zeros(0, dtype), *values])

    lengths = cat([p.lengths for p, _ in parts], "int64")
    seq_offsets = np.zeros(lengths.shape[0] + 1, dtype=np.int64)
    np.cumsum(lengths, out=seq_offsets[1:])
    media = [p.media for p, _ in parts]  # a piece without images has no media: fill it in
    if MEDIA_TYPES in columns:
        media = [[[]] * p.num_sequences if m is None else m for m, (p, _) in zip(media, parts)]
        for p, _ in parts:
            p.columns.setdefault(MEDIA_TYPES, np.zeros(p.num_tokens, np.int8))
    cols = {k: cat([p.columns[k] for p, _ in parts], dtype) for k, dtype in columns.items()}
    ids, labels = cat([p.ids for p, _ in parts], "int32"), cat([p.labels for p, _ in parts], "int32")
    samples = Samples(ids, labels, seq_offsets, cat([p.source for p, _ in parts], "int64"), cols)
    if MEDIA_TYPES in columns:
        samples.media = [m for piece in media for m in piece]
    pos = cat([q for _, q in parts], "int64")
    order = np.argsort(pos)
    pos, done = pos[order], []
    for shard, p0, p1 in jobs:
        a, b = np.searchsorted(pos, [offsets[p0], offsets[p1]])
        plan = PackPlan(order[a:b], offsets[p0 : p1 + 1] - offsets[p0], lengths, capacity, algorithm)
        packed = PackedColumns.build(samples, plan)
        pq.write_table(packed.table(), Path(tmp) / shard_name(shard, n_shards), row_group_size=ROW_GROUP_PACKS)
        loss = int((packed.labels != IGNORE_INDEX).sum())
        done.append((shard, packed.num_packs, int(packed.ids.shape[0]), loss, packed.loss_tokens_masked_at_boundary))
    return done


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


__all__ = ["pack_ray"]
