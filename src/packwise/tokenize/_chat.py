"""Render chats with the tokenizer's chat template (through transformers) and derive the loss mask from the
template's turn spans — never from token values, since a sample may contain the EOS or pad id mid-text.

Two ways to find the assistant spans, both from the template itself:

- templates with ``{% generation %}`` blocks (our ChatML, TRL's templates): transformers' renderer returns
  the character span of every block;
- other templates: each assistant turn ``i`` spans from the end of ``messages[:i]`` rendered with the
  generation prompt to the end of ``messages[:i+1]``, trailing whitespace excluded; a template whose
  renders are not prefixes of each other is rejected with the fix (a template with ``{% generation %}``).

Character spans become token spans with the fast tokenizer's ``char_to_token``.

Templates are untrusted code. transformers renders them in Jinja's ``ImmutableSandboxedEnvironment`` (no
attribute escapes); packwise adds a budget per rendered conversation so a hostile or broken template fails
fast instead of hanging or exhausting memory: at most :data:`MAX_TEMPLATE_STEPS` loop steps, calls and
lookups, :data:`MAX_TEMPLATE_SECONDS` seconds, and ``4 × input + 1 MiB`` characters of output; ``*`` and
``**`` may not build values past that size.
"""

from __future__ import annotations

import contextvars
import re
import time
from collections.abc import Callable, Sequence
from functools import lru_cache
from types import MethodType
from typing import Literal

import numpy as np

from ._literal import check_chats, check_pairs, special_token_pattern

LossOn = Literal["assistant", "all"]
_GENERATION = re.compile(r"\{%-?\s*generation\s*-?%\}")


def _template_kwargs(tok) -> dict:
    kwargs = dict(getattr(tok, "special_tokens_map", {}) or {})
    return {k: v for k, v in kwargs.items() if isinstance(v, str)}


#: Per conversation: loop steps + calls + attribute/item lookups a template may make.
MAX_TEMPLATE_STEPS = 2_000_000
#: Per conversation: seconds a template may take to render.
MAX_TEMPLATE_SECONDS = 10.0
_BUDGET: contextvars.ContextVar = contextvars.ContextVar("packwise_template_budget", default=None)


class _Budget:
    def __init__(self, chats) -> None:
        n = max(len(chats), 1)
        size = sum(len(str(m.get("content", ""))) for c in chats for m in c if isinstance(m, dict))
        self.steps, self.max_steps = 0, MAX_TEMPLATE_STEPS * n
        self.chars, self.max_chars = 0, 4 * size + (1 << 20) * n
        self.deadline = time.monotonic() + MAX_TEMPLATE_SECONDS * n
        self.limit = f"{MAX_TEMPLATE_STEPS:,} steps, {MAX_TEMPLATE_SECONDS:g} s, {self.max_chars:,} output characters"

    def fail(self, what: str):
        from jinja2 import TemplateError

        raise TemplateError(f"{what}, over the template budget ({self.limit} per conversation)")

    def tick(self, n: int = 1) -> None:
        self.steps += n
        if self.steps > self.max_steps:
            self.fail(f"it ran more than {self.max_steps:,} steps")
        if not self.steps & 1023 and time.monotonic() > self.deadline:
            self.fail(f"it ran longer than {MAX_TEMPLATE_SECONDS * 1:g} s per conversation")

    def output(self, n: int) -> None:
        self.chars += n
        if self.chars > self.max_chars:
            self.fail(f"it rendered more than {self.max_chars:,} characters")


def _budget() -> _Budget:
    budget = _BUDGET.get()
    if budget is None:  # Jinja folding constants at compile time: refused, so it is evaluated under a budget
        raise RuntimeError("not folded: evaluated when rendering")
    return budget


def _bounded_range(*args):
    from jinja2.sandbox import safe_range

    budget = _budget()
    for i in safe_range(*args):
        budget.tick()
        yield i


_WIDTH = re.compile(r"%[-+ #0]*(\d{7,})|\{[^{}]*:[^{}]*?(\d{7,})")


_WIDTH_METHODS = frozenset({"ljust", "rjust", "center", "zfill", "expandtabs", "format", "format_map"})
_WIDTH_FILTERS = frozenset({"center", "indent", "wordwrap", "truncate", "format", "batch", "slice", "tojson", "pprint"})


