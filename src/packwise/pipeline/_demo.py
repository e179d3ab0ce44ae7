"""The embedded default dataset: chitchat-dataset conversations with at least two turns."""

from __future__ import annotations

import hashlib

from ..files import RawInput
from ..text import package_dir

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
    try:
        import chitchat_dataset
    except ImportError as e:
        raise ValueError("the default dataset needs chitchat-dataset: pip install 'packwise[demo]'") from e
    convs = []
    for record in chitchat_dataset.Dataset().values():
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
    return convs


def chitchat_input() -> RawInput:
    """The default input as :class:`RawInput` (fingerprint: SHA-256 of the package's dataset.json)."""
    convs = chitchat_conversations()
    digest = hashlib.sha256((package_dir("chitchat_dataset") / "dataset.json").read_bytes()).hexdigest()[:16]
    return RawInput(
        name=f"{CHITCHAT} (conversations with >= 2 turns)",
        kind="messages",
        rows=[{"messages": c} for c in convs],
        fingerprint=digest,
    )
