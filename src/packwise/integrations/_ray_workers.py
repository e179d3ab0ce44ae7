"""Ray engine, worker tasks: tokenize one piece, and assemble + write one group of shards.

Each task runs the local engine's own code (``tokenize_rows``/``tokens_from_rows``, ``apply_overflow``,
``PackedColumns.build``), so the Ray engine's packs and bytes equal ``packwise pack``'s.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import asdict
from pathlib import Path

import numpy as np

from ..constants import IGNORE_INDEX
from ..io._read import RawInput
from ..io._write import shard_name, write_shard
from ..pipeline._overflow import apply_overflow
from ..pipeline._samples import Samples, tokenize_rows
from ..pipeline._table import PackedColumns
from ..pipeline._tokens import tokens_from_rows
from ..plan import PackPlan
from ..plan._flat import mask_boundaries
from ._ray_io import _read_piece

MEDIA_TYPES = "mm_token_type_ids"  # per-token column of data with images (absent from pieces without)
_TOKENIZERS: dict = {}  # per worker process: tokenizer ObjectRef hex -> tokenizer


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

    Returns ``(stats, samples, lengths)``: ``stats`` is small (counts, the first 5 bad rows, the length
    histogram as ``(lengths, counts)``); ``samples`` (sources numbered within the piece) and ``lengths``
    (``(n,)`` int32, for the plan hash and order-dependent planners) stay in the object store.
    """
    from ..tokenize import tokenizer_fingerprint, tokenizer_name

    stats = {"rows": 0, "skipped": 0, "errors": [], "fatal": None, "too_long": None, "info": None, "digest": 0}
    stats["images"] = stats["first_columns"] = None
    stats |= {"tokens": 0, "loss": 0, "overflow": {}, "n": 0, "columns": {}}
    stats["hist"] = (np.zeros(0, np.int32), np.zeros(0, np.int64))
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
            samples, skipped = tokens_from_rows(
                raw, vocab_size=len(tok) if tok else None, skip_bad_rows=True, extra_names=o.get("extra_names")
            )
            stats["first_columns"] = sorted(samples.columns) if samples.num_sequences else None
        else:
            samples, skipped = tokenize_rows(
                raw, tok, loss_on=o["loss_on"], chat_template=o["template"], skip_bad_rows=True, vision=o["vision"]
            )
    except ValueError as e:  # the input as a whole is unusable: a bad tokenizer, a column of the wrong type
        stats["fatal"] = str(e)
        return stats, None, None
    stats["skipped"] = len(skipped)
    stats["errors"] = sorted((_rank(j, m, len(raw.errors), raw), r, m) for j, (r, m) in enumerate(skipped))[:5]
    mask_boundaries(samples.labels, samples.offsets[:-1], samples.lengths)  # as pack_columns: never a first target
    stats["tokens"], stats["loss"] = samples.num_tokens, int((samples.labels != IGNORE_INDEX).sum())
    stats["pads"] = samples.pad_tokens_removed  # attention_mask padding stripped on read (pipeline/_tokens.py)
    try:
        samples, counts = apply_overflow(samples, o["capacity"], o["overflow"], raw.locate, o["vision"])
    except ValueError as e:
        stats["too_long"] = str(e)
        return stats, None, None
    lengths = samples.lengths.astype(np.int32)
    stats["overflow"], stats["n"] = asdict(counts), int(lengths.shape[0])
    values, count = np.unique(lengths, return_counts=True)
    stats["hist"] = (values.astype(np.int32), count.astype(np.int64))
    stats["columns"] = {k: v.dtype.str for k, v in samples.columns.items()}
    stats["images"] = None if samples.media is None else sum(len(m) for m in samples.media)
    return stats, samples if samples.num_sequences else None, lengths


