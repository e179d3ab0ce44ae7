"""End to end on 200 real chitchat conversations: exact token accounting and labels recomputed
independently (per-message encoding, no template engine, no offsets)."""

from __future__ import annotations

import numpy as np
import pytest

from packwise.files._read import RawInput
from packwise.pipeline import pack_dataset
from packwise.pipeline._demo import chitchat_conversations

S, E, NL = 151644, 151645, 198


@pytest.fixture(scope="module")
def convs():
    return chitchat_conversations()[:200]


def expected_ids_and_loss(conv, tok):
    """ChatML by hand: special tokens split the text, so each "role\\ncontent" segment encodes alone."""
    ids, loss = [], []
    for m in conv:
        seg = tok.encode(f"{m['role']}\n{m['content']}", add_special_tokens=False)
        head = tok.encode(f"{m['role']}\n", add_special_tokens=False)
        assert seg[: len(head)] == head  # the reply starts on a token boundary
        is_reply = m["role"] == "assistant"
        ids += [S, *seg, E, NL]
        loss += [False] + [False] * len(head) + [is_reply] * (len(seg) - len(head)) + [is_reply, False]
    return ids, loss


@pytest.mark.parametrize("capacity", [4096, 1024])
def test_chitchat_200_exact_accounting(convs, qwen, capacity):
    raw = RawInput(name="chitchat[:200]", kind="messages", rows=[{"messages": c} for c in convs])
    table, report = pack_dataset(raw, capacity=capacity, tokenizer=qwen)
    ids = table.column("input_ids").to_pylist()
    labels = table.column("labels").to_pylist()
    seq_lengths = table.column("seq_lengths").to_pylist()
    sources = table.column("source_index").to_pylist()
    assert all(len(row) <= capacity for row in ids)
    assert all(sum(s) == len(row) for s, row in zip(seq_lengths, ids))
    assert sorted(x for row in sources for x in row) == list(range(200))
    truncated = 0
    for row_ids, row_labels, lens, srcs in zip(ids, labels, seq_lengths, sources):
        pos = 0
        for n, src in zip(lens, srcs):
            exp_ids, exp_loss = expected_ids_and_loss(convs[src], qwen)
            truncated += len(exp_ids) - n
            assert row_ids[pos : pos + n] == exp_ids[:n]
            exp_labels = [t if keep else -100 for t, keep in zip(exp_ids[:n], exp_loss[:n])]
            exp_labels[0] = -100
            assert row_labels[pos : pos + n] == exp_labels
            pos += n
    total = sum(len(expected_ids_and_loss(c, qwen)[0]) for c in convs)
    assert report.tokens_read == total
    assert report.tokens_packed + report.tokens_truncated == total
    assert report.tokens_truncated == truncated
    assert report.metrics.utilisation > 0.9


def test_every_packed_token_is_real(convs, qwen):
    raw = RawInput(name="chitchat[:200]", kind="messages", rows=[{"messages": c} for c in convs])
    table, report = pack_dataset(raw, capacity=2048, tokenizer=qwen, overflow="split")
    flat = np.concatenate([np.asarray(r) for r in table.column("input_ids").to_pylist()])
    assert flat.shape[0] == report.tokens_read  # split loses nothing
    assert report.tokens_truncated == report.tokens_dropped == 0


def test_default_data_cache_equals_a_fresh_conversion(tmp_path, monkeypatch):
    """The cached conversations (compact JSON under PACKWISE_CACHE) are exactly the converted dataset.json;
    a torn cache file is converted again and rewritten."""
    import json

    chitchat_dataset = pytest.importorskip("chitchat_dataset")
    fresh = []
    for record in chitchat_dataset.Dataset().values():  # the conversion, independently
        turns = record["messages"]
        if len(turns) >= 2:
            first = turns[0][0]["sender"]
            fresh.append(
                [{"role": "user" if t[0]["sender"] == first else "assistant",
                  "content": "\n".join(u["text"] for u in t)} for t in turns]
            )  # fmt: skip
    monkeypatch.setenv("PACKWISE_CACHE", str(tmp_path))
    first_call = chitchat_conversations()  # converts and writes the cache
    [cached] = tmp_path.glob("chitchat-*.json")
    assert first_call == fresh and json.loads(cached.read_text()) == fresh
    assert chitchat_conversations() == fresh  # read from the cache
    cached.write_text('[[{"role": "user"')  # torn
    with pytest.warns(UserWarning, match="cached default data .* cannot be used .*; converting it again"):
        assert chitchat_conversations() == fresh
    cached.write_text("{}")  # valid JSON, not conversations
    with pytest.warns(UserWarning, match="cached default data .* cannot be used .*; converting it again"):
        assert chitchat_conversations() == fresh
    assert json.loads(cached.read_text()) == fresh
    assert len(fresh) == 4018
