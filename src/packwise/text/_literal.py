"""Refuse special tokens typed into the text of a row (``<|im_start|>``, ``<|im_end|>``, ``<|endoftext|>``).

A fast tokenizer matches its added tokens inside any text it encodes, so a message whose content holds the
literal string ``<|im_end|>`` would become a real end-of-turn token: a forged turn, or an end of text inside a
reply that the model is trained to emit. packwise refuses the row (naming row and field) instead; the
pipeline checks each row with :func:`check_row` so that ``--skip-bad-rows`` skips and counts it like any
other bad row (``encode_chats``/``encode_prompt_completion`` check again, for direct callers).

Vision tokens (``<|image_pad|>``, ...) are written by packwise's media expansion into the text it encodes, so
they are left out here: vision tokens typed by the user are refused by the pipeline's own check
(``pipeline/_samples.py::_check_vision_tokens``, which counts them against the row's images). Every other special
token is refused, the ones at Qwen2.5-Omni's audio ids 151646-151648 included (``<|object_ref_start|>``,
``<|object_ref_end|>``, ``<|box_start|>`` in Qwen2.5; ``<|AUDIO|>``, ``<|audio_bos|>``, ``<|audio_eos|>`` in Omni):
this check reads the user's text before media expansion, which is encoded unchecked. Added tokens that are not
special (Qwen3's ``<think>``) are ordinary text the model also reads at inference and are allowed.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable, Sequence
from typing import Any

from ..files import BadRow

#: Vision placeholders: the pipeline checks them against the row's media (pipeline/_samples.py).
VISION_TOKENS = ("<|vision_start|>", "<|vision_end|>", "<|vision_pad|>", "<|image_pad|>", "<|video_pad|>")
FIX = "remove or escape it in the text; a turn boundary comes from the chat template, an end of text from EOS"


def special_token_pattern(tokenizer) -> re.Pattern | None:
    """A regex matching every special added token of ``tokenizer`` but the vision ones (None: there is none).

    Example:
        >>> from packwise.text._lite import pipeline_tokenizer
        >>> pattern = special_token_pattern(pipeline_tokenizer("qwen2.5"))
        >>> [pattern.search(f"x {t} y").group() for t in ("<|box_start|>", "<|object_ref_end|>")]
        ['<|box_start|>', '<|object_ref_end|>']
        >>> pattern.search("x <|image_pad|> y") is None  # counted against the row's images by the pipeline
        True
    """
    specials = set(getattr(tokenizer, "all_special_tokens", None) or [])
    decoder = getattr(tokenizer, "added_tokens_decoder", None) or {}
    specials |= {t.content for t in decoder.values() if getattr(t, "special", False)}
    ordered = sorted((t for t in specials if t and t not in VISION_TOKENS), key=len, reverse=True)
    return re.compile("|".join(map(re.escape, ordered))) if ordered else None


def _texts(message: dict):
    """Every string a message carries, with its field path: content, tool calls (names, arguments — their keys too,
    which ``tojson`` writes out), reasoning, names — a template can render any of them into the text it encodes."""
    if not isinstance(message, dict):
        return
    for key, value in message.items():
        if key != "role":  # the role is checked against the allowed roles
            yield from _strings(value, key)


def _strings(value, path: str):
    if isinstance(value, str):
        yield path, value
    elif isinstance(value, dict):
        for k, v in value.items():
            if isinstance(k, str):
                yield f"{path} (key)", k
            yield from _strings(v, f"{path}.{k}")
    elif isinstance(value, (list, tuple)):
        for k, v in enumerate(value):
            yield from _strings(v, f"{path}[{k}]")


def check_row(row, pattern: re.Pattern | None, where: str) -> None:
    """Raise :class:`~packwise.files._read.BadRow` naming ``where`` and the field when one conversation (a list of
    messages) or one ``(prompt, completion)`` pair of strings holds a literal special token or a lone surrogate
    (text no tokenizer can encode)."""
    if type(row) is list and _plain_and_clean(row, pattern):
        return
    fields: Iterable[tuple[str, Any]]
    if isinstance(row, tuple):
        fields = zip(("prompt", "completion"), row)
    else:
        fields = ((f"messages[{j}].{name}", text) for j, message in enumerate(row) for name, text in _texts(message))
    for name, text in fields:
        if not isinstance(text, str):
            continue
        if (at := _lone_surrogate(text)) is not None:
            raise BadRow(
                where, name, f"is not valid Unicode text: lone surrogate at char {at}",
                "fix the text (a \\ud800-\\udfff escape must come in a valid pair)",
            )  # fmt: skip
        if pattern is not None and (m := pattern.search(text)):
            raise _bad(where, name, m.group())


#: Message fields of a plain chat: the fast check reads only its content.
_PLAIN_KEYS = frozenset(("role", "content"))


def _plain_and_clean(chat: list, pattern: re.Pattern | None) -> bool:
    """True when every message is a dict of only ``role`` and ``str`` content, and no content holds a special token
    or a lone surrogate: one search over the contents joined by NUL (no special token holds one, so no match spans two
    messages). False sends the chat through the field-by-field check, which names the field."""
    if not all(type(m) is dict and m.keys() <= _PLAIN_KEYS for m in chat):  # other fields: checked one by one
        return False
    texts = [m.get("content") for m in chat]
    if not all(type(t) is str for t in texts) or (pattern is not None and "\0" in pattern.pattern):
        return False
    joined = "\0".join(texts)
    return _lone_surrogate(joined) is None and (pattern is None or pattern.search(joined) is None)


def _lone_surrogate(text: str) -> int | None:
    """The index of the first lone UTF-16 surrogate in ``text`` (JSON's ``"\\ud800"``), which no tokenizer can
    encode; None when there is none."""
    if text.isascii():
        return None
    try:
        text.encode("utf-8")
    except UnicodeEncodeError as e:
        return e.start
    return None


def check_chats(chats: Sequence[list[dict]], pattern: re.Pattern | None, where: Callable[[int], str]) -> None:
    """:func:`check_row` on every conversation (the first bad one raises)."""
    for i, chat in enumerate(chats):
        check_row(chat, pattern, where(i))


def check_pairs(prompts, completions, pattern: re.Pattern | None, where: Callable[[int], str]) -> None:
    """The same for plain-text prompt/completion pairs."""
    for i, pair in enumerate(zip(prompts, completions)):
        check_row(pair, pattern, where(i))


def _bad(where: str, field: str, token: str) -> BadRow:
    return BadRow(
        where, field, f"holds the literal special token {token}, which the tokenizer would encode as a real "
        "special token (a forged turn or end of text)", FIX,
    )  # fmt: skip
