"""``pack_dataset``: read -> validate/tokenize -> overflow -> plan -> packed table, with a report."""

from __future__ import annotations

import os
import time
from collections.abc import Callable

from .. import __version__
from ..constants import IGNORE_INDEX
from ..io._read import SKIP_HINT, Format, RawInput, from_rows, read_input
from ..plan import plan_packs
from ..plan._flat import mask_boundaries
from ._overflow import Overflow, apply_overflow
from ._report import PackReport
from ._samples import tokenize_rows
from ._table import PackedColumns
from ._tokens import tokens_from_rows

#: ``progress(stage, total)`` returns a function that advances that stage by ``n``.
Progress = Callable[[str, int], Callable[[int], None]]


def resolve_chat_template(chat_template: str | None) -> str | None:
    """``None`` (the tokenizer's own), ``"chatml"`` (ours), a file, or template text (see ``load_chat_template``)."""
    from ..tokenize._load import load_chat_template

    return load_chat_template(chat_template)


def _as_input(data, format: Format | None, skip_bad_rows: bool) -> RawInput:  # noqa: A002
    if isinstance(data, RawInput):
        return data
    if callable(data) and not hasattr(data, "column_names"):
        return _as_input(data(), format, skip_bad_rows)
    if isinstance(data, (str, os.PathLike)):
        return read_input(data, format=format, skip_bad_rows=skip_bad_rows)
    return from_rows(data, name=type(data).__name__)


