"""From raw rows to tokenized samples in flat (CSR) arrays, validating every row on the way."""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Literal, cast

import numpy as np

from ..constants import IGNORE_INDEX
from ..files import SKIP_HINT, BadRow, DuplicateKeyError, RawInput, loads_unique
from ._types import RowErrors, Samples

if TYPE_CHECKING:
    import pyarrow as pa

ROLES = ("system", "user", "assistant", "tool")


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
    msgs = list(msgs)
    for j, m in enumerate(msgs):
        if not isinstance(m, dict):
            raise BadRow(where, f"{key}[{j}]", f"is a {type(m).__name__}, expected an object with role and content")
        if m.get("role") not in ROLES:
            raise BadRow(where, f"{key}[{j}].role", f"= {m.get('role')!r} is not one of {', '.join(ROLES)}")
        if m.get("tool_calls") or m.get("function_call"):  # null / [] (a Parquet struct's unused field) is none
            m = msgs[j] = _tool_calls(m, f"{key}[{j}]", where)
        if isinstance(m.get("content"), str) and not m["content"].isascii():  # ASCII: valid (a flag read)
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


def _tool_calls(m: dict, field: str, where: str) -> dict:
    """An assistant message's ``tool_calls`` checked and normalised to ``[{"type": "function", "function":
    {"name": str, "arguments": dict}}]`` (arguments given as a JSON string are parsed, so both spellings
    render the same); ``content`` may then be null or empty. The legacy ``function_call`` is refused."""

    if m.get("function_call") is not None:
        raise BadRow(
            where, f"{field}.function_call", "is OpenAI's legacy single-call field, which chat templates do not render",
            'write it as tool_calls: [{"type": "function", "function": {"name", "arguments"}}]',
        )  # fmt: skip
    if m["role"] != "assistant":
        raise BadRow(where, f"{field}.tool_calls", f"is on a {m['role']!r} message; only assistant messages call tools")
    calls = m["tool_calls"]
    if not isinstance(calls, list):
        raise BadRow(where, f"{field}.tool_calls", f"is a {type(calls).__name__}, expected a list of tool calls")
    out = []
    for k, call in enumerate(calls):
        at = f"{field}.tool_calls[{k}]"
        fn = call.get("function", call) if isinstance(call, dict) else None
        if not isinstance(fn, dict) or not isinstance(fn.get("name"), str) or not fn["name"]:
            raise BadRow(where, at, 'is not {"type": "function", "function": {"name": str, "arguments": {...}}}')
        args = fn.get("arguments", {})
        if isinstance(args, str):
            try:
                args = loads_unique(args)
            except DuplicateKeyError as e:
                raise BadRow(where, f"{at}.function.arguments", f"is a JSON string with a {e}") from None
            except ValueError as e:
                raise BadRow(where, f"{at}.function.arguments", f"is a string but not valid JSON ({e})") from None
        if not isinstance(args, dict):
            raise BadRow(where, f"{at}.function.arguments", f"is a {type(args).__name__}, expected a JSON object")
        out.append({"type": "function", "function": {"name": fn["name"], "arguments": args}})
    content = m.get("content")
    return {**m, "content": "" if content is None else content, "tool_calls": out}


#: Vision special tokens a tokenizer may define (Qwen2/2.5-VL): typed literally in text they would be encoded
#: as real vision tokens.
VISION_TOKENS = ("<|vision_start|>", "<|vision_end|>", "<|vision_pad|>", "<|image_pad|>", "<|video_pad|>")


