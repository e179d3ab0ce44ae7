"""Ray engine, worker tasks: tokenize one piece, and execute + write one group of shards.

Each task runs the pipeline's own steps (:mod:`packwise.pipeline.steps`: ``tokenize``, ``overflow``,
``execute``, ``write_shard``), so the Ray engine's packs and bytes equal ``packwise pack``'s.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass, field, replace

import numpy as np

from ...files import Kind, RawInput, shard_name
from ...pipeline import PackOptions, Samples
from ...pipeline.steps import (
    PieceCounts,
    execute,
    load_tokenizer_for,
    overflow,
    tokenize,
    tokenizer_info,
    write_shard,
)
from ...plan import PackPlan
from ._fs import Loc
from ._io import _read_piece
from ._spill import drop_piece, read_parts, read_piece, write_part

MEDIA_TYPES = "mm_token_type_ids"  # per-token column of data with media (absent from pieces without)


@dataclass(frozen=True)
class PieceJob:
    """What every tokenize task needs besides its piece and the :class:`PackOptions`."""

    name: str  # the input's name, in messages
    kind: Kind  # "messages", "prompt_completion" or "tokens" (files.detect_kind)
    template: str | None  # the chat template's text (resolved once, on the driver)
    digest_rows: bool  # sum per-row digests (a ray.data.Dataset has no file to fingerprint)
    keep_lengths: bool = False  # pass 1 returns the (n,) lengths (order-dependent planners need them all)
    extra_names: list[str] | None = None  # per-token columns of the input's first good row
    spill: object = None  # the spill folder (``_spill``): pass 1 writes the piece there, pass 2 reads it

    def with_extra_names(self, names: list[str] | None) -> PieceJob:
        return replace(self, extra_names=names)


@dataclass
class PieceStats:
    """A tokenize task's small result (the samples and lengths stay in the object store)."""

    counts: PieceCounts = field(default_factory=PieceCounts)
    errors: list = field(default_factory=list)  # (rank, row, message) of the first 5 bad rows
    fatal: str | None = None  # the input as a whole is unusable (a bad tokenizer, a column of the wrong type)
    too_long: str | None = None  # overflow="error" met a long sample
    tokenizer: tuple[str | None, str | None] | None = (
        None  # (name, fingerprint) of the tokenizer this piece was tokenized with
    )
    digest: int = 0
    hist: tuple = (np.zeros(0, np.int32), np.zeros(0, np.int64))  # (lengths, counts) after overflow
    columns: dict = field(default_factory=dict)  # per-token column -> dtype
    first_columns: list | None = None  # pre-tokenized: per-token columns of the piece's first good row
    lengths: np.ndarray | None = None  # (n,) int32, when the job keeps them


def _rank(j: int, msg: str, n_parse: int, raw: RawInput) -> int:
    """The lowest (rank, piece, row) is the bad row the local engine raises first without ``skip_bad_rows``:
    unparsable lines first, then each check in the order the local engine runs it over the whole input.
    (With ``skip_bad_rows`` both engines list skipped rows in row order.)"""
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


def _row_digest(raw) -> int:
    """Order-aware sum of per-row digests (input rows numbered from ``raw.start``): independent of blocks."""
    total = 0
    for i, row in enumerate(raw.rows if raw.rows is not None else raw.table.to_pylist()):
        text = f"{raw.start + i}\0{json.dumps(row, sort_keys=True, default=str)}"
        total += int.from_bytes(hashlib.sha256(text.encode()).digest()[:8], "little")
    return total


#: The last ``(tokenizer, template, (name, fingerprint))`` this worker process computed: a worker tokenizes many
#: pieces with the same (cached) tokenizer, and a fingerprint hashes the whole serialised tokenizer.
_LAST_INFO: list = [object(), None, None]


def _tokenizer_info(tok, template: str | None) -> tuple:
    """``(name, fingerprint)`` of ``tok`` with ``template``, each piece's own (the driver compares them: nodes
    that load different tokenizer files are refused, not mixed); computed once per tokenizer object."""
    last_tok, last_template, info = _LAST_INFO
    if tok is not last_tok or template != last_template:
        info = tokenizer_info(tok, template)
        _LAST_INFO[:] = [tok, template, info]
    return info


