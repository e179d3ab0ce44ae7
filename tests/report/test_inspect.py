"""``packwise inspect``: one pack rendered with documents, boundaries, loss tokens and padding."""

from __future__ import annotations

import io
import json

import pytest
import typer
from rich.console import Console
from typer.testing import CliRunner

from packwise.cli import main
from packwise.cli._inspect import inspect
from packwise.report import pack_view, render_pack

# two pre-tokenized documents (4 + 3 tokens) -> one pack of 7 at capacity 10, 3 tokens of padding;
# labels -100 mark context; a sample's first label is always -100
ROWS = [
    {"input_ids": [11, 12, 13, 14], "labels": [-100, -100, 13, 14]},
    {"input_ids": [21, 22, 23], "labels": [-100, 22, -100]},
]
CHATS = [
    {"messages": [{"role": "user", "content": "Hi!"}, {"role": "assistant", "content": "Hello, how can I help?"}]},
    {"messages": [{"role": "user", "content": "2+2?"}, {"role": "assistant", "content": "4"}]},
]


def _render(view: dict, width: int = 80) -> str:
    console = Console(file=io.StringIO(), width=width, color_system=None)
    console.print(render_pack({**view, "path": "out"}))
    return "\n".join(line.rstrip() for line in console.file.getvalue().splitlines())


def _app() -> typer.Typer:
    app = typer.Typer()
    app.command()(inspect)
    app.command("noop")(lambda: None)
    return app


@pytest.fixture
def tokens_dir(write_jsonl, tmp_path):
    out = tmp_path / "out"
    assert main(["pack", str(write_jsonl(ROWS)), "-o", str(out), "--capacity", "10", "-q"]) == 0
    return out