def tokenize_rows(
    raw: RawInput,
    tokenizer,
    *,
    loss_on: Literal["assistant", "all"],
    chat_template: str | None,
    skip_bad_rows: bool,
    progress: Callable[[int], None] | None = None,
    vision=None,
) -> tuple[Samples, list[tuple[int, str]]]:
    """Validate and tokenize every row; returns the samples and ``(row, message)`` of skipped rows.

    Rows with images (content parts or an ``images`` list) are expanded with ``vision`` (a
    :class:`packwise.multimodal.VisionSpec`); the samples then carry ``mm_token_type_ids`` and ``media``.
    """
    from ..text import (
        check_message_fields,
        check_row,
        encode_checked_chats,
        encode_prompt_completion,
        special_token_pattern,
        template_renderer,
        untrained,
    )

    errors = RowErrors(skip_bad_rows, raw)
    literal = special_token_pattern(tokenizer)  # typed special tokens: a bad row (skippable), checked per row
    template = chat_template if chat_template is not None else getattr(tokenizer, "chat_template", None)
    renders_calls = isinstance(template, str) and "tool_calls" in template
    render = template_renderer(tokenizer, chat_template)  # a message field the render ignores is refused
    table = cast("pa.Table", raw.table)  # a RawInput without rows holds a table (RawInput.num_rows raises on neither)
    rows = raw.rows if raw.rows is not None else table.to_pylist()  # every column: each is read or refused
    chats, chat_rows, skips, texts, text_rows = [], [], [], [], []
    refs_of: dict[int, list] = {}
    for i, row in enumerate(rows):
        if row is None:
            continue
        where = raw.locate(i)
        try:
            check_row_fields(row, raw.kind, where)
            if row.get("tools"):
                raise BadRow(
                    where, "tools", "holds tool definitions, which packwise does not render (they would be dropped)",
                    "describe the tools in the system message, or drop the field",
                )  # fmt: skip
            if raw.kind == "messages":
                msgs = _chat(row, "messages", where)
                if loss_on == "assistant" and not any(m["role"] == "assistant" for m in msgs):
                    raise BadRow(
                        where, "messages", "has no assistant turn, so it would be packed with no loss token",
                        "add the reply, drop the row (--skip-bad-rows counts it), or train on every token "
                        "(--loss-on all)",
                    )  # fmt: skip
                check_row(msgs, literal, where)
                check_message_fields(msgs, render, where, "messages", loss_on=loss_on)
                _some_loss(msgs, untrained, 0, where, "messages", loss_on)
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
                check_row((row["prompt"], row["completion"]), literal, where)
                texts.append((row["prompt"], row["completion"]))
                text_rows.append(i)
            elif isinstance(row.get("prompt"), list) and isinstance(row.get("completion"), list):
                prompt = _chat(row, "prompt", where)
                completion = _chat(row, "completion", where)
                check_message_fields(prompt, render, where, "prompt", loss_on=loss_on, first_trained=len(prompt))
                check_message_fields(completion, render, where, "completion", loss_on=loss_on)
                _some_loss(completion, untrained, 0, where, "completion", loss_on)
                chat = prompt + completion
                check_row(chat, literal, where)
                chats.append(chat)
                chat_rows.append(i)
                skips.append(sum(m["role"] == "assistant" for m in prompt))
            else:
                kinds = f"{type(row.get('prompt')).__name__}/{type(row.get('completion')).__name__}"
                raise BadRow(where, "prompt", f"and 'completion' are {kinds}; both must be strings or message lists")
            if chat_rows and chat_rows[-1] == i and not renders_calls:
                _check_template_calls(chats[-1], where, raw.kind)
        except BadRow as e:
            errors.bad(i, e)
    encoded = []
    if chats:
        encoded += encode_checked_chats(  # every chat passed check_row above
            chats,
            tokenizer,
            chat_template=chat_template,
            loss_on=loss_on,
            skip_assistant_turns=skips,
            progress=progress,
            where=lambda j: raw.locate(chat_rows[j]),
            on_bad=lambda j, e: errors.bad(chat_rows[j], e),  # a template that drops the row's text
        )
    if texts:
        encoded += encode_prompt_completion(
            [p for p, _ in texts], [c for _, c in texts], tokenizer, loss_on=loss_on, progress=progress
        )
    per_sample, source, types = [], [], []
    vision_ids = _vision_ids(tokenizer)
    text_of = dict(zip(chat_rows, chats)) | {r: t for r, t in zip(text_rows, texts)}
    if refs_of and vision is None:
        from ..multimodal import VisionSpec

        vision = VisionSpec()
    for row, sample in zip(chat_rows + text_rows, encoded):
        if sample is None:
            continue  # refused while encoding (counted by on_bad)
        ids, mask = sample
        if ids.shape[0] == 0:
            errors.bad(row, BadRow(raw.locate(row), raw.kind, "tokenizes to 0 tokens"))
            continue
        if vision_ids:
            try:
                _check_vision_tokens(ids, vision_ids, refs_of.get(row) or [], text_of[row], raw.locate(row))
            except BadRow as e:
                errors.bad(row, e)
                continue
        if refs_of:
            from ._media import media_token_types

            try:
                types.append(media_token_types(ids, refs_of.get(row, []), vision, raw.locate(row)))
            except BadRow as e:
                errors.bad(row, e)
                continue
            mask = mask & (types[-1] == 0)  # media tokens are inputs, never targets (even in assistant turns)
        if vision_ids:  # the markers around them too (<|vision_start|>, <|vision_end|>): inputs, never targets
            mask = mask & ~np.isin(ids, list(vision_ids))
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
    samples.media_root = vision.media_root
    return samples, errors.rows


#: Top-level fields each text input kind reads (``tools`` is refused by name; ``images`` in prompt/completion too).
TEXT_FIELDS = {
    "messages": ("messages", "images", "tools"),
    "prompt_completion": ("prompt", "completion", "images", "tools"),
}