def _tokenize(tag: str, data, meta: tuple, options: PackOptions, job: PieceJob):
    """Worker: one piece through the pipeline's read, tokenize and overflow steps.

    Returns ``(stats, samples, lengths)``: ``stats`` is a small :class:`PieceStats`; ``samples`` (sources
    numbered within the piece) and ``lengths`` (``(n,)`` int32, for the plan hash and order-dependent
    planners) stay in the object store. Bad rows are always skipped here; the driver raises the first one
    as the local engine would when ``skip_bad_rows`` is off.
    """
    import ray

    stats = PieceStats()
    if isinstance(data, ray.ObjectRef):  # in-memory rows or a block, put in the object store by the driver
        data = ray.get(data)
    try:
        raw = _read_piece(tag, data, meta, job.name, job.kind)
        stats.counts = PieceCounts(rows_read=raw.num_rows)
        if job.digest_rows:
            stats.digest = _row_digest(raw)
        tok = load_tokenizer_for(job.kind, options)
        stats.tokenizer = _tokenizer_info(tok, job.template)
        samples, skipped = tokenize(raw, tok, job.template, options, skip_bad_rows=True, extra_names=job.extra_names)
        if job.kind == "tokens":
            stats.first_columns = sorted(samples.columns) if samples.num_sequences else None
    except ValueError as e:
        stats.fatal = str(e)
        return stats, None, None
    stats.counts = PieceCounts(rows_read=raw.num_rows, rows_skipped=len(skipped))
    ranked = [(_rank(j, m, len(raw.errors), raw), r, m) for j, (r, m) in enumerate(skipped)]
    by_row = sorted(ranked, key=lambda e: e[1])[:5]  # the report lists skipped rows in row order
    first = min(ranked, default=None)  # what the local engine raises first without skip_bad_rows
    stats.errors = by_row + ([first] if first is not None and first not in by_row else [])
    try:
        fitted, counts = overflow(samples, options, raw.locate)
    except ValueError as e:
        stats.too_long = str(e)
        return stats, None, None
    stats.counts = PieceCounts.of(raw.num_rows, len(skipped), samples, counts, fitted)
    lengths = fitted.lengths.astype(np.int32)
    values, count = np.unique(lengths, return_counts=True)
    stats.hist = (values.astype(np.int32), count.astype(np.int64))
    stats.columns = {k: v.dtype.str for k, v in fitted.columns.items()}
    return stats, fitted if fitted.num_sequences else None, lengths


def _place(spill, i: int, hp, place, bounds, row_start: int, seq_start: int, batch: int):
    """Worker, pass 2: piece ``i``'s sequences as pass 1 spilled them (``_spill``: the input is not read
    again), cut by writer group (see :func:`_split`) and written to each group's spill folder (a group that
    gets none of them gets no file); the piece's samples are then deleted. Returns the piece's share of the
    pad-to-longest baseline."""
    *parts, pad = _split(read_piece(spill, i), hp, place, bounds, row_start, seq_start, batch)
    for g, part in enumerate(parts):
        if part is not None:
            write_part(spill, g, i, part)
    drop_piece(spill, i)
    return pad


def _split(samples: Samples, hp, place: np.ndarray, bounds: np.ndarray, row_start: int, seq_start: int, batch: int):
    """Worker: one piece's sequences cut by writer group, as ``(Samples, plan positions, sequence indices)``
    with global sources; the last value is the piece's share of the pad-to-longest baseline.

    With ``hp`` None, ``place`` holds the sequences' plan positions (from a driver-side ``PackPlan``); with a
    :class:`~packwise.plan.HistogramPlan`, ``place`` holds per cost the sequences of earlier pieces (``(C+1,)``,
    or ``(costs, offsets)`` for the piece's own costs only), and the
    piece places its own sequences from the templates, so the driver never holds per-sequence arrays.
    """
    if hp is None:
        pos = place
    else:
        if isinstance(place, tuple):  # (costs, offsets) of this piece's costs only: the (C+1,) array here
            dense = np.zeros(hp.capacity + 1, dtype=np.int64)
            dense[place[0]] = place[1]
            place = dense
        pack, slot = hp.place(samples.lengths, place)
        pos = hp.pack_offsets(pack) + slot
    group = np.searchsorted(bounds, pos, side="right") - 1
    order = np.argsort(group, kind="stable")
    cuts = np.searchsorted(group[order], np.arange(bounds.shape[0]))
    out: list[tuple[Samples, np.ndarray, np.ndarray] | tuple[int, list] | None] = []
    for g in range(bounds.shape[0] - 1):
        sel = order[cuts[g] : cuts[g + 1]]
        lens = samples.lengths[sel]
        offsets = np.zeros(sel.shape[0] + 1, dtype=np.int64)
        np.cumsum(lens, out=offsets[1:])
        idx = np.repeat(samples.offsets[:-1][sel] - offsets[:-1], lens) + np.arange(offsets[-1])
        cols = {k: v[idx] for k, v in samples.columns.items()}
        part = Samples(samples.ids[idx], samples.labels[idx], offsets, samples.source[sel] + row_start, cols)
        part.media = None if samples.media is None else [samples.media[i] for i in sel]
        part.media_root = samples.media_root
        out.append((part, pos[sel], seq_start + sel) if sel.size else None)
    out.append(_pad_share(samples.lengths, seq_start, batch))
    return tuple(out)


