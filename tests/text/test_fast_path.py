"""The pipeline's transformers-free path (``LiteTokenizer``, packwise's own Jinja environment, the built-in
ChatML rendered in Python) gives exactly what the transformers path gives: text, spans, tokens, loss masks,
fingerprints, errors and packed files."""

from __future__ import annotations

import subprocess
import sys

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from packwise import pack_dataset
from packwise.files import BadRow
from packwise.text import encode_chats, load_tokenizer, pipeline_tokenizer, tokenizer_fingerprint
from packwise.text._chatml import render_plain
from packwise.text._literal import special_token_pattern
from packwise.text._load import chatml_template
from packwise.text._sandbox import _render

ctu = pytest.importorskip("transformers.utils.chat_template_utils")

CHATML = chatml_template()
#: A template that is not the built-in one (so it renders through Jinja) but renders the same.
CHATML_JINJA = CHATML + "{#- not the built-in template: rendered by Jinja -#}"
#: No {% generation %}; namespace, loop controls, tojson with options, reasoning and a kwarg.
PLAIN = (
    "{%- set ns = namespace(n=0) -%}{%- for m in messages -%}{%- if m.role == 'skip' -%}{%- continue -%}{%- endif -%}"
    "{%- set ns.n = ns.n + 1 -%}[{{ ns.n }}:{{ m.role }}]{{ m.content }}"
    "{%- if m.reasoning_content %}<think>{{ m.reasoning_content }}|{{ m.thinking }}</think>{% endif -%}"
    "{{ eos_token }}\n{%- endfor -%}{{ dict(a=1) | tojson(indent=1, sort_keys=True) }}"
    "{%- if add_generation_prompt %}[assistant]{% endif -%}"
)
#: {% generation %} around part of the reply only, and nested in a loop with a macro.
PARTIAL = (
    "{%- macro turn(m) -%}<{{ m.role }}>{%- if m.role == 'assistant' -%}{% generation %}{{ m.content }}"
    "</s>{% endgeneration %}{%- else -%}{{ m.content }}</s>{%- endif -%}{%- endmacro -%}"
    "{%- for m in messages -%}{{ turn(m) }}{% generation %}{% endgeneration %}\n{%- endfor -%}"
)
KWARGS = {"eos_token": "<|im_end|>", "pad_token": "<|endoftext|>"}

CHATS = [
    [{"role": "user", "content": "Hi"}, {"role": "assistant", "content": "Yo"}],
    [  # multi-turn, with a system turn
        {"role": "system", "content": "Be brief."},
        {"role": "user", "content": "2+2?"},
        {"role": "assistant", "content": "4"},
        {"role": "user", "content": "and 3+3?"},
        {"role": "assistant", "content": "6\n"},
    ],
    [{"role": "user", "content": "empty reply"}, {"role": "assistant", "content": ""}],
    [{"role": "user", "content": "e\u0301 ä 中文 🙂 \u200b"}, {"role": "assistant", "content": "  café 😀\t\n"}],
    [{"role": "user", "content": "<|im_start|> is typed"}, {"role": "assistant", "content": "x"}],
    [
        {"role": "user", "content": "why?"},
        {"role": "assistant", "content": "because", "reasoning": "think", "thinking": None},
        {"role": "skip", "content": "-"},
    ],
    [  # tool calls: the built-in template renders them (Jinja, not the Python fast path)
        {"role": "user", "content": "weather?"},
        {
            "role": "assistant",
            "content": "",
            "tool_calls": [{"type": "function", "function": {"name": "w", "arguments": {"city": "Zürich"}}}],
        },
        {"role": "tool", "content": "sunny"},
        {"role": "assistant", "content": "Sunny."},
    ],
]


def _reference(chats, template, *, spans, add_generation_prompt=False, kwargs=KWARGS):
    """transformers' own renderer (what packwise used before rendering itself)."""
    compiled = ctu._compile_jinja_template(template)
    texts, found = [], []
    for chat in chats:
        args = dict(messages=ctu._alias_reasoning_fields(ctu._plain_template_data(chat)), tools=None, documents=None)
        args["add_generation_prompt"] = add_generation_prompt
        text, s = ctu._render_with_assistant_indices(
            compiled_template=compiled, **args, **ctu._plain_template_data(kwargs)
        )
        texts.append(text)
        found.append(s)
    return (texts, found) if spans else texts