def check_row_fields(row: dict, kind: str, where: str) -> None:
    """Refuse a text row holding a field packwise does not read (it would not reach the packs), or two input
    kinds (``messages`` and ``prompt``/``completion``: one would be ignored). Null fields are absent."""
    known = TEXT_FIELDS[kind]
    for name, value in row.items():
        if value is None or name in known:
            continue
        if name in ("messages", "prompt", "completion", "input_ids"):
            first = "messages" if kind == "messages" else "prompt/completion"
            if all(row.get(k) is None for k in known[:2]):
                continue  # the row lacks its own kind: named as missing by the kind's check
            raise BadRow(
                where, name, f"is given together with {first!r}: a row holds one input kind (one would be ignored)",
                f"keep one of them (this dataset's first row is {first})",
            )  # fmt: skip
        raise BadRow(
            where, name, f"is not a field packwise reads from {kind} rows ({', '.join(known)}), so it would not "
            "reach the packs", f"drop it from the data, or pass drop_fields=[{name!r}] (--drop-field {name}) to "
            "drop and count it",
        )  # fmt: skip


def _some_loss(msgs: list[dict], untrained, first: int, where: str, key: str, loss_on: str) -> None:
    """Refuse a conversation part whose every assistant turn is missing or has ``weight: 0``: no loss token."""
    if loss_on != "assistant":
        return
    zero = untrained(msgs[first:])
    if not zero or all(zero):
        what = "no assistant turn" if not zero else "only assistant turns with weight 0"
        raise BadRow(
            where, key, f"has {what}, so it would be packed with no loss token",
            "add the reply, drop the row (--skip-bad-rows counts it), or train on every token (--loss-on all)",
        )  # fmt: skip


def _check_template_calls(msgs: list[dict], where: str, kind: str) -> None:
    """A template that never reads ``tool_calls`` would drop them silently: refuse the row instead."""
    for j, m in enumerate(msgs):
        if m.get("tool_calls"):
            field = f"messages[{j}].tool_calls" if kind == "messages" else "prompt/completion tool_calls"
            raise BadRow(
                where, field, "would be dropped: the chat template never reads tool_calls",
                "use the default template (chat_template='chatml' renders them as Qwen2.5 does) or a template that "
                "renders tool_calls",
            )  # fmt: skip


def _vision_ids(tokenizer) -> dict[int, str]:
    """Vision special tokens the tokenizer defines (id -> text); empty for text-only tokenizers."""
    try:
        added = tokenizer.get_added_vocab()
    except (AttributeError, NotImplementedError):
        return {}
    return {added[t]: t for t in VISION_TOKENS if t in added}


def _check_vision_tokens(ids: np.ndarray, vision_ids: dict[int, str], refs: list, text, where: str) -> None:
    """Refuse vision tokens that came from typed text: in a row without media every vision token is
    literal; in a row with media ``<|image_pad|>``/``<|vision_start|>``/``<|vision_end|>`` (and ``<|video_pad|>``
    with videos) are counted against the media by :func:`~packwise.pipeline._media.media_token_types`, and the
    others are always literal.

    Encoding them as plain text instead would make the packed ids differ from what the model's own tokenizer
    produces for the same text at inference (it matches special tokens in text), so the row is refused."""
    from ._media import is_video

    has_images = bool(refs)
    allowed: tuple[str, ...] = ("<|image_pad|>", "<|vision_start|>", "<|vision_end|>") if has_images else ()
    allowed += ("<|video_pad|>",) if any(is_video(r) for r in refs) else ()
    bad = [i for i, t in vision_ids.items() if t not in allowed]
    if not bad or not ids.shape[0] or ids.max() < min(bad):  # one reduction instead of a test per id
        return
    hit = np.isin(ids, bad)
    if not hit.any():
        return
    token = vision_ids[int(ids[int(np.flatnonzero(hit)[0])])]
    field = "messages"
    if isinstance(text, list):
        field = next(
            (f"messages[{j}].content" for j, m in enumerate(text) if token in str(m.get("content", ""))), field
        )
    else:
        field = "prompt" if token in text[0] else "completion"
    context = "a row whose images do not use it" if has_images else "a text-only row"
    raise BadRow(
        where, field, f"holds the literal vision token {token}, which the tokenizer would encode as a real vision "
        f"token in {context}", "remove it from the text (images go in image parts: {type: image, path})",
    )  # fmt: skip


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

    from ..multimodal import VisionSpec, expand_images

    vision = vision or VisionSpec()
    if tokenizer.convert_tokens_to_ids("<|image_pad|>") != vision.image_token_id:
        raise ValueError(
            f"{where}: image/audio parts need a tokenizer with Qwen2.5's vision tokens (<|image_pad|> = "
            f"{vision.image_token_id}); use --tokenizer qwen2.5"
        )
    from ._media import default_media_root

    base = default_media_root(raw.name)  # the input's folder; None for rows in memory (the cwd, unbounded)
    return expand_images(row, "messages", base_dir=base, spec=vision, where=where, tokenizer=_audio_ready(tokenizer))


def _audio_ready(tokenizer):
    """The tokenizer, after checking it holds special tokens at the audio ids (else audio parts are refused)."""
    from ..multimodal import audio_tokens_known
    from ._media import AUDIO

    return tokenizer if audio_tokens_known(tokenizer, AUDIO) else None


__all__ = ["SKIP_HINT", "Samples", "tokenize_rows"]