def _check_size(budget: _Budget, values, *, ints: bool = True) -> None:
    for v in values:
        if ints and isinstance(v, int) and not isinstance(v, bool) and abs(v) > budget.max_chars:
            budget.fail(f"an argument of {v:,} would build a value that large")
        if isinstance(v, str) and _WIDTH.search(v):
            budget.fail("a format width of a million or more characters")


def _bounded_binop(env, context, operator, left, right):
    budget = _budget()
    budget.tick()
    if operator == "*":
        n, seq = (right, left) if isinstance(right, int) else (left, right)
        if isinstance(n, int) and isinstance(seq, (str, list, tuple)) and len(seq) * n > budget.max_chars:
            budget.fail(f"'*' would build {len(seq) * n:,} items")
    elif operator == "**" and isinstance(left, int) and isinstance(right, int):
        if right > 64 and abs(left) > 1 and right * abs(left).bit_length() > 4096:
            budget.fail(f"'**' would build a {right * abs(left).bit_length():,}-bit number")
    elif operator == "+" and isinstance(left, (str, list, tuple)) and isinstance(right, (str, list, tuple)):
        if len(left) + len(right) > budget.max_chars:
            budget.fail(f"'+' would build {len(left) + len(right):,} items")
    elif operator == "%":
        _check_size(budget, [left], ints=False)
    return type(env).call_binop(env, context, operator, left, right)


def _counted_call(env, context, obj, *args, **kwargs):
    budget = _budget()
    budget.tick()
    owner = getattr(obj, "__self__", None)
    if owner is None:  # the sandbox hands out str.format wrapped (functools.update_wrapper)
        owner = getattr(getattr(obj, "__wrapped__", None), "__self__", None)
    if isinstance(owner, str) and getattr(obj, "__name__", "") in _WIDTH_METHODS:
        _check_size(budget, [owner, *args, *kwargs.values()])
    return type(env).call(env, context, obj, *args, **kwargs)


def _counted(method: str):
    def wrapper(env, *args, **kwargs):
        if (budget := _BUDGET.get()) is not None:
            budget.tick()
        return getattr(type(env), method)(env, *args, **kwargs)

    return wrapper


def _bounded_filter(name: str, func):
    import functools

    @functools.wraps(func)  # keeps jinja's pass_context/pass_environment marks
    def wrapper(*args, **kwargs):
        budget = _budget()
        budget.tick()
        _check_size(budget, [*args, *kwargs.values()], ints=name in _WIDTH_FILTERS)
        out = func(*args, **kwargs)
        if isinstance(out, (str, list, tuple)) and len(out) > budget.max_chars:
            budget.fail(f"a filter built {len(out):,} items")
        return out

    return wrapper


def _bounded_join(join):
    def wrapper(seq):
        parts = [str(x) for x in seq]
        budget = _budget()
        budget.tick(len(parts))
        if sum(map(len, parts)) > budget.max_chars:
            budget.fail(f"'~' would build {sum(map(len, parts)):,} characters")
        return join(parts)

    return wrapper


@lru_cache(maxsize=32)
def _compiled(template: str):
    """The template compiled in transformers' chat sandbox (its extensions, filters and globals), with the budget
    checks added and constant folding off (Jinja would otherwise evaluate constant expressions at compile time,
    outside any budget)."""
    from jinja2.exceptions import TemplateError
    from transformers.utils.chat_template_utils import _cached_compile_jinja_template

    env = _cached_compile_jinja_template("").environment  # a fresh environment, as transformers builds it
    env.optimized = False
    env.intercepted_binops = frozenset({"*", "**", "+", "%"})
    env.call_binop = MethodType(_bounded_binop, env)
    env.call = MethodType(_counted_call, env)
    env.getattr = MethodType(_counted("getattr"), env)
    env.getitem = MethodType(_counted("getitem"), env)
    env.globals["range"] = _bounded_range
    env.filters = {name: _bounded_filter(name, f) for name, f in env.filters.items()}
    try:
        compiled = env.from_string(template)
    except TemplateError as e:
        raise ValueError(
            f"the chat template does not compile: {type(e).__name__}: {e}; fix it (--chat-template)"
        ) from e
    namespace = compiled.root_render_func.__globals__  # shared by the template's blocks and macros
    for name in ("str_join", "markup_join"):
        if name in namespace:
            namespace[name] = _bounded_join(namespace[name])
    render = compiled.root_render_func

    def counted_render(context):
        budget = _budget()
        for block in render(context):
            budget.output(len(block))
            budget.tick()
            yield block

    compiled.root_render_func = counted_render
    return compiled