@pytest.mark.parametrize("template", [CHATML, CHATML_JINJA, PLAIN, PARTIAL])
@pytest.mark.parametrize("add_generation_prompt", [False, True])
def test_render_matches_transformers(template, add_generation_prompt):
    chats = [c for c in CHATS if template != PLAIN or not any("tool_calls" in m for m in c)]
    want_texts, want_spans = _reference(chats, template, spans=True, add_generation_prompt=add_generation_prompt)
    texts, spans = _render(chats, template, KWARGS, spans=True, add_generation_prompt=add_generation_prompt)
    assert texts == want_texts
    assert [list(map(tuple, s)) for s in spans] == [list(map(tuple, s)) for s in want_spans]
    plain = _render(chats, template, KWARGS, spans=False, add_generation_prompt=add_generation_prompt)
    assert plain == want_texts


def test_render_plain_data_matches_transformers():
    chat = [{"role": "user", "content": np.str_("np"), "n": np.int64(3), "ok": np.bool_(False), "a": np.zeros(2)}]
    template = "{{ messages[0].content }}|{{ messages[0].n + 1 }}|{{ messages[0].ok }}|{{ messages[0].a }}"
    assert _render([chat], template, {}, spans=False) == _reference([chat], template, spans=False, kwargs={})


def test_namespace_refuses_underscore_names_like_transformers():
    template = "{% set ns = namespace(_x=1) %}{{ ns }}"
    with pytest.raises(ValueError, match="underscore-prefixed"):
        _render([[{"role": "user", "content": "x"}]], template, {}, spans=False)
    with pytest.raises(Exception, match="underscore-prefixed"):
        _reference([[{"role": "user", "content": "x"}]], template, spans=False, kwargs={})


texts = st.text(st.characters(codec="utf-8", exclude_categories=("Cs",)), max_size=20)
message = st.fixed_dictionaries(
    {"role": st.sampled_from(["user", "assistant", "system", "tool", "x y"]), "content": texts}
)


@settings(max_examples=200, deadline=None)
@given(st.lists(message, max_size=6), st.booleans())
def test_builtin_chatml_in_python_is_the_jinja_render(chat, add_generation_prompt):
    text, spans = render_plain(chat, add_generation_prompt=add_generation_prompt)
    [want], [want_spans] = _render([chat], CHATML_JINJA, {}, spans=True, add_generation_prompt=add_generation_prompt)
    assert (text, spans) == (want, [tuple(s) for s in want_spans])


@pytest.mark.parametrize("chat", [[{"role": "user", "content": None}], [{"role": 1, "content": "x"}], ["text"]])
def test_builtin_chatml_leaves_other_chats_to_jinja(chat):
    assert render_plain(chat) is None


def test_lite_tokenizer_answers_as_transformers():
    lite, full = pipeline_tokenizer("qwen2.5"), load_tokenizer("qwen2.5")
    assert type(lite).__name__ == "LiteTokenizer" and lite is pipeline_tokenizer("qwen2.5")
    for name in ("name_or_path", "chat_template", "special_tokens_map", "all_special_tokens", "eos_token",
                 "eos_token_id", "pad_token", "pad_token_id", "is_fast"):  # fmt: skip
        assert getattr(lite, name) == getattr(full, name), name
    assert len(lite) == len(full)
    assert lite.get_added_vocab() == full.get_added_vocab()
    assert lite.convert_tokens_to_ids(["<|image_pad|>", "nope"]) == full.convert_tokens_to_ids(
        ["<|image_pad|>", "nope"]
    )
    assert lite.convert_ids_to_tokens([0, 151655]) == full.convert_ids_to_tokens([0, 151655])
    assert special_token_pattern(lite).pattern == special_token_pattern(full).pattern
    assert lite.backend_tokenizer.to_str() == full.backend_tokenizer.to_str()
    assert lite.decode([9707, 11]) == "Hello,"  # anything else: delegated to the transformers tokenizer
    for template in (None, "{{ messages }}", ""):
        assert tokenizer_fingerprint(lite, template) == tokenizer_fingerprint(full, template)
        assert tokenizer_fingerprint(lite, template) == tokenizer_fingerprint(lite, template)  # remembered