def _split(samples: Samples, hp, place: np.ndarray, bounds: np.ndarray, row_start: int, seq_start: int, batch: int):
    """Worker: one piece's sequences cut by writer group, as ``(Samples, plan positions, sequence indices)``
    with global sources; the last value is the piece's share of the pad-to-longest baseline.

    With ``hp`` None, ``place`` holds the sequences' plan positions (from a driver-side ``PackPlan``); with a
    :class:`~packwise.plan.HistogramPlan`, ``place`` holds per cost the sequences of earlier pieces, and the
    piece places its own sequences from the templates, so the driver never holds per-sequence arrays.
    """
    if hp is None:
        pos = place
    else:
        pack, slot = hp.place(samples.lengths, place)
        pos = hp.pack_offsets(pack) + slot
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


def _write_group(meta: tuple, *parts):
    """Worker: build and write the Parquet shards of one group from the sequences the pieces sent.

    Returns ``(shards, pack_length_counts, order)``: ``[(shard, packs, tokens, loss tokens, masked, entry)]``
    (``entry``: the shard's ``metadata.json`` record from :func:`~packwise.io._write.write_shard`),
    ``(C+1,)`` packs per real token count, and the group's ``(n,)`` sequence indices in plan order (the
    group's slice of ``PackPlan.order``, for the plan hash).
    """
    tmp, n_shards, jobs, offsets, capacity, algorithm, columns = meta
    if isinstance(offsets, tuple):  # (HistogramPlan, first pack, last pack + 1): O(packs of this group) here
        offsets = offsets[0].pack_offsets(np.arange(offsets[1], offsets[2] + 1))
    parts = [p for p in parts if p is not None]

    def cat(values: list, dtype: str) -> np.ndarray:
        return np.concatenate([np.zeros(0, dtype), *values])

    lengths = cat([p.lengths for p, _, _ in parts], "int64")
    seq_offsets = np.zeros(lengths.shape[0] + 1, dtype=np.int64)
    np.cumsum(lengths, out=seq_offsets[1:])
    media = [p.media for p, _, _ in parts]  # a piece without images has no media: fill it in
    if MEDIA_TYPES in columns:
        media = [[[]] * p.num_sequences if m is None else m for m, (p, _, _) in zip(media, parts)]
        for p, _, _ in parts:
            p.columns.setdefault(MEDIA_TYPES, np.zeros(p.num_tokens, np.int8))
    cols = {k: cat([p.columns[k] for p, _, _ in parts], dtype) for k, dtype in columns.items()}
    ids, labels = cat([p.ids for p, _, _ in parts], "int32"), cat([p.labels for p, _, _ in parts], "int32")
    samples = Samples(ids, labels, seq_offsets, cat([p.source for p, _, _ in parts], "int64"), cols)
    if MEDIA_TYPES in columns:
        samples.media = [m for piece in media for m in piece]
        samples.media_root = next((p.media_root for p, _, _ in parts if p.media_root), None)
    pos = cat([q for _, q, _ in parts], "int64")
    order = np.argsort(pos)
    seq = cat([s for _, _, s in parts], "int64")[order]
    pos, done = pos[order], []
    fills = np.zeros(capacity + 1, dtype=np.int64)
    for shard, p0, p1 in jobs:
        a, b = np.searchsorted(pos, [offsets[p0], offsets[p1]])
        plan = PackPlan(order[a:b], offsets[p0 : p1 + 1] - offsets[p0], lengths, capacity, algorithm)
        fills += np.bincount(plan.pack_lengths(), minlength=capacity + 1)
        packed = PackedColumns.build(samples, plan)
        if isinstance(tmp, str):
            entry = write_shard(packed.table(), Path(tmp) / shard_name(shard, n_shards))
        else:  # a Loc on a pyarrow filesystem (remote output)
            where = tmp.child(shard_name(shard, n_shards))
            entry = write_shard(packed.table(), where.path, filesystem=where.fs)
        loss = int((packed.labels != IGNORE_INDEX).sum())
        masked = packed.loss_tokens_masked_at_boundary
        done.append((shard, packed.num_packs, int(packed.ids.shape[0]), loss, masked, entry))
    return done, fills, seq