def _render(chats, template: str, kwargs: dict, *, spans: bool, add_generation_prompt: bool = False):
    """Render like transformers' ``render_jinja_template`` (its data preparation and span tracking), in the
    budgeted sandbox."""
    from jinja2 import TemplateError
    from transformers.utils import chat_template_utils as ctu

    compiled = _compiled(template)
    kwargs = ctu._plain_template_data(kwargs)
    texts, generation_spans = [], []
    for chat in chats:
        chat = ctu._alias_reasoning_fields(ctu._plain_template_data(chat))
        token = _BUDGET.set(_Budget([chat]))
        args = {"messages": chat, "tools": None, "documents": None, "add_generation_prompt": add_generation_prompt}
        try:
            if spans:
                text, found = ctu._render_with_assistant_indices(compiled_template=compiled, **args, **kwargs)
                generation_spans.append(found)
            else:
                text = compiled.render(**args, **kwargs)
        except TemplateError as e:
            raise ValueError(
                f"the chat template failed: {type(e).__name__}: {e}; fix the template (--chat-template)"
            ) from e
        except (RecursionError, MemoryError, OverflowError) as e:
            raise ValueError(
                f"the chat template failed: {type(e).__name__} ({e}); fix the template (--chat-template)"
            ) from None
        finally:
            _BUDGET.reset(token)
        texts.append(text)
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
        start = len(before)
        content = message.get("content")
        if isinstance(content, str) and content.strip():  # a template that ignores add_generation_prompt
            at = upto.find(content.strip(), start)  # renders the role header in the reply's diff: skip it
            if at >= start:
                start = at
        if end > start:
            spans.append((start, end))
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
        BadRow: (a ValueError) a message's text holds a literal special token of the tokenizer
            (``<|im_end|>``, ...), naming the conversation and field.
        ValueError: no chat template, a template whose assistant spans cannot be located or that marks no
            assistant token in any conversation with assistant turns (``loss_on="assistant"``), or a template
            over its budget (steps, seconds, output size; see the module docstring) or failing.

    Example:
        >>> from packwise.tokenize import load_tokenizer
        >>> tok = load_tokenizer("qwen2.5")
        >>> chat = [{"role": "user", "content": "Hi"}, {"role": "assistant", "content": "Yo"}]
        >>> [(ids, mask)] = encode_chats([chat], tok)
        >>> tok.decode(ids[mask])
        'Yo<|im_end|>'
    """
    check_chats(chats, special_token_pattern(tokenizer), where)
    return _encode_chats(
        chats, tokenizer, chat_template=chat_template, loss_on=loss_on, skip_assistant_turns=skip_assistant_turns,
        batch_size=batch_size, progress=progress, where=where,
    )  # fmt: skip


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
) -> list[tuple[np.ndarray, np.ndarray]]:
    """:func:`encode_chats` without the literal-special-token check, for text packwise built itself
    (``encode_media_chat`` expands media into special tokens, and checks the user's text before)."""
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
                if sum(m.get("role") == "assistant" for m in batch[j]) > skip:
                    with_reply += 1
                    first_with_reply = lo + j if first_with_reply is None else first_with_reply
                    if mask.any():
                        with_reply = -len(chats) - 1  # found one: the template marks assistant tokens
            out.append((ids, mask))
        if progress is not None:
            progress(len(batch))
    if with_reply > 0:
        raise ValueError(
            f"the chat template marks no assistant tokens in any of the {with_reply} conversations with assistant "
            f"turns (first: {where(first_with_reply)}): it does not render the assistant replies, so nothing would "
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
        >>> from packwise.tokenize import load_tokenizer
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
