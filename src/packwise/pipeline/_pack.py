"""``pack_dataset``: read -> validate/tokenize -> overflow -> plan -> packed table, with a report."""

from __future__ import annotations

import dataclasses
import inspect
import os
import time
from collections.abc import Callable

from ..files import Format, RawInput, from_rows, read_input
from ._options import PackOptions
from ._report import PackReport
from ._table import PackedColumns
from .steps import (
    PieceCounts,
    build_report,
    check_rows,
    check_sequences,
    execute,
    load_tokenizer_for,
    overflow,
    plan,
    shard_bounds,
    tokenize,
    tokenizer_info,
)

#: ``progress(stage, total)`` returns a function that advances that stage by ``n``.
Progress = Callable[[str, int], Callable[[int], None]]


def resolve_chat_template(chat_template: str | None) -> str | None:
    """``None`` (the tokenizer's own), ``"chatml"`` (ours), a file, or template text (see ``load_chat_template``)."""
    from ..text import load_chat_template

    return load_chat_template(chat_template)


def _as_input(data, format: Format | None, skip_bad_rows: bool) -> RawInput:  # noqa: A002
    if isinstance(data, RawInput):
        return data
    if callable(data) and not hasattr(data, "column_names"):
        return _as_input(data(), format, skip_bad_rows)
    if isinstance(data, (str, os.PathLike)):
        return read_input(data, format=format, skip_bad_rows=skip_bad_rows)
    if format is not None:
        raise ValueError(
            f"format={format!r} is read only for a path (which file reader to use); the input is an in-memory "
            f"{type(data).__name__} — drop format (--format)"
        )
    return from_rows(data, name=type(data).__name__)


def _check_progress(progress) -> None:
    """Refuse a ``progress`` that cannot be called as ``progress(stage, total)`` before any work is done."""
    if progress is None:
        return
    if not callable(progress):
        raise TypeError(f"progress must be a function progress(stage: str, total: int) -> advance, got {progress!r}")
    try:
        inspect.signature(progress).bind("read", 1)
    except ValueError:  # no signature to read (a builtin): called as documented
        return
    except TypeError as e:
        raise TypeError(
            f"progress{inspect.signature(progress)} cannot be called as progress(stage: str, total: int) ({e}); "
            "pass a function of (stage, total) that returns advance(n: int), called with each n done"
        ) from None


def _check_media_options_unread(vision, name) -> None:
    """Refuse image-sizing options (``min_pixels``, ``max_pixels``, ``media_root`` of ``vision``) set away from their
    defaults on data with no images, videos or audio: they would never be read."""
    if vision is None:
        return
    defaults = {f.name: f.default for f in dataclasses.fields(vision)}
    changed = [f"{n}={getattr(vision, n)!r}" for n in ("min_pixels", "max_pixels", "media_root")
               if getattr(vision, n) != defaults[n]]  # fmt: skip
    if changed:
        raise ValueError(
            f"{', '.join(changed)} set but {name} holds no images, videos or audio, so they would never be read; "
            "drop them (--min-pixels / --max-pixels / --media-root)"
        )


def _check_read_options(raw: RawInput, opts: PackOptions) -> None:
    """Refuse options the input never reads: a chat template on pre-tokenized rows, a dropped field no row holds."""
    if opts.chat_template is not None and raw.kind == "tokens":
        raise ValueError(
            f"chat_template is set but {raw.name} holds pre-tokenized input_ids rows, which no template renders; "
            "drop chat_template (--chat-template)"
        )
    if opts.drop_fields:
        present = set(raw.table.column_names) if raw.table is not None else {k for r in raw.rows or [] if r for k in r}
        absent = [n for n in opts.drop_fields if n not in present]
        if absent:
            raise ValueError(
                f"drop_fields names {', '.join(map(repr, absent))}, which no row of {raw.name} carries; fix the name "
                "or drop it from drop_fields (--drop-field)"
            )


def pack_columns(
    data, *, options: PackOptions | None = None, progress: Progress | None = None, **fields
) -> tuple[PackedColumns, PackReport]:
    """:func:`pack_dataset` without the final table: the flat packed columns (for sharded writes).

    The local engine: every step of :mod:`packwise.pipeline.steps` in this process, on the whole input.
    ``options`` (a :class:`PackOptions`) and/or its ``fields`` as keywords (``capacity=...``).
    """
    opts = PackOptions.of(options, **fields)
    _check_progress(progress)
    timings: dict[str, float] = {}
    t = time.perf_counter()
    advance_read = progress("read", 1) if progress else None  # a bar with elapsed time while reading
    raw = _as_input(data, opts.format, opts.skip_bad_rows)
    _check_read_options(raw, opts)
    if advance_read:
        advance_read(1)
    timings["read"] = time.perf_counter() - t

    t = time.perf_counter()
    template = resolve_chat_template(opts.chat_template)
    given_vision = opts.vision
    if raw.kind != "tokens":
        from ._media import with_media_root

        opts = opts.replace(vision=with_media_root(opts.vision, raw.name))  # the same root on both engines
    loaded = progress("tokenizer", 1) if progress and raw.kind != "tokens" else None  # imports transformers: ~1 s
    tok = load_tokenizer_for(raw.kind, opts)
    if loaded:
        loaded(1)
    advance = progress("tokenize", raw.num_rows) if progress and raw.kind != "tokens" else None
    samples, skipped = tokenize(raw, tok, template, opts, skip_bad_rows=opts.skip_bad_rows, progress=advance)
    timings["tokenize"] = time.perf_counter() - t
    check_rows(raw.name, PieceCounts(rows_read=raw.num_rows, rows_skipped=len(skipped)))
    if samples.media is None and not skipped:  # a skipped row may have held the media the options size
        _check_media_options_unread(given_vision, raw.name)

    t = time.perf_counter()
    fitted, oc = overflow(samples, opts, raw.locate)
    counts = PieceCounts.of(raw.num_rows, len(skipped), samples, oc, fitted)
    samples = fitted
    check_sequences(raw.name, counts, opts)
    timings["overflow"] = time.perf_counter() - t

    t = time.perf_counter()
    planned = progress("plan", 2) if progress else None  # 10 M sequences: seconds of planning and assembly
    the_plan = plan(samples.lengths, opts)
    timings["plan"] = time.perf_counter() - t
    if planned:
        planned(1)

    t = time.perf_counter()
    packed, packed_counts = execute(samples, the_plan)
    if planned:
        planned(1)
    timings["assemble"] = time.perf_counter() - t
    report = build_report(
        source=(raw.name, raw.fingerprint, raw.kind), tokenizer=tokenizer_info(tok, template), options=opts,
        counts=counts, packed=packed_counts, plan=the_plan, plan_hash=the_plan.plan_hash(),
        metrics=the_plan.metrics(), timings=timings, skipped=[msg for _, msg in skipped],
    )  # fmt: skip
    return packed, report


