"""The budgeted template sandbox: chat templates are untrusted code.

transformers renders them in Jinja's ``ImmutableSandboxedEnvironment`` (no attribute escapes); packwise adds a
budget per rendered conversation so a hostile or broken template fails fast instead of hanging or exhausting
memory: at most :data:`MAX_TEMPLATE_STEPS` loop steps, calls and lookups, :data:`MAX_TEMPLATE_SECONDS`
seconds, and ``4 × input + 1 MiB`` characters of output; ``*`` and ``**`` may not build values past that size.
"""

from __future__ import annotations

import contextvars
import re
import time
from functools import lru_cache
from types import MethodType

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
    """The template compiled in packwise's chat sandbox (``_jinja.chat_environment``: transformers' extensions,
    filters and globals), with the budget checks added and constant folding off (Jinja would otherwise evaluate
    constant expressions at compile time, outside any budget)."""
    from jinja2.exceptions import TemplateError

    from ._jinja import chat_environment

    env = chat_environment()
    env.optimized = False
    env.intercepted_binops = frozenset({"*", "**", "+", "%"})
    env.__dict__.update(  # per-instance overrides of the Environment's methods (what attribute assignment does)
        call_binop=MethodType(_bounded_binop, env),
        call=MethodType(_counted_call, env),
        getattr=MethodType(_counted("getattr"), env),
        getitem=MethodType(_counted("getitem"), env),
    )
    env.globals["range"] = _bounded_range
    env.filters = {name: _bounded_filter(name, f) for name, f in env.filters.items()}
    try:
        _no_other_templates(env.parse(template))
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
            budget.output(len(block))  # counted before the block is yielded: the {% generation %} spans' offset
            budget.tick()
            yield block

    compiled.root_render_func = counted_render
    return compiled


def _no_other_templates(tree) -> None:
    """Refuse ``{% include %}``, ``{% import %}``, ``{% from ... import %}`` and ``{% extends %}``: a chat template
    renders alone (transformers gives it no loader either), so the other file would never be found."""
    from jinja2 import nodes

    node = next(tree.find_all((nodes.Include, nodes.Import, nodes.FromImport, nodes.Extends)), None)
    if node is not None:
        tag = {"Include": "include", "Import": "import", "FromImport": "from ... import", "Extends": "extends"}
        raise ValueError(
            f"the chat template uses {{% {tag[type(node).__name__]} %}} (line {node.lineno}): a chat template "
            "renders alone, with no other template files to load; inline the other template's text (--chat-template)"
        )


#: Conversations up to this many messages render the built-in ChatML template in Python (``_chatml``); longer
#: ones (far from :data:`MAX_TEMPLATE_STEPS` still) go through Jinja, which enforces the budget.
_PLAIN_MAX_MESSAGES = 10_000


def _jinja_parts(template: str, kwargs: dict) -> tuple:
    """What rendering through Jinja needs: the compiled template, the plain kwargs and ``_jinja``'s helpers."""
    from jinja2 import TemplateError

    from ._jinja import alias_reasoning, plain_data, tracking

    return _compiled(template), plain_data(kwargs), alias_reasoning, plain_data, tracking, TemplateError


def _render(chats, template: str, kwargs: dict, *, spans: bool, add_generation_prompt: bool = False):
    """Render as transformers' ``render_jinja_template`` does (its data preparation and ``{% generation %}`` span
    tracking, see ``_jinja``), in the budgeted sandbox; never imports transformers."""
    from ._chatml import is_builtin, render_plain

    texts, generation_spans = [], []
    builtin = is_builtin(template)
    jinja = None if builtin else _jinja_parts(template, kwargs)  # the built-in ChatML imports jinja2 only if needed
    for chat in chats:
        if builtin and len(chat) <= _PLAIN_MAX_MESSAGES:  # longer: Jinja, to meet the same step budget
            plain = render_plain(chat, add_generation_prompt=add_generation_prompt)
            if plain is not None and (len(plain[0]) <= 1 << 20 or len(plain[0]) <= _Budget([chat]).max_chars):
                texts.append(plain[0])
                if spans:
                    generation_spans.append(plain[1])
                continue
        if jinja is None:
            jinja = _jinja_parts(template, kwargs)
        compiled, kwargs, alias_reasoning, plain_data, tracking, TemplateError = jinja
        chat = alias_reasoning(plain_data(chat))
        budget = _Budget([chat])
        token = _BUDGET.set(budget)
        args = {"messages": chat, "tools": None, "documents": None, "add_generation_prompt": add_generation_prompt}
        try:
            if spans:
                with tracking(lambda b=budget: b.chars, []) as found:
                    text = "".join(compiled.generate(**args, **kwargs))
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