def _pad_share(lengths: np.ndarray, seq_start: int, batch: int) -> tuple[int, list]:
    """``(tokens of whole batches, [(batch, longest, rows) of batches cut by the piece's edges])``: batches
    of ``batch`` consecutive sequences of the whole input, padded to their longest (``PackingMetrics``)."""
    n = lengths.shape[0]
    b = (seq_start + np.arange(n, dtype=np.int64)) // batch
    ids, starts, rows = np.unique(b, return_index=True, return_counts=True)
    longest = np.maximum.reduceat(lengths.astype(np.int64), starts) if n else np.zeros(0, np.int64)
    whole = rows == batch
    edges = [(int(i), int(m), int(r)) for i, m, r in zip(ids[~whole], longest[~whole], rows[~whole])]
    return int((longest[whole] * batch).sum()), edges


@dataclass(frozen=True)
class WriteJob:
    """What one shard writer writes: ``shards`` as ``(shard, first pack, stop pack)`` within the group."""

    tmp: str | Loc  # the staging directory, or a _fs.Loc (remote output)
    num_shards: int
    shards: list
    offsets: (
        np.ndarray | tuple
    )  # (packs+1,) sequence offsets in plan order, or (HistogramPlan ref, first pack, stop pack)
    capacity: int
    algorithm: str
    columns: dict  # per-token column -> dtype, as every piece has them
    media: bool = False  # the input has media: PieceCounts.media of the pieces, as the local engine decides it


def _write_group(job: WriteJob, spill, g: int):
    """Worker: execute the plan for shard group ``g`` from the sequences the pieces spilled for it (in piece
    order), and write its shards.

    Returns ``(shards, pack_length_counts, order)``: ``[(metadata.json entry, PackedCounts)]``, ``(C+1,)``
    packs per real token count, and the group's ``(n,)`` sequence indices in plan order (the group's slice
    of ``PackPlan.order``, for the plan hash).
    """
    offsets: np.ndarray
    if isinstance(job.offsets, tuple):  # (HistogramPlan ref, first pack, last pack + 1): O(packs of this group)
        import ray

        ref, first, stop = job.offsets
        offsets = ray.get(ref).pack_offsets(np.arange(first, stop + 1))
    else:
        offsets = job.offsets
    parts = read_parts(spill, g)

    def cat(values: list, dtype: str) -> np.ndarray:  # per-token columns may be (T, k, ...): keep the trailing shape
        return np.concatenate([np.zeros((0, *values[0].shape[1:]) if values else 0, dtype), *values])

    lengths = cat([p.lengths for p, _, _ in parts], "int64")
    seq_offsets = np.zeros(lengths.shape[0] + 1, dtype=np.int64)
    np.cumsum(lengths, out=seq_offsets[1:])
    media = [p.media for p, _, _ in parts]  # a piece without images has no media: fill it in
    if job.media:  # not "has mm_token_type_ids": pre-tokenized rows may carry it without any media
        media = [[[]] * p.num_sequences if m is None else m for m, (p, _, _) in zip(media, parts)]
        for p, _, _ in parts:
            p.columns.setdefault(MEDIA_TYPES, np.zeros(p.num_tokens, np.int8))
    cols = {k: cat([p.columns[k] for p, _, _ in parts], dtype) for k, dtype in job.columns.items()}
    ids, labels = cat([p.ids for p, _, _ in parts], "int32"), cat([p.labels for p, _, _ in parts], "int32")
    samples = Samples(ids, labels, seq_offsets, cat([p.source for p, _, _ in parts], "int64"), cols)
    if job.media:
        samples.media = [m for piece in media for m in piece]
        samples.media_root = next((p.media_root for p, _, _ in parts if p.media_root), None)
    pos = cat([q for _, q, _ in parts], "int64")
    order = np.argsort(pos)
    seq = cat([s for _, _, s in parts], "int64")[order]
    pos, done = pos[order], []
    fills = np.zeros(job.capacity + 1, dtype=np.int64)
    for shard, p0, p1 in job.shards:
        a, b = np.searchsorted(pos, [offsets[p0], offsets[p1]])
        plan = PackPlan(order[a:b], offsets[p0 : p1 + 1] - offsets[p0], lengths, job.capacity, job.algorithm)
        fills += np.bincount(plan.pack_lengths(), minlength=job.capacity + 1)
        packed, counts = execute(samples, plan)
        name = shard_name(shard, job.num_shards)
        if isinstance(job.tmp, str):
            entry = write_shard(packed, 0, packed.num_packs, f"{job.tmp}/{name}")
        else:  # a Loc on a pyarrow filesystem
            entry = write_shard(packed, 0, packed.num_packs, job.tmp.child(name).path, filesystem=job.tmp.fs)
        done.append((entry, counts))
    return done, fills, seq
