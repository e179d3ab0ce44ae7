"""The embedded default dataset: chitchat-dataset conversations with at least two turns."""

from __future__ import annotations

import hashlib
import json
import warnings

from ..files import RawInput
from ..text import cache_dir, package_dir, write_cached

CHITCHAT = "chitchat-dataset==0.9.0"


def chitchat_conversations() -> list[list[dict]]:
    """All 4,018 chitchat conversations with >= 2 turns as chat messages.

    The first speaker of a conversation is ``user`` and the other ``assistant``; one speaker's consecutive
    messages (a turn) are joined with newlines. Needs the ``demo`` extra.

    Example:
        >>> convs = chitchat_conversations()
        >>> len(convs), convs[0][0]["role"], convs[0][1]["role"]
        (4018, 'user', 'assistant')
    """
    return _conversations_and_digest()[0]


def _conversations_and_digest() -> tuple[list[list[dict]], str]:
    """The conversations and the first 16 hex digits of dataset.json's SHA-256. The conversion (json of the
    40 MB file with timestamps and sender ids, then turns joined) is cached as compact JSON under
    :func:`packwise.text.cache_dir`, keyed by that digest: the default data reads in about a third of the time."""
    try:
        raw = (package_dir("chitchat_dataset") / "dataset.json").read_bytes()
    except ValueError as e:
        raise ValueError("the default dataset needs chitchat-dataset: pip install 'packwise[demo]'") from e
    digest = hashlib.sha256(raw).hexdigest()[:16]
    cached = cache_dir() / f"chitchat-{digest}.json"
    try:
        convs = json.loads(cached.read_bytes())
        if _is_conversations(convs):
            return convs, digest
        problem = "not a list of conversations"
    except (FileNotFoundError, NotADirectoryError):  # not cached yet (or no cache folder)
        problem = None
    except (OSError, ValueError) as e:  # a torn file (or a folder in its place): convert again
        problem = f"{type(e).__name__}: {e}"
    if problem is not None:
        message = f"packwise's cached default data {cached} cannot be used ({problem}); converting it again"
        warnings.warn(message, stacklevel=3)
    convs = []
    for record in json.loads(raw).values():
        turns = record["messages"]
        if len(turns) < 2:
            continue
        first = turns[0][0]["sender"]
        convs.append(
            [
                {"role": "user" if t[0]["sender"] == first else "assistant", "content": "\n".join(u["text"] for u in t)}
                for t in turns
            ]
        )
    try:
        cached.parent.mkdir(parents=True, exist_ok=True)
        text = json.dumps(convs, ensure_ascii=False, separators=(",", ":"))
        write_cached(cached, lambda tmp: tmp.write_text(text, encoding="utf-8"))
    except OSError:  # a read-only cache: the conversion still stands
        pass
    return convs, digest


def _is_conversations(convs) -> bool:
    """Whether ``convs`` has the cached conversion's shape: lists of ``{"role", "content"}`` string dicts."""
    return isinstance(convs, list) and all(
        isinstance(c, list)
        and all(isinstance(m, dict) and isinstance(m.get("role"), str) and isinstance(m.get("content"), str) for m in c)
        for c in convs
    )


def chitchat_input() -> RawInput:
    """The default input as :class:`RawInput` (fingerprint: SHA-256 of the package's dataset.json)."""
    convs, digest = _conversations_and_digest()
    return RawInput(
        name=f"{CHITCHAT} (conversations with >= 2 turns)",
        kind="messages",
        rows=[{"messages": c} for c in convs],
        fingerprint=digest,
    )