def write_packs(
    packed: PackedColumns, report: PackReport, out, *, packs_per_shard: int = 10_000, overwrite: bool = False,
    progress: Progress | None = None,
) -> None:  # fmt: skip
    """Step ``write`` of the local engine: shards of ``packs_per_shard`` packs and ``metadata.json`` into
    ``out`` (a path, or an open :class:`~packwise.files._output.OutputDir` the caller commits), staged and
    committed as :func:`packwise.files._write.write_packed` does; adds ``report.timings["write"]``."""
    from ..files import write_packed

    t = time.perf_counter()
    bounds = shard_bounds(packed.num_packs, packs_per_shard)
    tables = (packed.table(int(a), int(b)) for a, b in zip(bounds[:-1], bounds[1:]))
    advance = progress("write", packed.num_packs) if progress else None
    write_packed(out, tables, len(bounds) - 1, report.metadata(), overwrite=overwrite, on_shard=advance)
    report.timings["write"] = time.perf_counter() - t


def pack_dataset(data, *, capacity: int = 4096, **options):
    """Pack a dataset into rows of at most ``capacity`` tokens — the drop-in for TRL users.

    Args:
        data: a path (JSONL, Parquet, saved HF dataset directory), a ``datasets.Dataset``, a
            ``pyarrow.Table``, an iterable of dict rows, or a function returning one of those. Rows hold
            ``messages``, ``prompt`` + ``completion``, or pre-tokenized ``input_ids`` (+ ``labels`` or
            ``loss_mask``, + per-token columns; an ``attention_mask`` with left/right padding is stripped and
            counted as ``report.pad_tokens_removed``, 0s between real tokens make a bad row).
        capacity: tokens per pack.
        **options: ``tokenizer`` (``"qwen2.5"`` default for text, ``"smollm2"``, a path, or a tokenizer),
            ``algorithm``, ``seed``, ``overflow`` (``truncate``/``split``/``drop``/``error``), ``loss_on``
            (``assistant``/``all``), ``chat_template`` (``"chatml"``, a string or a ``.jinja`` path),
            ``skip_bad_rows``, ``max_sequences_per_pack``, ``min_packs``, ``pack_count_multiple``, ``format``,
            ``progress`` (``progress(stage: str, total: int)`` is called once per stage — ``read``,
            ``tokenizer``, ``tokenize``, ``plan``, ``write`` — and returns ``advance(n: int)``, called as ``n`` of
            ``total`` units are done; a TypeError up front otherwise), ``vision`` (a
            :class:`packwise.multimodal.VisionSpec` for image sizes), ``alignment`` (plan on lengths rounded up to
            this multiple), ``algorithm_options``. A
            :class:`packwise.PackingConfig` gives all of them: ``pack_dataset(data, **cfg.pipeline_kwargs())``.

    Returns:
        ``(packed, report)``: a ``pyarrow.Table`` (a ``datasets.Dataset`` when given one) with the columns
        described in ``packwise.pipeline._table``, and a :class:`PackReport`.

    Raises:
        ValueError: bad input (naming file, row, field and fix), bad options, or overflow='error' on a long
            sample.

    Example:
        >>> rows = [{"input_ids": [1, 2, 3]}, {"input_ids": [4, 5, 6]}, {"input_ids": [7, 8]}]
        >>> table, report = pack_dataset(rows, capacity=6)
        >>> table.column("input_ids").to_pylist(), table.column("labels").to_pylist()
        ([[1, 2, 3, 4, 5, 6], [7, 8]], [[-100, 2, 3, -100, 5, 6], [-100, 8]])
        >>> table.column("seq_lengths").to_pylist(), report.metrics.utilisation
        ([[3, 3], [2]], 0.666...)
    """
    packed, report = pack_columns(data, capacity=capacity, **options)  # **options: PackOptions' fields
    table = packed.table()
    if type(data).__module__.startswith("datasets"):
        import datasets

        return datasets.Dataset(table), report
    return table, report
