"""The fields of a chat message, under one rule: every field reaches the packs (the chat template renders it) or
the row is refused naming it.

- ``role`` and ``content`` are always read; ``tool_calls`` are checked by the pipeline (a template that never
  reads them is refused there);
- reasoning (``reasoning_content``, ``thinking`` or ``reasoning``, offered to the template under the first two
  names, as transformers does) is refused when the render is the same without it, and — like every message's
  content — when the rendered text does not hold it (a template that renders reasoning only for the last turn,
  or skips system turns): :func:`check_rendered`;
- ``weight`` (TRL/OpenAI fine-tuning data: 0 = the turn carries no loss, 1 = it does) is honoured on the
  assistant turns that would carry loss (0 takes it away) and refused where it asks for something else
  (``1`` on a turn without loss, a value other than 0/1, ``0`` with ``loss_on="all"``);
- any other field (``name``, ``tool_call_id``, ...) is refused when the render is the same without it.

A null field (a Parquet struct's unused member) is an absent one.
"""

from __future__ import annotations

from ..files import BadRow

#: Where a message's reasoning may be (the first not None is used; ``_jinja.alias_reasoning``).
REASONING_FIELDS = ("reasoning_content", "thinking", "reasoning")
#: Fields every template reads or the pipeline checks itself.
CORE_FIELDS = frozenset(("role", "content", "tool_calls", "function_call"))
DROP_FIX = "remove {name!r} from the messages (drop_fields drops top-level fields only)"


def _renders(render, msgs: list[dict], j: int, name: str) -> bool:
    """Whether the rendered conversation changes when message ``j`` loses field ``name`` (taken from the render
    itself, never from the template's text)."""
    if render is None:
        return True  # no template: refused when encoding
    without = [dict(m) for m in msgs]
    del without[j][name]
    return render(msgs) != render(without)


def check_message_fields(
    msgs: list[dict], render, where: str, key: str, *, loss_on: str, first_trained: int = 0
) -> None:
    """Refuse (:class:`BadRow`) a message field the template would drop or a ``weight`` that cannot be honoured.

    ``render(messages) -> str`` renders with the run's chat template; ``key`` names the list in errors
    (``messages``, ``prompt``, ``completion``); ``first_trained``: messages before it carry no loss whatever their
    role (the prompt of prompt/completion data).

    Example:
        >>> msgs = [{"role": "user", "content": "Hi"}, {"role": "assistant", "content": "Yo", "thinking": "hm"}]
        >>> render = lambda chat: "".join(m["content"] for m in chat)
        >>> check_message_fields(msgs, render, "row 0", "messages", loss_on="assistant")
        Traceback (most recent call last):
        ...
        packwise.files._read.BadRow: row 0: field 'messages[1].thinking' is reasoning, which the chat template does \
not render (the render is the same without it), so it would be dropped; use a template that renders reasoning, \
or remove 'thinking' from the messages (drop_fields drops top-level fields only)
    """
    for j, m in enumerate(msgs):
        for name, value in m.items():
            if value is None or name in CORE_FIELDS:
                continue
            field = f"{key}[{j}].{name}"
            if name == "weight":
                _check_weight(value, m["role"] == "assistant" and j >= first_trained, loss_on, where, field)
            elif name in REASONING_FIELDS:
                if not isinstance(value, str):
                    raise BadRow(where, field, f"is a {type(value).__name__}, expected the reasoning text")
                if not _renders(render, msgs, j, name):
                    raise BadRow(
                        where, field, "is reasoning, which the chat template does not render (the render is the "
                        "same without it), so it would be dropped",
                        "use a template that renders reasoning, or " + DROP_FIX.format(name=name),
                    )  # fmt: skip
            elif not _renders(render, msgs, j, name):
                raise BadRow(
                    where, field, "is not rendered by the chat template (the render is the same without it), so "
                    "it would not reach the packs", DROP_FIX.format(name=name),
                )  # fmt: skip


def _check_weight(value, trained: bool, loss_on: str, where: str, field: str) -> None:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or value not in (0, 1):
        raise BadRow(where, field, f"= {value!r}; a turn's weight is 0 (no loss) or 1 (loss), nothing between")
    if loss_on == "all":
        if value == 0:
            raise BadRow(
                where, field, "= 0 but loss_on='all' trains every token (a turn cannot be left out)",
                "use loss_on='assistant' (--loss-on assistant) to honour weights",
            )  # fmt: skip
        return
    if value == 1 and not trained:
        raise BadRow(
            where, field, "= 1 on a turn that carries no loss (only assistant turns of the conversation, not of "
            "a prompt, are trained with loss_on='assistant')", "drop the weight, or use loss_on='all'",
        )  # fmt: skip


def untrained(msgs: list[dict]) -> list[bool]:
    """Per assistant message, in order: whether its ``weight`` is 0 (it carries no loss)."""
    return [m.get("weight") == 0 for m in msgs if m.get("role") == "assistant"]


def check_rendered(chat: list[dict], text: str, where: str) -> None:
    """Refuse a conversation whose rendered ``text`` does not hold each message's content and reasoning, in
    message order (a template that drops a message's text); whitespace around a text is not compared.

    Example:
        >>> check_rendered([{"role": "system", "content": "Be brief"}], "<s>", "row 3")
        Traceback (most recent call last):
        ...
        packwise.files._read.BadRow: row 3: field 'messages[0].content' (role system) is not in the text the \
chat template rendered: the template drops it; use a template that renders every message, or drop the message
    """
    at = 0
    for j, m in enumerate(chat):
        reasoning = next((f for f in REASONING_FIELDS if m.get(f) is not None), None)
        end = at
        for name in ("content", reasoning):
            value = m.get(name) if name else None
            if not isinstance(value, str) or not value.strip():
                continue
            found = text.find(value.strip(), at)
            if found < 0:
                raise BadRow(
                    where, f"messages[{j}].{name}", f"(role {m.get('role')}) is not in the text the chat "
                    "template rendered: the template drops it",
                    "use a template that renders every message, or drop the message",
                )  # fmt: skip
            end = max(end, found + len(value.strip()))
        at = end
