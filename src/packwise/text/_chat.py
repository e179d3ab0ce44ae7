"""Render chats with the tokenizer's chat template (packwise's own sandboxed Jinja environment, ``_jinja``, which
renders as transformers does without importing it; the built-in ChatML in Python, ``_chatml``) and derive the
loss mask from the template's turn spans — never from token values, since a sample may contain the EOS or pad
id mid-text.

Two ways to find the assistant spans, both from the template itself:

- templates with ``{% generation %}`` blocks (our ChatML, TRL's templates): the renderer records the
  character span of every block, as transformers' does;
- other templates: each assistant turn ``i`` spans from the end of ``messages[:i]`` rendered with the
  generation prompt to the end of ``messages[:i+1]``, trailing whitespace excluded; a template whose
  renders are not prefixes of each other is rejected with the fix (a template with ``{% generation %}``).

Character spans become token spans with the fast tokenizer's ``char_to_token``.

Templates are untrusted code: they render in the budgeted sandbox of ``_sandbox.py``.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Sequence
from typing import Literal, cast

import numpy as np

from ..files import BadRow
from ._fields import check_rendered, untrained
from ._literal import check_chats, check_pairs, special_token_pattern
from ._sandbox import MAX_TEMPLATE_SECONDS, MAX_TEMPLATE_STEPS, _render  # noqa: F401  (MAX_*: re-exported)

LossOn = Literal["assistant", "all"]
_GENERATION = re.compile(r"\{%-?\s*generation\s*-?%\}")


def _template_kwargs(tok) -> dict:
    kwargs = dict(getattr(tok, "special_tokens_map", {}) or {})
    return {k: v for k, v in kwargs.items() if isinstance(v, str)}


def _prefix_spans(chat: list[dict], text: str, template: str, kwargs: dict, where: str) -> list[tuple[int, int]]:
    """One ``(start, end)`` per assistant message, from the renders themselves: from the end of the conversation
    before it rendered with the generation prompt to the end of the conversation up to it (trailing whitespace
    excluded; an empty span when the reply renders nothing). Never a text search."""
    spans = []
    for i, message in enumerate(chat):
        if message.get("role") != "assistant":
            continue
        before = _render([chat[:i]], template, kwargs, spans=False, add_generation_prompt=True)[0]
        upto = _render([chat[: i + 1]], template, kwargs, spans=False)[0]
        if not (upto.startswith(before) and text.startswith(upto)):
            raise ValueError(
                f"{where}: the chat template does not render prefixes of a conversation as prefixes of the whole "
                "(assistant spans cannot be located); use a template with {% generation %} blocks "
                "(chat_template='chatml') or loss_on='all'"
            )
        if before == _render([chat[:i]], template, kwargs, spans=False)[0]:
            raise ValueError(
                f"{where}: the chat template ignores add_generation_prompt (the conversation before assistant "
                f"message {i} renders the same with and without it), so where the reply starts cannot be told "
                "from the render (the role header would carry loss); use a template that renders the generation "
                "prompt, or one with {% generation %} blocks (chat_template='chatml'), or loss_on='all'"
            )
        start, end = len(before), len(upto.rstrip())
        spans.append((start, max(start, end)))
    return spans


def _untrained(chat: list[dict], spans, skips, i: int, where) -> list[bool]:
    """Per span: whether it carries no loss — inside a prompt (the first ``skips[i]`` assistant turns) or
    ``weight: 0``. Spans map to assistant messages one to one; a template with another number of
    ``{% generation %}`` blocks cannot honour weights (refused when one is 0)."""
    skip = skips[i] if skips is not None else 0
    zero = untrained(chat)
    if len(spans) != len(zero):
        if any(zero):
            raise BadRow(
                where(i), "weight", f"cannot be honoured: the chat template renders {len(spans)} reply spans for "
                f"{len(zero)} assistant messages", "use a template with one {% generation %} block per reply",
            )  # fmt: skip
        return [k < skip for k in range(len(spans))]
    return [k < skip or z for k, z in enumerate(zero)]


def template_renderer(tokenizer, chat_template: str | None):
    """``render(messages) -> str`` with ``chat_template`` (default the tokenizer's own) in the budgeted sandbox,
    as :func:`encode_chats` renders; None when there is no template (``encode_chats`` refuses that)."""
    template = chat_template if chat_template is not None else getattr(tokenizer, "chat_template", None)
    if not template:
        return None
    kwargs = _template_kwargs(tokenizer)
    return lambda chat: _render([chat], template, kwargs, spans=False)[0]


def _token_span(enc, start: int, end: int) -> tuple[int, int] | None:
    """Tokens ``[t0, t1)`` covering the characters ``[start, end)``: from the first character inside a token to
    the last (usually the span's own ends, tried first without building a generator)."""
    t0 = enc.char_to_token(start)
    if t0 is None:
        t0 = next((t for c in range(start + 1, end) if (t := enc.char_to_token(c)) is not None), None)
        if t0 is None:
            return None
    t1 = enc.char_to_token(end - 1)
    if t1 is None:
        t1 = next(t for c in range(end - 2, start - 1, -1) if (t := enc.char_to_token(c)) is not None)
    return t0, t1 + 1


def encode_chats(
    chats: Sequence[list[dict]],
    tokenizer,
    *,
    chat_template: str | None = None,
    loss_on: LossOn = "assistant",
    skip_assistant_turns: Sequence[int] | None = None,
    batch_size: int = 256,
    progress: Callable[[int], None] | None = None,
    where: Callable[[int], str] = lambda i: f"conversation {i}",
) -> list[tuple[np.ndarray, np.ndarray]]:
    """Tokenize conversations with a chat template; loss on assistant turns (or on everything).

    Args:
        chats: conversations, each a list of ``{"role", "content"}`` dicts (already validated).
        tokenizer: a fast Hugging Face tokenizer.
        chat_template: Jinja template; default the tokenizer's own.
        loss_on: ``"assistant"`` — tokens inside assistant turns (reply and end-of-turn token);
            ``"all"`` — every token.
        skip_assistant_turns: per conversation, how many leading assistant turns carry no loss (the ones
            inside a prompt of prompt/completion data).
        batch_size: conversations rendered and tokenized per batch.
        progress: called with the number of conversations finished after each batch.
        where: names conversation ``i`` in error messages.

    Returns:
        Per conversation ``(input_ids (L,) int32, loss_mask (L,) bool)``.

    Raises:
        BadRow: (a ValueError) a message's text holds a literal special token of the tokenizer
            (``<|im_end|>``, ...), naming the conversation and field.
        ValueError: no chat template, a template whose assistant spans cannot be located or that marks no
            assistant token in any conversation with assistant turns (``loss_on="assistant"``), or a template
            over its budget (steps, seconds, output size; see the module docstring) or failing.

    Example:
        >>> from packwise.text import load_tokenizer
        >>> tok = load_tokenizer("qwen2.5")
        >>> chat = [{"role": "user", "content": "Hi"}, {"role": "assistant", "content": "Yo"}]
        >>> [(ids, mask)] = encode_chats([chat], tok)
        >>> tok.decode(ids[mask])
        'Yo<|im_end|>'
    """
    check_chats(chats, special_token_pattern(tokenizer), where)
    encoded = _encode_chats(
        chats, tokenizer, chat_template=chat_template, loss_on=loss_on, skip_assistant_turns=skip_assistant_turns,
        batch_size=batch_size, progress=progress, where=where,
    )  # fmt: skip
    return cast("list[tuple[np.ndarray, np.ndarray]]", encoded)  # no on_bad: a bad row raises, no entry is None


def _encode_chats(
    chats,
    tokenizer,
    *,
    chat_template: str | None = None,
    loss_on: LossOn = "assistant",
    skip_assistant_turns=None,
    batch_size: int = 256,
    progress=None,
    where: Callable[[int], str] = lambda i: f"conversation {i}",
    on_bad: Callable[[int, BadRow], None] | None = None,
) -> list[tuple[np.ndarray, np.ndarray] | None]:
    """:func:`encode_chats` without the literal-special-token check, for text packwise built itself
    (``encode_media_chat`` expands media into special tokens, and checks the user's text before). With ``on_bad``,
    a conversation refused as a bad row (:func:`check_rendered`, weights) is passed to it and gets None."""
    template = chat_template if chat_template is not None else getattr(tokenizer, "chat_template", None)
    if not template:
        raise ValueError(
            f"tokenizer {getattr(tokenizer, 'name_or_path', '')!r} has no chat template; pass chat_template "
            "(e.g. 'chatml' on the CLI) or use prompt/completion or pre-tokenized input"
        )
    kwargs = _template_kwargs(tokenizer)
    marked = bool(_GENERATION.search(template))
    backend = tokenizer.backend_tokenizer
    out: list[tuple[np.ndarray, np.ndarray] | None] = []
    with_reply, first_with_reply = 0, None  # conversations with an assistant turn that carries loss
    for lo in range(0, len(chats), batch_size):
        batch = [list(c) for c in chats[lo : lo + batch_size]]
        if marked:
            texts, spans = _render(batch, template, kwargs, spans=True)
        else:
            texts = _render(batch, template, kwargs, spans=False)
            spans = (
                [_prefix_spans(c, t, template, kwargs, where(lo + j)) for j, (c, t) in enumerate(zip(batch, texts))]
                if loss_on == "assistant"
                else [[] for _ in batch]
            )
        for j, enc in enumerate(backend.encode_batch(texts, add_special_tokens=False)):
            try:
                check_rendered(batch[j], texts[j], where(lo + j))
                off = (
                    _untrained(batch[j], spans[j], skip_assistant_turns, lo + j, where)
                    if loss_on == "assistant"
                    else []
                )
            except BadRow as e:
                if on_bad is None:
                    raise
                on_bad(lo + j, e)
                out.append(None)
                continue
            ids = np.asarray(enc.ids, dtype=np.int32)
            mask = np.zeros(ids.shape[0], dtype=bool)
            if loss_on == "all":
                mask[:] = True
            else:
                skip = skip_assistant_turns[lo + j] if skip_assistant_turns is not None else 0
                for k, (start, end) in enumerate(spans[j]):
                    span = _token_span(enc, start, end) if end > start and not off[k] else None
                    if span is not None:
                        mask[span[0] : span[1]] = True
                replies = sum(m.get("role") == "assistant" for m in batch[j]) - sum(untrained(batch[j]))
                if with_reply >= 0 and replies > skip:  # till one marks
                    with_reply += 1
                    first_with_reply = lo + j if first_with_reply is None else first_with_reply
                    if mask.any():
                        with_reply = -len(chats) - 1  # found one: the template marks assistant tokens
            out.append((ids, mask))
        if progress is not None:
            progress(len(batch))
    if with_reply > 0:
        first = cast(int, first_with_reply)  # set with the first such conversation
        raise ValueError(
            f"the chat template marks no assistant tokens in any of the {with_reply} conversations with assistant "
            f"turns (first: {where(first)}): it does not render the assistant replies, so nothing would "
            "be trained on; check --chat-template (is it the template, not a file name?), or pass loss_on='all'"
        )
    return out


def encode_prompt_completion(
    prompts: Sequence[str],
    completions: Sequence[str],
    tokenizer,
    *,
    loss_on: LossOn = "assistant",
    batch_size: int = 1024,
    progress: Callable[[int], None] | None = None,
    where: Callable[[int], str] = lambda i: f"prompt/completion pair {i}",
) -> list[tuple[np.ndarray, np.ndarray]]:
    """Tokenize plain-text prompt/completion pairs as TRL does: ``prompt + completion + EOS``.

    The prompt is encoded with the tokenizer's special tokens (BOS if it has one), the completion without;
    EOS is appended (a literal special token in the text is refused: see ``_literal``). With
    ``loss_on="assistant"`` the loss is on the completion and its EOS only.

    Returns:
        Per pair ``(input_ids (L,) int32, loss_mask (L,) bool)``.

    Raises:
        BadRow: (a ValueError) a prompt or completion holds a literal special token (``<|endoftext|>``, ...),
            naming ``where(i)`` and the field.

    Example:
        >>> from packwise.text import load_tokenizer
        >>> tok = load_tokenizer("qwen2.5")
        >>> [(ids, mask)] = encode_prompt_completion(["2+2="], ["4"], tok)
        >>> tok.decode(ids), tok.decode(ids[mask])
        ('2+2=4<|im_end|>', '4<|im_end|>')
    """
    check_pairs(prompts, completions, special_token_pattern(tokenizer), where)
    backend = tokenizer.backend_tokenizer
    eos = tokenizer.eos_token_id
    out = []
    for lo in range(0, len(prompts), batch_size):
        p_enc = backend.encode_batch(list(prompts[lo : lo + batch_size]), add_special_tokens=True)
        c_enc = backend.encode_batch(list(completions[lo : lo + batch_size]), add_special_tokens=False)
        for p, c in zip(p_enc, c_enc):
            c_ids = list(c.ids)
            if eos is not None and (not c_ids or c_ids[-1] != eos):
                c_ids.append(eos)
            ids = np.asarray(list(p.ids) + c_ids, dtype=np.int32)
            mask = np.zeros(ids.shape[0], dtype=bool)
            mask[0 if loss_on == "all" else len(p.ids) :] = True
            out.append((ids, mask))
        if progress is not None:
            progress(len(p_enc))
    return out
