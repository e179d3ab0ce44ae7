"""From raw rows to tokenized samples in flat (CSR) arrays, validating every row on the way."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

import numpy as np

from ..constants import IGNORE_INDEX
from ..io._read import SKIP_HINT, BadRow, RawInput

ROLES = ("system", "user", "assistant", "tool")


@dataclass
class Samples:
    """Tokenized samples, flat. ``N`` sequences, ``T`` tokens.

    Attributes:
        ids: ``(T,)`` int32 token ids.
        labels: ``(T,)`` int32 HF labels (unshifted; -100 = no loss).
        offsets: ``(N+1,)`` int64; sequence ``i`` is ``ids[offsets[i]:offsets[i+1]]``.
        source: ``(N,)`` int64 input row of each sequence.
        columns: other per-token columns, each ``(T,)``.
        media: per sequence, its images ``[(absolute path, (t, h, w)), ...]`` in text order (None when
            the data has no images).
    """

    ids: np.ndarray
    labels: np.ndarray
    offsets: np.ndarray
    source: np.ndarray
    columns: dict[str, np.ndarray] = field(default_factory=dict)
    media: list | None = None

    @property
    def lengths(self) -> np.ndarray:
        return np.diff(self.offsets)

    @property
    def num_sequences(self) -> int:
        return int(self.source.shape[0])

    @property
    def num_tokens(self) -> int:
        return int(self.ids.shape[0])

    @classmethod
    def from_arrays(cls, per_sample: list[tuple[np.ndarray, np.ndarray]], source: list[int], columns=None) -> Samples:
        lengths = np.fromiter((ids.shape[0] for ids, _ in per_sample), dtype=np.int64, count=len(per_sample))
        offsets = np.zeros(len(per_sample) + 1, dtype=np.int64)
        np.cumsum(lengths, out=offsets[1:])
        if per_sample:
            ids = np.concatenate([a for a, _ in per_sample]).astype(np.int32, copy=False)
            labels = np.concatenate([b for _, b in per_sample]).astype(np.int32, copy=False)
        else:
            ids = labels = np.zeros(0, dtype=np.int32)
        return cls(ids, labels, offsets, np.asarray(source, dtype=np.int64), columns or {})


class RowErrors:
    """Raise on the first bad row, or count and keep the first few messages with ``skip``."""

    def __init__(self, skip: bool, raw: RawInput) -> None:
        self.skip = skip
        self.rows: list[tuple[int, str]] = list(raw.errors)

    def bad(self, row: int, error: BadRow) -> None:
        if not self.skip:
            raise error
        self.rows.append((row, str(error)))


def _chat(row: dict, key: str, where: str) -> list[dict]:
    msgs = row.get(key)
    if msgs is None:
        if row.get("input_ids") is not None or row.get("messages") is not None:
            other = "input_ids" if row.get("input_ids") is not None else "messages"
            raise BadRow(
                where, key, f"is missing but the row has {other!r}: one input kind per dataset (the first row's)"
            )
        raise BadRow(where, key, "is missing")
    if not isinstance(msgs, list) or not msgs:
        raise BadRow(where, key, "is empty" if isinstance(msgs, list) else f"is a {type(msgs).__name__}, not a list")
    for j, m in enumerate(msgs):
        if not isinstance(m, dict):
            raise BadRow(where, f"{key}[{j}]", f"is a {type(m).__name__}, expected an object with role and content")
        if m.get("role") not in ROLES:
            raise BadRow(where, f"{key}[{j}].role", f"= {m.get('role')!r} is not one of {', '.join(ROLES)}")
        if isinstance(m.get("content"), str):
            try:
                m["content"].encode("utf-8")
            except UnicodeEncodeError as e:
                raise BadRow(
                    where, f"{key}[{j}].content", f"is not valid Unicode text ({e.reason} at {e.start})"
                ) from None
        if not isinstance(m.get("content"), (str, list)):
            raise BadRow(
                where,
                f"{key}[{j}].content",
                f"is {type(m.get('content')).__name__}, expected a string or a list of parts",
            )
    return msgs


def tokenize_rows(
    raw: RawInput,
    tokenizer,
    *,
    loss_on: str,
    chat_template: str | None,
    skip_bad_rows: bool,
    progress: Callable[[int], None] | None = None,
    vision=None,
) -> tuple[Samples, list[tuple[int, str]]]:
    """Validate and tokenize every row; returns the samples and ``(row, message)`` of skipped rows.

    Rows with images (content parts or an ``images`` list) are expanded with ``vision`` (a
    :class:`packwise.multimodal.VisionSpec`); the samples then carry ``mm_token_type_ids`` and ``media``.
    """
    from ..tokenize import encode_chats, encode_prompt_completion

    errors = RowErrors(skip_bad_rows, raw)
    columns = _text_columns(raw) + (["images"] if raw.table is not None and "images" in raw.table.column_names else [])
    rows = raw.rows if raw.rows is not None else raw.table.select(columns).to_pylist()
    chats, chat_rows, skips, texts, text_rows = [], [], [], [], []
    refs_of: dict[int, list] = {}
    for i, row in enumerate(rows):
        if row is None:
            continue
        where = raw.locate(i)
        try:
            if raw.kind == "messages":
                msgs = _chat(row, "messages", where)
                if _multimodal(row):
                    msgs, refs_of[i] = _expand(row, raw, vision, tokenizer, where)
                chats.append(msgs)
                chat_rows.append(i)
                skips.append(0)
            elif row.get("images") is not None or _multimodal({"messages": _parts(row)}):
                raise BadRow(
                    where, "images" if row.get("images") is not None else "prompt",
                    "holds images, which are supported in messages rows only",
                    "write the row as messages (user turn with the image parts, assistant turn with the completion)",
                )  # fmt: skip
            elif isinstance(row.get("prompt"), str) and isinstance(row.get("completion"), str):
                texts.append((row["prompt"], row["completion"]))
                text_rows.append(i)
            elif isinstance(row.get("prompt"), list) and isinstance(row.get("completion"), list):
                prompt = _chat(row, "prompt", where)
                chats.append(prompt + _chat(row, "completion", where))
                chat_rows.append(i)
                skips.append(sum(m["role"] == "assistant" for m in prompt))
            else:
                kinds = f"{type(row.get('prompt')).__name__}/{type(row.get('completion')).__name__}"
                raise BadRow(where, "prompt", f"and 'completion' are {kinds}; both must be strings or message lists")
        except BadRow as e:
            errors.bad(i, e)
    encoded = []
    if chats:
        encoded += encode_chats(
            chats,
            tokenizer,
            chat_template=chat_template,
            loss_on=loss_on,
            skip_assistant_turns=skips,
            progress=progress,
            where=lambda j: raw.locate(chat_rows[j]),
        )
    if texts:
        encoded += encode_prompt_completion(
            [p for p, _ in texts], [c for _, c in texts], tokenizer, loss_on=loss_on, progress=progress
        )
    per_sample, source, types = [], [], []
    if refs_of and vision is None:
        from ..multimodal import VisionSpec

        vision = VisionSpec()
    for row, (ids, mask) in zip(chat_rows + text_rows, encoded):
        if ids.shape[0] == 0:
            errors.bad(row, BadRow(raw.locate(row), raw.kind, "tokenizes to 0 tokens"))
            continue
        if refs_of:
            from ._media import media_token_types

            try:
                types.append(media_token_types(ids, refs_of.get(row, []), vision, raw.locate(row)))
            except BadRow as e:
                errors.bad(row, e)
                continue
            mask = mask & (types[-1] == 0)  # media tokens are inputs, never targets (even in assistant turns)
        per_sample.append((ids, np.where(mask, ids, IGNORE_INDEX)))
        source.append(row)
    order = np.argsort(np.asarray(source, dtype=np.int64), kind="stable")
    per_sample = [per_sample[k] for k in order]
    source = [source[k] for k in order]
    if not refs_of:
        return Samples.from_arrays(per_sample, source), errors.rows
    cols = {"mm_token_type_ids": np.concatenate([types[k] for k in order]) if types else np.zeros(0, np.int8)}
    samples = Samples.from_arrays(per_sample, source, cols)
    samples.media = [refs_of.get(r, []) for r in source]
    return samples, errors.rows


def _parts(row: dict) -> list:
    """prompt + completion messages (for the image check); empty for plain-text rows."""
    out = []
    for key in ("prompt", "completion"):
        if isinstance(row.get(key), list):
            out += [m for m in row[key] if isinstance(m, dict)]
    return out


def _multimodal(row: dict) -> bool:
    from ..multimodal import is_multimodal

    return is_multimodal(row)


def _expand(row: dict, raw: RawInput, vision, tokenizer, where: str):
    from pathlib import Path

    from ..multimodal import VisionSpec, expand_images

    vision = vision or VisionSpec()
    if tokenizer.convert_tokens_to_ids("<|image_pad|>") != vision.image_token_id:
        raise ValueError(
            f"{where}: image/audio parts need a tokenizer with Qwen2.5's vision tokens (<|image_pad|> = "
            f"{vision.image_token_id}); use --tokenizer qwen2.5"
        )
    base = Path(raw.name).parent if Path(raw.name).is_file() else Path.cwd()
    return expand_images(row, "messages", base_dir=base, spec=vision, where=where, tokenizer=_audio_ready(tokenizer))


def _audio_ready(tokenizer):
    """The tokenizer, after checking it holds special tokens at the audio ids (else audio parts are refused)."""
    from ..multimodal._chat import audio_tokens_known
    from ._media import AUDIO

    return tokenizer if audio_tokens_known(tokenizer, AUDIO) else None


def _text_columns(raw: RawInput) -> list[str]:
    return ["messages"] if raw.kind == "messages" else ["prompt", "completion"]


from ._tokens import tokens_from_rows  # noqa: E402  (re-export; _tokens imports this module)

__all__ = ["SKIP_HINT", "Samples", "tokenize_rows", "tokens_from_rows"]