@pytest.fixture(scope="module")
def chat_dir(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("chat")
    data = tmp / "chat.jsonl"
    data.write_text("".join(json.dumps(r) + "\n" for r in CHATS))
    assert main(["pack", str(data), "-o", str(tmp / "out"), "--capacity", "64", "-q"]) == 0
    return tmp / "out"


def test_golden_pre_tokenized_pack(tokens_dir):
    assert _render(pack_view(tokens_dir, 0)) == "\n".join(
        [
            "pack 0 of 1 · 7 of 10 tokens (70.0 % full) · 2 documents · 3 loss tokens",
            "out · token ids · highlighted: loss tokens (label != -100)",
            "document 0 · source_index 0 · 4 tokens · 2 loss " + "─" * 32,
            "11 12 13 14",
            "loss on positions 2–3",
            "document 1 · source_index 1 · 3 tokens · 1 loss " + "─" * 32,
            "21 22 23",
            "loss on positions 1",
            "padding · 3 tokens to capacity 10 (added when batched, not stored) " + "─" * 13,
        ]
    )


def test_loss_tokens_are_highlighted(tokens_dir):
    group = render_pack(pack_view(tokens_dir, 0))
    doc0 = group.renderables[3]  # header, path line, rule, tokens
    assert [(doc0.plain[s.start : s.end], str(s.style)) for s in doc0.spans] == [
        ("11", "dim"),
        ("12", "dim"),
        ("13", "bold green"),
        ("14", "bold green"),
    ]


def test_view_json_structure_and_max_tokens(tokens_dir):
    view = pack_view(tokens_dir, 0, max_tokens=2)
    assert {k: view[k] for k in ("pack", "num_packs", "capacity", "tokenizer", "tokens", "loss_tokens", "padding")} == {
        "pack": 0,
        "num_packs": 1,
        "capacity": 10,
        "tokenizer": None,
        "tokens": 7,
        "loss_tokens": 3,
        "padding": 3,
    }
    d0, d1 = view["documents"]
    assert (d0["source_index"], d0["start"], d0["length"], d0["loss_spans"], d0["hidden_tokens"]) == (
        0,
        0,
        4,
        [[2, 4]],
        2,
    )
    assert d0["tokens"] == [
        {"id": 11, "text": None, "label": -100, "loss": False},
        {"id": 12, "text": None, "label": -100, "loss": False},
    ]
    assert (d1["source_index"], d1["start"], d1["length"], d1["loss_spans"]) == (1, 4, 3, [[1, 2]])
    assert view["stored_padding"] == [] and view["columns"] == []
    text = _render(view)
    assert "11 12\n… 2 more tokens (--max-tokens)\nloss on positions 2–3" in text


def test_inspect_command_json_prints_only_json(tokens_dir):
    result = CliRunner().invoke(_app(), ["inspect", str(tokens_dir), "--pack", "0", "--json"])
    assert result.exit_code == 0, result.output
    assert json.loads(result.stdout) == pack_view(tokens_dir, 0)


def test_errors_name_value_limit_and_fix(tokens_dir, tmp_path):
    with pytest.raises(
        ValueError, match=r"--pack 1 is out of range: .*out holds 1 packs \(0 to 0\); pass --pack between 0 and 0"
    ):
        pack_view(tokens_dir, 1)
    with pytest.raises(ValueError, match=r"--pack -1 is out of range"):
        pack_view(tokens_dir, -1)
    with pytest.raises(ValueError, match=r"nowhere is not a directory; pass the output directory of `packwise pack`"):
        pack_view(tmp_path / "nowhere", 0)
    with pytest.raises(ValueError, match=r"--max-tokens must be an integer >= 1 \(tokens per document\), got 0"):
        pack_view(tokens_dir, 0, max_tokens=0)
    with pytest.raises(
        ValueError, match=r"cannot load tokenizer '/no/such/tok' .*; pass --tokenizer NAME\|PATH, or --ids"
    ):
        pack_view(tokens_dir, 0, tokenizer="/no/such/tok")


def test_golden_qwen_chat_pack(chat_dir):
    # ChatML: loss on each assistant reply + its <|im_end|> (the {% generation %} span), not on the newline after
    assert _render(pack_view(chat_dir, 0)) == "\n".join(
        [
            "pack 0 of 1 · 34 of 64 tokens (53.1 % full) · 2 documents · 10 loss tokens",
            "out · decoded with qwen2.5 · highlighted: loss tokens (label != -100)",
            "document 0 · source_index 0 · 19 tokens · 8 loss " + "─" * 31,
            "<|im_start|>user↵",
            "Hi!<|im_end|>↵",
            "<|im_start|>assistant↵",
            "Hello, how can I help?<|im_end|>↵",
            "loss on positions 10–17",
            "document 1 · source_index 1 · 15 tokens · 2 loss " + "─" * 31,
            "<|im_start|>user↵",
            "2+2?<|im_end|>↵",
            "<|im_start|>assistant↵",
            "4<|im_end|>↵",
            "loss on positions 12–13",
            "padding · 30 tokens to capacity 64 (added when batched, not stored) " + "─" * 12,
        ]
    )


def test_qwen_tokens_decoded_one_by_one(chat_dir):
    d1 = pack_view(chat_dir, 0)["documents"][1]
    assert [t["text"] for t in d1["tokens"]] == [
        "<|im_start|>", "user", "\n", "2", "+", "2", "?", "<|im_end|>", "\n",
        "<|im_start|>", "assistant", "\n", "4", "<|im_end|>", "\n",
    ]  # fmt: skip
    assert [t["text"] for t in d1["tokens"] if t["loss"]] == ["4", "<|im_end|>"]
    ids = pack_view(chat_dir, 0, ids=True)
    assert ids["tokenizer"] is None and ids["documents"][1]["tokens"][0] == {
        "id": 151644,  # <|im_start|>
        "text": None,
        "label": -100,
        "loss": False,
    }


def test_packing_that_drops_everything_fails_instead_of_writing_no_packs(write_jsonl, tmp_path, capsys):
    out = tmp_path / "out"
    data = write_jsonl([{"input_ids": list(range(1, 11))}])
    assert main(["pack", str(data), "-o", str(out), "--capacity", "8", "--overflow", "drop", "-q"]) == 1
    assert (
        "no sequence left to pack (1 of 1 samples dropped by overflow='drop' at capacity 8)" in capsys.readouterr().err
    )
    assert not out.exists()