def _old_encode(chats, tok):
    """The path before: transformers' renderer with spans, its tokenizer, char_to_token per span."""
    texts, spans = _reference(chats, tok.chat_template, spans=True, kwargs=dict(tok.special_tokens_map))
    out = []
    for enc, found in zip(tok.backend_tokenizer.encode_batch(texts, add_special_tokens=False), spans):
        ids = np.asarray(enc.ids, dtype=np.int32)
        mask = np.zeros(len(ids), bool)
        for a, b in found:
            chars = [t for c in range(a, b) if (t := enc.char_to_token(c)) is not None]
            if chars:
                mask[chars[0] : chars[-1] + 1] = True
        out.append((ids, mask))
    return out


def test_default_data_tokens_and_masks_match_the_transformers_path():
    from packwise.pipeline._demo import chitchat_conversations

    chats = [list(c) for c in chitchat_conversations()]
    assert len(chats) == 4018
    new = encode_chats(chats, pipeline_tokenizer("qwen2.5"))
    old = _old_encode(chats, load_tokenizer("qwen2.5"))
    for (a, m), (b, n) in zip(new, old, strict=True):
        np.testing.assert_array_equal(a, b)
        np.testing.assert_array_equal(m, n)


def test_edge_cases_match_the_transformers_path():
    chats = [c for c in CHATS if "<|im_start|>" not in str(c) and "reasoning" not in str(c)]
    with pytest.raises(BadRow, match=r"messages\[1\]\.reasoning' \(role assistant\) is not in the text"):
        encode_chats([CHATS[5]], pipeline_tokenizer("qwen2.5"))  # ChatML renders no reasoning: refused (issue 28)
    for (a, m), (b, n) in zip(
        encode_chats(chats, pipeline_tokenizer("qwen2.5")), _old_encode(chats, load_tokenizer("qwen2.5"))
    ):
        np.testing.assert_array_equal(a, b)
        np.testing.assert_array_equal(m, n)
    for tok in (pipeline_tokenizer("qwen2.5"), load_tokenizer("qwen2.5")):
        with pytest.raises(BadRow, match=r"conversation 0.*messages\[0\]\.content.*<\|im_start\|>"):
            encode_chats([CHATS[4]], tok)


def test_pack_dataset_is_the_same_with_either_tokenizer():
    rows = [{"messages": c} for c in CHATS if "<|im_start|>" not in str(c) and "skip" not in str(c)]
    a, ra = pack_dataset(rows, capacity=64, tokenizer="qwen2.5", overflow="split")
    b, rb = pack_dataset(rows, capacity=64, tokenizer=load_tokenizer("qwen2.5"), overflow="split")
    assert a.equals(b)
    assert ra.tokenizer_fingerprint == rb.tokenizer_fingerprint
    assert ra.tokens_read == rb.tokens_read and ra.loss_tokens_read == rb.loss_tokens_read


def test_pack_cli_never_imports_transformers(tmp_path):
    data = tmp_path / "d.jsonl"
    data.write_text('{"messages": [{"role": "user", "content": "Hi"}, {"role": "assistant", "content": "Yo"}]}\n')
    code = (
        "import sys; from packwise.cli import main; "
        f"rc = main(['pack', {str(data)!r}, '-o', {str(tmp_path / 'out')!r}, '--no-report', '-q']); "
        "assert rc == 0, rc; bad = [m for m in ('transformers', 'torch') if m in sys.modules]; "
        "assert not bad, bad"
    )
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=False)
    assert proc.returncode == 0, proc.stderr[-2000:]


class _Chat(list):
    """A list that is not exactly ``list``: ``check_row`` checks it field by field."""


pieces = st.sampled_from(
    ["a", " ", "é", "🙂", "<|im_end|>", "<|im_start|>", "<|endoftext|>", "<|image_pad|>", "\ud800", "<|im"]
)
content = st.lists(pieces, max_size=5).map("".join)
chat_message = st.fixed_dictionaries({"role": st.sampled_from(["user", "assistant"]), "content": content})


def _outcome(fn):
    try:
        fn()
    except BadRow as e:
        return str(e)
    return None


@settings(max_examples=300, deadline=None)
@given(st.lists(chat_message, min_size=1, max_size=4))
def test_check_row_fast_path_is_the_field_by_field_check(chat):
    from packwise.text import check_row

    pattern = special_token_pattern(pipeline_tokenizer("qwen2.5"))
    fast = _outcome(lambda: check_row(chat, pattern, "row 0"))
    assert fast == _outcome(lambda: check_row(_Chat(chat), pattern, "row 0"))
