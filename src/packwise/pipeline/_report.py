"""The pack report: exact token accounting plus the plan's metrics."""

from __future__ import annotations

from dataclasses import asdict, dataclass, field

from ..plan import PackingMetrics


@dataclass(frozen=True)
class PackReport:
    """What ``pack_dataset`` read, changed and produced. Counts are exact; tokens are tokens.

    Accounting identities (checked before the report is returned):
    ``tokens_read == tokens_packed + tokens_truncated + tokens_dropped`` and
    ``loss_tokens_read == loss_tokens_packed + loss_tokens_truncated + loss_tokens_dropped
    + loss_tokens_masked_at_boundary``. A loss token is masked at a boundary when it starts a packed
    sequence (the first piece of a split sample keeps its loss; later pieces lose their first target).
    Loss tokens are *targets*: labels != -100 after a sample's first token (HF shifts labels, so a sample's
    first label is never a target and is normalised to -100 on read). ``pad_tokens_removed``: padding
    (``attention_mask == 0``) stripped from pre-tokenized rows before anything is counted as read.
    ``packs_without_loss``: packs holding no target at all (a long prompt truncated at capacity): an HF model's
    mean loss over such a pack is NaN. ``drop_fields``/``field_values_dropped``: the fields removed from every
    row on request, and how many values they held. ``token_columns``: every per-token column carried besides
    ``input_ids``/``labels``, with its numpy dtype and per-token shape (``[]``: one number per token, ``[k]``:
    ``k`` per token, stored as ``list<fixed_size_list<dtype, k>>``).
    ``loss_on``: the chat setting (``assistant`` or ``all``); for pre-tokenized rows ``labels`` when their
    ``labels``/``loss_mask`` leave some token out, else ``all`` (ids only: every token after a sample's first).

    Example:
        >>> from packwise import pack_dataset
        >>> _, report = pack_dataset([{"input_ids": [1, 2, 3, 4, 5]}, {"input_ids": [6, 7]}], capacity=4)
        >>> report.tokens_read, report.tokens_packed, report.tokens_truncated, report.samples_truncated
        (7, 6, 1, 1)
        >>> report.packs, report.to_dict()["capacity"]
        (2, 4)
    """

    input: str
    input_fingerprint: str
    tokenizer: str | None
    tokenizer_fingerprint: str | None
    capacity: int
    algorithm: str
    seed: int | None
    overflow: str
    loss_on: str
    rows_read: int
    rows_skipped: int
    samples: int
    tokens_read: int
    loss_tokens_read: int
    samples_truncated: int
    tokens_truncated: int
    loss_tokens_truncated: int
    samples_split: int
    pieces_added: int
    samples_dropped: int
    tokens_dropped: int
    loss_tokens_dropped: int
    sequences_packed: int
    tokens_packed: int
    loss_tokens_packed: int
    loss_tokens_masked_at_boundary: int
    packs: int
    plan_hash: str
    metrics: PackingMetrics
    packwise_version: str
    timings: dict[str, float] = field(default_factory=dict)
    skipped_examples: list[str] = field(default_factory=list)
    multimodal: dict | None = None  # VisionSpec fields + images_packed / images_dropped, for data with images
    alignment: int = 1  # sequences were planned at lengths rounded up to this multiple
    algorithm_options: dict = field(default_factory=dict)
    pad_tokens_removed: int = 0
    packs_without_loss: int = 0
    drop_fields: list[str] = field(default_factory=list)
    field_values_dropped: int = 0
    token_columns: dict = field(default_factory=dict)  # per-token column -> {"dtype", "shape": per token}

    def to_dict(self) -> dict:
        """Plain ``dict`` for JSON (metrics nested under ``metrics``)."""
        return asdict(self)

    def metadata(self) -> dict:
        """What ``metadata.json`` holds of the report, on every engine: all of it but ``timings`` (so the
        output is reproducible byte for byte)."""
        meta = self.to_dict()
        meta.pop("timings", None)
        return meta

    def check(self) -> None:
        """Raise ``RuntimeError`` if a token is unaccounted for (a packwise bug, never user error)."""
        if self.tokens_read != self.tokens_packed + self.tokens_truncated + self.tokens_dropped:
            raise RuntimeError(f"packwise internal error: token accounting does not balance: {self}")
        loss_out = (
            self.loss_tokens_packed
            + self.loss_tokens_truncated
            + self.loss_tokens_dropped
            + self.loss_tokens_masked_at_boundary
        )
        if self.loss_tokens_read != loss_out:
            raise RuntimeError(f"packwise internal error: loss-token accounting does not balance: {self}")