def pack_columns(
    data,
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
    progress: Progress | None = None,
    vision=None,
    min_packs: int | None = None,
    pack_count_multiple: int | None = None,
    alignment: int = 1,
    algorithm_options: dict | None = None,
) -> tuple[PackedColumns, PackReport]:
    """:func:`pack_dataset` without the final table: the flat packed columns (for sharded writes)."""
    from ..tokenize import load_tokenizer, tokenizer_fingerprint, tokenizer_name

    if loss_on not in ("assistant", "all"):
        raise ValueError(f"loss_on must be 'assistant' or 'all', got {loss_on!r}")
    timings: dict[str, float] = {}
    t = time.perf_counter()
    advance_read = progress("read", 1) if progress else None  # a bar with elapsed time while reading
    raw = _as_input(data, format, skip_bad_rows)
    if advance_read:
        advance_read(1)
    timings["read"] = time.perf_counter() - t

    t = time.perf_counter()
    template = resolve_chat_template(chat_template)
    if raw.kind == "tokens":
        tok = load_tokenizer(tokenizer) if tokenizer is not None else None
        samples, skipped = tokens_from_rows(raw, vocab_size=len(tok) if tok else None, skip_bad_rows=skip_bad_rows)
    else:
        from ._media import with_media_root

        vision = with_media_root(vision, raw.name)  # the same absolute root in metadata on both engines
        loaded = progress("tokenizer", 1) if progress else None  # loading imports transformers: a second or more
        tok = load_tokenizer(tokenizer if tokenizer is not None else "qwen2.5")
        if loaded:
            loaded(1)
        advance = progress("tokenize", raw.num_rows) if progress else None
        samples, skipped = tokenize_rows(
            raw, tok, loss_on=loss_on, chat_template=template, skip_bad_rows=skip_bad_rows, progress=advance,
            vision=vision,
        )  # fmt: skip
    timings["tokenize"] = time.perf_counter() - t
    if samples.num_sequences == 0:
        raise ValueError(f"{raw.name}: no usable rows ({len(skipped)} skipped); nothing to pack")
    # HF shifts labels inside the loss, so a sample's first label is never a target: normalise it to -100
    # and count only real targets as loss tokens.
    mask_boundaries(samples.labels, samples.offsets[:-1], samples.lengths)
    pads_removed = samples.pad_tokens_removed  # padding stripped on read: never part of tokens_read
    tokens_read = samples.num_tokens
    loss_read = int((samples.labels != IGNORE_INDEX).sum())

    t = time.perf_counter()
    if isinstance(capacity, bool) or not isinstance(capacity, int) or capacity < 1:
        raise ValueError(f"capacity must be an integer >= 1 (tokens per pack), got {capacity!r}")
    if isinstance(alignment, bool) or not isinstance(alignment, int) or not 1 <= alignment <= capacity:
        raise ValueError(f"alignment must be an integer in [1, capacity={capacity}], got {alignment!r}")
    limit = capacity // alignment * alignment  # the longest sequence that still fits once aligned
    samples, oc = apply_overflow(samples, limit, overflow, raw.locate, vision)
    if samples.num_sequences == 0:
        raise ValueError(
            f"{raw.name}: no sequence left to pack ({oc.samples_dropped} of {len(samples.source) + oc.samples_dropped} "
            f"samples dropped by overflow={overflow!r} at capacity {capacity}); raise --capacity or use truncate/split"
        )
    images = None
    if samples.media is not None:
        from ..multimodal import VisionSpec

        images = {**(vision or VisionSpec()).to_dict(), "images_packed": sum(len(m) for m in samples.media),
                  "images_dropped": oc.images_dropped}  # fmt: skip
        videos = sum(len(r) == 3 for m in samples.media for r in m)
        if videos or oc.videos_dropped:
            images["images_packed"] -= videos
            images |= {"videos_packed": videos, "videos_dropped": oc.videos_dropped}
        if any(isinstance(r[1], int) for m in samples.media for r in m) or oc.audio_dropped:  # audio clips
            from ..multimodal import AudioSpec

            clips = sum(isinstance(r[1], int) for m in samples.media for r in m)
            images["images_packed"] -= clips
            images |= {"audio": AudioSpec().to_dict(), "audio_packed": clips, "audio_dropped": oc.audio_dropped}
    timings["overflow"] = time.perf_counter() - t

    t = time.perf_counter()
    planned = progress("plan", 2) if progress else None  # 10 M sequences: seconds of planning and assembly
    plan = plan_packs(
        samples.lengths,
        capacity=capacity,
        algorithm=algorithm,
        seed=seed,
        max_sequences_per_pack=max_sequences_per_pack,
        min_packs=min_packs,
        pack_count_multiple=pack_count_multiple,
        alignment=alignment,
        **(algorithm_options or {}),
    )
    timings["plan"] = time.perf_counter() - t
    if planned:
        planned(1)

    t = time.perf_counter()
    packed = PackedColumns.build(samples, plan)
    if planned:
        planned(1)
    timings["assemble"] = time.perf_counter() - t

    loss_packed = int((packed.labels != IGNORE_INDEX).sum())
    report = PackReport(
        input=raw.name,
        input_fingerprint=raw.fingerprint,
        tokenizer=tokenizer_name(tok) if tok is not None else None,
        tokenizer_fingerprint=tokenizer_fingerprint(tok, template) if tok is not None else None,
        capacity=capacity,
        algorithm=plan.algorithm,
        seed=plan.seed,
        overflow=overflow,
        loss_on=loss_on if raw.kind != "tokens" else "labels",  # pre-tokenized: the rows' own labels/loss_mask
        rows_read=raw.num_rows,
        rows_skipped=len(skipped),
        samples=raw.num_rows - len(skipped),
        tokens_read=tokens_read,
        loss_tokens_read=loss_read,
        samples_truncated=oc.samples_truncated,
        tokens_truncated=oc.tokens_truncated,
        loss_tokens_truncated=oc.loss_tokens_truncated,
        samples_split=oc.samples_split,
        pieces_added=oc.pieces_added,
        samples_dropped=oc.samples_dropped,
        tokens_dropped=oc.tokens_dropped,
        loss_tokens_dropped=oc.loss_tokens_dropped,
        sequences_packed=plan.num_sequences,
        tokens_packed=int(packed.ids.shape[0]),
        loss_tokens_packed=loss_packed,
        loss_tokens_masked_at_boundary=packed.loss_tokens_masked_at_boundary,
        packs=plan.num_packs,
        plan_hash=plan.plan_hash(),
        metrics=plan.metrics(),
        packwise_version=__version__,
        timings=timings,
        skipped_examples=[msg.removesuffix(f"; {SKIP_HINT}") for _, msg in skipped[:5]],
        multimodal=images,
        alignment=plan.alignment,
        algorithm_options=dict(algorithm_options or {}),
        pad_tokens_removed=pads_removed,
    )
    report.check()
    return packed, report


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
            ``progress``, ``vision`` (a :class:`packwise.multimodal.VisionSpec` for image sizes), ``alignment``
            (plan on lengths rounded up to this multiple), ``algorithm_options``. A
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
    packed, report = pack_columns(data, capacity=capacity, **options)
    table = packed.table()
    if type(data).__module__.startswith("datasets"):
        import datasets

        return datasets.Dataset(table), report
    return table, report
