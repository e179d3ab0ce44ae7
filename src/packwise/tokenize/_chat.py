"""Render chats with the tokenizer's chat template (through transformers) and derive the loss mask from the
template's turn spans — never from token values, since a sample may contain the EOS or pad id mid-text.

Two ways to find the assistant spans, both from the template itself:

- templates with ``{% generation %}`` blocks (our ChatML, TRL's templates): transformers' renderer returns
  the character span of every block;
- other templates: each assistant turn ``i`` spans from the end of ``messages[:i]`` rendered with the
  generation prompt to the end of ``messages[:i+1]``, trailing whitespace excluded; a template whose
  renders are not prefixes of each other is rejected with the fix (a template with ``{% generation %}``).

Character spans become token spans with the fast tokenizer's ``char_to_token``.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Sequence
from typing import Literal

import numpy as np

LossOn = Literal["assistant", "all"]
_GENERATION = re.compile(r"\{%-?\s*generation\s*-?%\}")


def _template_kwargs(tok) -> dict:
    kwargs = dict(getattr(tok, "special_tokens_map", {}) or {})
    return {k: v for k, v in kwargs.items() if isinstance(v, str)}


def _render(chats, template: str, kwargs: dict, *, spans: bool, add_generation_prompt: bool = False):
    from jinja2 import TemplateError
    from transformers.utils.chat_template_utils import render_jinja_template

    try:
        texts, generation_spans = render_jinja_template(
            conversations=chats,
            chat_template=template,
            return_assistant_tokens_mask=spans,
            add_generation_prompt=add_generation_prompt,
            **kwargs,
        )
    except TemplateError as e:
        raise ValueError(
            f"the chat template failed: {type(e).__name__}: {e}; fix the template (--chat-template)"
        ) from e
    return (texts, generation_spans) if spans else texts


def _prefix_spans(chat: list[dict], text: str, template: str, kwargs: dict, where: str) -> list[tuple[int, int]]:
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
        end = len(upto.rstrip())
        if end > len(before):
            spans.append((len(before), end))
    return spans


def _token_span(enc, start: int, end: int) -> tuple[int, int] | None:
    t0 = next((t for c in range(start, end) if (t := enc.char_to_token(c)) is not None), None)
    if t0 is None:
        return None
    t1 = next(t for c in range(end - 1, start - 1, -1) if (t := enc.char_to_token(c)) is not None)
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
        ValueError: no chat template, or a template whose assistant spans cannot be located.

    Example:
        >>> from packwise.tokenize import load_tokenizer
        >>> tok = load_tokenizer("qwen2.5")
        >>> chat = [{"role": "user", "content": "Hi"}, {"role": "assistant", "content": "Yo"}]
        >>> [(ids, mask)] = encode_chats([chat], tok)
        >>> tok.decode(ids[mask])
        'Yo<|im_end|>'
    """
    template = chat_template if chat_template is not None else getattr(tokenizer, "chat_template", None)
    if not template:
        raise ValueError(
            f"tokenizer {getattr(tokenizer, 'name_or_path', '')!r} has no chat template; pass chat_template "
            "(e.g. 'chatml' on the CLI) or use prompt/completion or pre-tokenized input"
        )
    kwargs = _template_kwargs(tokenizer)
    marked = bool(_GENERATION.search(template))
    backend = tokenizer.backend_tokenizer
    out: list[tuple[np.ndarray, np.ndarray]] = []
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
            ids = np.asarray(enc.ids, dtype=np.int32)
            mask = np.zeros(ids.shape[0], dtype=bool)
            if loss_on == "all":
                mask[:] = True
            else:
                skip = skip_assistant_turns[lo + j] if skip_assistant_turns is not None else 0
                for start, end in list(spans[j])[skip:]:
                    span = _token_span(enc, start, end) if end > start else None
                    if span is not None:
                        mask[span[0] : span[1]] = True
            out.append((ids, mask))
        if progress is not None:
            progress(len(batch))
    return out


def encode_prompt_completion(
    prompts: Sequence[str],
    completions: Sequence[str],
    tokenizer,
    *,
    loss_on: LossOn = "assistant",
    batch_size: int = 1024,
    progress: Callable[[int], None] | None = None,
) -> list[tuple[np.ndarray, np.ndarray]]:
    """Tokenize plain-text prompt/completion pairs as TRL does: ``prompt + completion + EOS``.

    The prompt is encoded with the tokenizer's special tokens (BOS if it has one), the completion without;
    EOS is appended unless the completion already ends with it. With ``loss_on="assistant"`` the loss is on
    the completion and its EOS only.

    Returns:
        Per pair ``(input_ids (L,) int32, loss_mask (L,) bool)``.

    Example:
        >>> from packwise.tokenize import load_tokenizer
        >>> tok = load_tokenizer("qwen2.5")
        >>> [(ids, mask)] = encode_prompt_completion(["2+2="], ["4"], tok)
        >>> tok.decode(ids), tok.decode(ids[mask])
        ('2+2=4<|im_end|>', '4<|im_end|>')
    """
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
