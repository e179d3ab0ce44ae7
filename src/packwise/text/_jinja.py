"""packwise's own Jinja environment for chat templates, so rendering never imports transformers.

It behaves as transformers' chat-template renderer (``transformers.utils.chat_template_utils``, 5.x:
``_cached_compile_jinja_template``, ``_plain_template_data``, ``_alias_reasoning_fields``,
``_render_with_assistant_indices``) does for the same template and messages — the behaviour matched, written
here from its description, not copied:

- Jinja's ``ImmutableSandboxedEnvironment`` with ``trim_blocks`` and ``lstrip_blocks``, the ``loopcontrols``
  extension, a ``tojson`` filter that does not escape HTML (``json.dumps``, ``ensure_ascii=False`` by default,
  with ``indent``/``separators``/``sort_keys``), and the globals ``raise_exception(message)`` (a
  ``TemplateError``), ``strftime_now(format)``, ``dict`` (a plain ``dict(...)``/``dict.fromkeys`` maker) and
  ``namespace`` (refusing attribute names that start with ``_``);
- a ``{% generation %}...{% endgeneration %}`` block renders its body unchanged and, while spans are recorded,
  records ``(start, end)``: ``start`` is the number of characters the template has emitted before the block
  (what the renderer has yielded so far), ``end = start + len(body)``;
- the data a template sees is rebuilt from plain JSON types (:func:`plain_data`), and a message's reasoning
  under ``reasoning_content``, ``thinking`` or ``reasoning`` is offered under ``thinking`` and
  ``reasoning_content`` too (:func:`alias_reasoning`).

``tests/text/test_fast_path.py`` renders the same templates and chats through both and requires identical text and
spans.
"""

from __future__ import annotations

import contextvars
import dataclasses
import json
from collections.abc import Mapping
from contextlib import contextmanager
from datetime import datetime
from typing import ClassVar

import jinja2
import jinja2.ext
import jinja2.nodes
import jinja2.utils
import numpy as np
from jinja2.sandbox import ImmutableSandboxedEnvironment

from ._fields import REASONING_FIELDS

#: While a conversation renders with spans: ``(characters emitted so far: a callable, spans found: a list)``.
_TRACK: contextvars.ContextVar = contextvars.ContextVar("packwise_generation_spans", default=None)


class GenerationSpans(jinja2.ext.Extension):
    """``{% generation %}`` … ``{% endgeneration %}``: the body is output as is; with :func:`tracking` active its
    character span in the rendered text is recorded."""

    tags: ClassVar[set[str]] = {"generation"}  # type: ignore[misc]  # jinja2 types Extension.tags per instance; set per class

    def parse(self, parser):
        lineno = next(parser.stream).lineno
        body = parser.parse_statements(("name:endgeneration",), drop_needle=True)
        return jinja2.nodes.CallBlock(self.call_method("_mark"), [], [], body).set_lineno(lineno)

    def _mark(self, caller) -> str:
        text = caller()
        track = _TRACK.get()
        if track is not None:
            emitted, spans = track
            start = emitted()
            spans.append((start, start + len(text)))
        return text


@contextmanager
def tracking(emitted, spans: list):
    """Record ``{% generation %}`` spans into ``spans`` while rendering; ``emitted()`` gives the number of
    characters the template has emitted so far."""
    token = _TRACK.set((emitted, spans))
    try:
        yield spans
    finally:
        _TRACK.reset(token)


def _raise_exception(message):
    raise jinja2.exceptions.TemplateError(message)


def _tojson(value, ensure_ascii=False, indent=None, separators=None, sort_keys=False):
    return json.dumps(value, ensure_ascii=ensure_ascii, indent=indent, separators=separators, sort_keys=sort_keys)


def _strftime_now(format):  # noqa: A002  (the name templates pass)
    return datetime.now().strftime(format)


class _DictMaker:
    """The template's ``dict``: builds plain dicts, and exposes nothing else of the ``dict`` type."""

    def __call__(self, *args, **kwargs):
        return dict(*args, **kwargs)

    def fromkeys(self, *args, **kwargs):
        return dict.fromkeys(*args, **kwargs)


def _checked(name) -> None:
    if isinstance(name, str) and name.startswith("_"):
        raise jinja2.exceptions.SecurityError(
            f"a chat template may not set the underscore-prefixed attribute {name!r} on a namespace; rename it"
        )


class _Namespace(jinja2.utils.Namespace):
    """Jinja's ``namespace`` without underscore-prefixed attributes (no way to CPython's internals)."""

    def __init__(*args, **kwargs):  # Jinja's signature trick: ``namespace(self=...)`` works
        self, rest = args[0], args[1:]
        attrs = dict(*rest, **kwargs)
        for name in attrs:
            _checked(name)
        jinja2.utils.Namespace.__init__(self, attrs)

    def __setitem__(self, name, value):
        _checked(name)
        jinja2.utils.Namespace.__setitem__(self, name, value)


def chat_environment() -> ImmutableSandboxedEnvironment:
    """A fresh sandboxed environment for chat templates (see the module docstring)."""
    env = ImmutableSandboxedEnvironment(
        trim_blocks=True, lstrip_blocks=True, extensions=[GenerationSpans, jinja2.ext.loopcontrols]
    )
    env.filters["tojson"] = _tojson
    env.globals.update(raise_exception=_raise_exception, strftime_now=_strftime_now, dict=_DictMaker())
    env.globals["namespace"] = _Namespace
    return env


def plain_data(value):
    """``value`` rebuilt from plain JSON types, as a template sees it: exact ``str``/``int``/``float``/``bool``/
    ``None`` as they are, their subclasses (enums, numpy scalars) as the base type, mappings as dicts, lists and
    tuples item by item, dataclasses and pydantic models as dicts of their fields, anything else as the text
    ``<TypeName>`` (templates only test media keys for presence)."""
    kind = type(value)
    if value is None or kind in (str, int, float, bool):
        return value
    if isinstance(value, str):
        return str.__str__(value)
    if isinstance(value, int):
        return int.__int__(value)
    if isinstance(value, float):
        return float.__float__(value)
    if isinstance(value, Mapping):
        return {plain_data(k): plain_data(v) for k, v in value.items()}
    if isinstance(value, list):
        return [plain_data(v) for v in value]
    if isinstance(value, tuple):
        return tuple(plain_data(v) for v in value)
    if isinstance(value, np.generic):
        return plain_data(value.item())
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return {f.name: plain_data(getattr(value, f.name)) for f in dataclasses.fields(value)}
    if callable(getattr(value, "model_dump", None)):
        return plain_data(value.model_dump())
    return f"<{kind.__name__}>"


def alias_reasoning(chat: list) -> list:
    """Messages whose reasoning is under one of :data:`REASONING_FIELDS` (the first not None) also carry it as
    ``thinking`` (first key) and ``reasoning_content`` (last key); other messages are unchanged."""
    out = []
    for message in chat:
        if isinstance(message, dict):
            found = [message[k] for k in REASONING_FIELDS if message.get(k) is not None]
            if found:
                message = {"thinking": found[0], **message, "reasoning_content": found[0]}
        out.append(message)
    return out
