"""The pipeline as steps: read -> tokenize -> overflow -> plan -> execute -> write -> report.

Every engine runs these same functions; an engine decides only *where* each one runs. The local engine
(:func:`packwise.pipeline.pack_columns`) runs them in order in this process on the whole input; the Ray
engine (:mod:`packwise.integrations.ray`) runs ``tokenize`` and ``overflow`` on each piece of the input on
a worker, ``plan`` on the driver, ``execute`` and ``write`` in shard writers, and merges the per-piece
counts (:class:`PieceCounts`) and per-shard counts (:class:`PackedCounts`) into one :func:`build_report`.

This module is the engines' layer API (the Ray engine imports it), not the user API: ``__all__`` is empty;
users call :func:`packwise.pack_dataset` or ``packwise pack``.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field, fields

import numpy as np

from .. import __version__
from ..constants import IGNORE_INDEX
from ..files import SKIP_HINT, RawInput, without_fields
from ..plan import mask_boundaries
from ._options import DEFAULT_TOKENIZER, PackOptions
from ._overflow import OverflowCounts, apply_overflow
from ._report import PackReport
from ._samples import Samples, tokenize_rows
from ._table import PackedColumns
from ._tokens import tokens_from_rows

__all__: list[str] = []  # layer API only (see the module docstring)


def load_tokenizer_for(kind: str, options: PackOptions, tokenizer=None):
    """The tokenizer of a run: ``options.tokenizer`` (or ``tokenizer``, an already-loaded one), the default
    for text rows, None for pre-tokenized rows without one (no vocabulary check). The built-in ``qwen2.5`` loads
    without transformers (``text.pipeline_tokenizer``)."""
    from ..text import pipeline_tokenizer

    given = tokenizer if tokenizer is not None else options.tokenizer
    if given is None and kind == "tokens":
        return None
    return pipeline_tokenizer(given if given is not None else DEFAULT_TOKENIZER)


def tokenizer_info(tok, template: str | None) -> tuple[str | None, str | None]:
    """``(name, fingerprint)`` of the tokenizer with its chat template, as the report names them."""
    from ..text import tokenizer_fingerprint, tokenizer_name

    return (None, None) if tok is None else (tokenizer_name(tok), tokenizer_fingerprint(tok, template))


def tokenize(
    raw: RawInput,
    tok,
    template: str | None,
    options: PackOptions,
    *,
    skip_bad_rows: bool,
    progress=None,
    extra_names: list[str] | None = None,
) -> tuple[Samples, list[tuple[int, str]]]:
    """Step ``tokenize``: validate and tokenize ``raw`` (text rows with ``tok`` and ``template``,
    pre-tokenized rows checked against ``tok``'s vocabulary); returns the samples and ``(row, message)`` of
    skipped rows in row order (rows that are not JSON are found while reading, the others here). HF shifts
    labels inside the loss, so each sample's first label is never a target: it is normalised to -100 here, and
    only real targets count as loss tokens. ``options.drop_fields`` are removed from the rows first (counted)."""
    raw, dropped = without_fields(raw, options.drop_fields)
    if raw.kind == "tokens" and options.loss_on == "all":
        _refuse_all_over_labels(raw)
    if raw.kind == "tokens":
        vocab = len(tok) if tok is not None else None
        samples, skipped = tokens_from_rows(raw, vocab_size=vocab, skip_bad_rows=skip_bad_rows, extra_names=extra_names)
    else:
        samples, skipped = tokenize_rows(
            raw, tok, loss_on=options.loss_on, chat_template=template, skip_bad_rows=skip_bad_rows,
            progress=progress, vision=options.vision,
        )  # fmt: skip
    mask_boundaries(samples.labels, samples.offsets[:-1], samples.lengths)  # the one boundary-label rule
    samples.field_values_dropped = dropped
    return samples, sorted(skipped, key=lambda r: r[0])


def _refuse_all_over_labels(raw: RawInput) -> None:
    """``loss_on="all"`` on pre-tokenized rows that carry their own ``labels``/``loss_mask`` would ignore them (or be
    ignored): refused, naming the first row (or the table) and the column."""
    if raw.table is not None:
        found = next(((raw.name, c) for c in ("labels", "loss_mask") if c in raw.table.column_names), None)
    else:
        found = next(((raw.locate(i), c) for i, row in enumerate(raw.rows or []) if row is not None
                      for c in ("labels", "loss_mask") if row.get(c) is not None), None)  # fmt: skip
    if found is not None:
        where, column = found
        raise ValueError(
            f"{where}: rows carry {column}; loss_on='all' (--loss-on all) would ignore them — drop the {column} "
            "column (drop_fields / --drop-field) or the flag"
        )


def overflow(samples: Samples, options: PackOptions, locate) -> tuple[Samples, OverflowCounts]:
    """Step ``overflow``: :func:`apply_overflow` at :attr:`PackOptions.fit_capacity` (``locate(source)``
    names a row in an error)."""
    return apply_overflow(samples, options.fit_capacity, options.overflow, locate, options.vision)


@dataclass(frozen=True)
class PieceCounts:
    """What the read, tokenize and overflow steps saw in one piece of the input (the whole input for the
    local engine); pieces add up with ``+``."""

    rows_read: int = 0
    rows_skipped: int = 0
    tokens_read: int = 0
    loss_tokens_read: int = 0
    pad_tokens_removed: int = 0
    field_values_dropped: int = 0
    sequences: int = 0  # after the overflow policy
    overflow: OverflowCounts = field(default_factory=OverflowCounts)
    media: bool = False  # the samples carry images/video/audio
    images_packed: int = 0
    videos_packed: int = 0
    audio_packed: int = 0
    token_columns: tuple = ()  # ((name, dtype str, per-token shape), ...) of the carried per-token columns

    @classmethod
    def of(cls, rows: int, skipped: int, read: Samples, counts: OverflowCounts, kept: Samples) -> PieceCounts:
        """Counts of a piece of ``rows`` rows, ``skipped`` of them bad: ``read`` as tokenized, ``kept`` after
        the overflow policy changed it (``counts``)."""
        media = {}
        if kept.media is not None:
            items = [r for m in kept.media for r in m]
            videos = sum(len(r) == 3 for r in items)
            clips = sum(isinstance(r[1], int) for r in items)
            media = {"images_packed": len(items) - videos - clips, "videos_packed": videos, "audio_packed": clips}
        return cls(
            rows_read=rows, rows_skipped=skipped, tokens_read=read.num_tokens,
            loss_tokens_read=int((read.labels != IGNORE_INDEX).sum()), pad_tokens_removed=read.pad_tokens_removed,
            field_values_dropped=read.field_values_dropped,
            sequences=kept.num_sequences, overflow=counts, media=kept.media is not None, **media,
            token_columns=tuple((k, v.dtype.str, v.shape[1:]) for k, v in sorted(kept.columns.items())),
        )  # fmt: skip

    def __add__(self, other: PieceCounts) -> PieceCounts:
        merged = ("media", "token_columns")
        values = {f.name: getattr(self, f.name) + getattr(other, f.name) for f in fields(self) if f.name not in merged}
        return PieceCounts(
            **values,
            media=self.media or other.media,
            token_columns=_merge_columns(self.token_columns, other.token_columns),
        )

    @property
    def samples(self) -> int:
        """Rows that were not skipped (one sample each, before the overflow policy)."""
        return self.rows_read - self.rows_skipped

    def multimodal(self, vision) -> dict | None:
        """``PackReport.multimodal``: the vision settings and media counts, for data with media."""
        if not self.media:
            return None
        from ..multimodal import VisionSpec

        oc = self.overflow
        out = {**(vision or VisionSpec()).to_dict(), "images_packed": self.images_packed}
        out["images_dropped"] = oc.images_dropped
        if out["media_family"] == "nemotron-omni":  # its sizes and ids, read back by PackedParquetDataset
            from ..multimodal import NemotronOmniSpec

            out["nemotron_omni"] = asdict(NemotronOmniSpec())
        if self.videos_packed or oc.videos_dropped:
            out |= {"videos_packed": self.videos_packed, "videos_dropped": oc.videos_dropped}
        if self.audio_packed or oc.audio_dropped:
            from ..multimodal import AudioSpec

            out |= {
                **({} if out["media_family"] == "nemotron-omni" else {"audio": AudioSpec().to_dict()}),
                "audio_packed": self.audio_packed,
                "audio_dropped": oc.audio_dropped,
            }
        return out


def _merge_columns(a: tuple, b: tuple) -> tuple:
    """The per-token columns of two pieces: the same shape per column (else a ``ValueError`` naming the column
    and both shapes), the dtype both promote to; a piece that kept no sequence adds nothing."""
    if not a or not b:
        return a or b
    both = dict((k, (d, s)) for k, d, s in a)
    for k, d, s in b:
        if k in both and both[k][1] != s:
            raise ValueError(
                f"per-token column {k!r} has shape {list(both[k][1])} per token in one part of the input and "
                f"{list(s)} in another; give every row the same per-token shape (pad the short ones) or drop the column"
            )
        both[k] = (np.result_type(np.dtype(both[k][0]), np.dtype(d)).str if k in both else d, s)
    return tuple((k, d, s) for k, (d, s) in sorted(both.items()))


def check_rows(name: str, counts: PieceCounts) -> None:
    """Raise when every row was skipped (after ``tokenize``)."""
    if counts.samples == 0:
        raise ValueError(f"{name}: no usable rows ({counts.rows_skipped} skipped); nothing to pack")


def check_sequences(name: str, counts: PieceCounts, options: PackOptions) -> None:
    """Raise when the overflow policy dropped every sample (after ``overflow``)."""
    if counts.sequences == 0:
        raise ValueError(
            f"{name}: no sequence left to pack ({counts.overflow.samples_dropped} of {counts.samples} samples dropped "
            f"by overflow={options.overflow!r} at capacity {options.capacity}); raise --capacity or use truncate/split"
        )


def plans_from_histogram(options: PackOptions) -> bool:
    """Whether the algorithm plans from the length histogram alone (:func:`plan_from_histogram`); the others
    (next_fit, first_fit_shuffle) depend on the input order and need every length (:func:`plan`)."""
    from ..plan import HISTOGRAM_ALGORITHMS

    return options.algorithm_name in HISTOGRAM_ALGORITHMS


def plan(lengths: np.ndarray, options: PackOptions):
    """Step ``plan`` from ``(N,)`` lengths in input order: a :class:`~packwise.plan.PackPlan`."""
    from ..plan import plan_packs

    return plan_packs(lengths, **options.plan_kwargs())


def plan_from_histogram(counts: np.ndarray, options: PackOptions):
    """Step ``plan`` from ``counts[length]`` (``(C+1,)``): a :class:`~packwise.plan.HistogramPlan`, the same
    packs as :func:`plan` on the expanded lengths, in memory independent of N."""
    from ..plan import plan_histogram

    kwargs = options.plan_kwargs()
    kwargs.pop("seed")  # histogram planners are deterministic
    return plan_histogram(counts, **kwargs)


@dataclass(frozen=True)
class PackedCounts:
    """What the execute step produced in one shard (or all packs); shards add up with ``+``."""

    packs: int = 0
    tokens: int = 0
    loss_tokens: int = 0
    masked_at_boundary: int = 0
    packs_without_loss: int = 0  # packs whose every label is -100 (an HF model's mean loss over them is NaN)

    @classmethod
    def of(cls, packed: PackedColumns) -> PackedCounts:
        targets = packed.labels != IGNORE_INDEX
        loss = int(targets.sum())
        per_pack = np.add.reduceat(targets, packed.token_offsets[:-1]) if packed.num_packs else np.zeros(0, int)
        empty = int((per_pack == 0).sum())  # (packs hold >= 1 token: reduceat's empty-segment rule never applies)
        return cls(packed.num_packs, int(packed.ids.shape[0]), loss, packed.loss_tokens_masked_at_boundary, empty)

    def __add__(self, other: PackedCounts) -> PackedCounts:
        return PackedCounts(*(getattr(self, f.name) + getattr(other, f.name) for f in fields(self)))


def execute(samples: Samples, plan) -> tuple[PackedColumns, PackedCounts]:
    """Step ``execute``: the plan's packs as flat columns, and their counts."""
    packed = PackedColumns.build(samples, plan)
    return packed, PackedCounts.of(packed)


def shard_bounds(num_packs: int, packs_per_shard: int) -> np.ndarray:
    """``(S+1,)`` first pack of each shard of at most ``packs_per_shard`` packs (one empty shard for 0 packs)."""
    n_shards = max(1, -(-num_packs // packs_per_shard))
    return np.minimum(np.arange(n_shards + 1, dtype=np.int64) * packs_per_shard, num_packs)


def write_shard(packed: PackedColumns, start: int, stop: int, path: str, *, filesystem=None) -> dict:
    """Step ``write``: packs ``start:stop`` as one Parquet shard at ``path`` (on ``filesystem``, a pyarrow
    filesystem, when given); returns its ``metadata.json`` entry ``{"file", "packs", "bytes", "sha256"}``."""
    from ..files import write_shard as write_table

    return write_table(packed.table(start, stop), path, filesystem=filesystem)


def skipped_examples(messages: list[str]) -> list[str]:
    """The first 5 skip messages, as the report lists them."""
    return [msg.removesuffix(f"; {SKIP_HINT}") for msg in messages[:5]]


def build_report(
    *,
    source: tuple[str, str, str],
    tokenizer: tuple[str | None, str | None],
    options: PackOptions,
    counts: PieceCounts,
    packed: PackedCounts,
    plan,
    plan_hash: str,
    metrics,
    timings: dict[str, float],
    skipped: list[str],
) -> PackReport:
    """Step ``report``: the one place a :class:`PackReport` is built, from the input's ``(name, fingerprint,
    kind)``, the tokenizer's ``(name, fingerprint)``, the merged counts, the plan and its hash and metrics.

    Raises:
        RuntimeError: a token is unaccounted for (a packwise bug).
    """
    name, fingerprint, kind = source
    # every token a target but each sample's first (it has no context: its label is -100 from the read on)
    every_token = counts.loss_tokens_read >= counts.tokens_read - counts.samples
    report = PackReport(
        input=name, input_fingerprint=fingerprint, tokenizer=tokenizer[0], tokenizer_fingerprint=tokenizer[1],
        capacity=options.capacity, algorithm=plan.algorithm, seed=plan.seed, overflow=options.overflow,
        loss_on=options.report_loss_on(kind, every_token=every_token),
        rows_read=counts.rows_read, rows_skipped=counts.rows_skipped,
        samples=counts.samples, tokens_read=counts.tokens_read, loss_tokens_read=counts.loss_tokens_read,
        **counts.overflow.token_counts(), sequences_packed=plan.num_sequences, tokens_packed=packed.tokens,
        loss_tokens_packed=packed.loss_tokens, loss_tokens_masked_at_boundary=packed.masked_at_boundary,
        packs=plan.num_packs, plan_hash=plan_hash, metrics=metrics, packwise_version=__version__, timings=timings,
        skipped_examples=skipped_examples(skipped), multimodal=counts.multimodal(options.vision),
        alignment=plan.alignment, algorithm_options=dict(options.algorithm_options),
        pad_tokens_removed=counts.pad_tokens_removed, packs_without_loss=packed.packs_without_loss,
        drop_fields=list(options.drop_fields), field_values_dropped=counts.field_values_dropped,
        token_columns={k: {"dtype": np.dtype(d).name, "shape": list(s)} for k, d, s in counts.token_columns},
    )  # fmt: skip
    report.check()
    return report
