"""pack_dataset on padded rows, tool calls, literal vision tokens and replaced images (issue 15)."""

from __future__ import annotations

import json

import numpy as np
import pyarrow as pa
import pytest

from packwise.hf import PackedDataCollator
from packwise.pipeline import pack_dataset

PADDED = [
    {"input_ids": [0, 0, 5, 6, 7], "attention_mask": [0, 0, 1, 1, 1], "labels": [-100, -100, 5, 6, 7]},  # left
    {"input_ids": [8, 9, 0], "attention_mask": [1, 1, 0], "labels": [8, 9, 0]},  # right, loss on the pad
    {"input_ids": [3, 4], "attention_mask": [1, 1], "labels": [3, 4]},
]


@pytest.mark.parametrize("kind", ["rows", "table"])
def test_padding_is_stripped_and_counted(kind):
    data = PADDED if kind == "rows" else pa.Table.from_pylist(PADDED)
    table, report = pack_dataset(data, capacity=16)
    assert table.column_names == ["input_ids", "labels", "seq_lengths", "source_index"]  # no attention_mask
    assert table.column("input_ids").to_pylist() == [[5, 6, 7, 8, 9, 3, 4]]
    assert table.column("labels").to_pylist() == [[-100, 6, 7, -100, 9, -100, 4]]
    assert (report.pad_tokens_removed, report.tokens_read, report.tokens_packed) == (3, 7, 7)
    # the collator gives the same tokens and labels for the same rows
    batch = PackedDataCollator()(PADDED)
    assert batch["input_ids"].tolist() == table.column("input_ids").to_pylist()
    assert batch["labels"].tolist() == table.column("labels").to_pylist()


@pytest.mark.parametrize("kind", ["rows", "table"])
@pytest.mark.parametrize(
    ("mask", "message"),
    [
        ([1, 0, 1], "field 'attention_mask' has a 0 at position 1 between real tokens (0..2)"),
        ([0, 0, 0], "field 'attention_mask' is all zeros (no real token)"),
        ([1, 2, 1], "field 'attention_mask' must hold only 0/1"),
    ],
)
def test_bad_padding_is_refused_or_skipped(kind, mask, message):
    rows = [{"input_ids": [1, 2, 3], "attention_mask": [1, 1, 1]}, {"input_ids": [4, 5, 6], "attention_mask": mask}]
    data = rows if kind == "rows" else pa.Table.from_pylist(rows)
    with pytest.raises(ValueError) as info:
        pack_dataset(data, capacity=8)
    assert f"row 1: {message}" in str(info.value)
    table, report = pack_dataset(data, capacity=8, skip_bad_rows=True)
    assert table.column("input_ids").to_pylist() == [[1, 2, 3]] and report.rows_skipped == 1


TOOL_CHAT = [
    {"role": "user", "content": "Weather in Paris?"},
    {"role": "assistant", "content": None, "tool_calls": [
        {"type": "function", "function": {"name": "get_weather", "arguments": {"city": "Paris"}}}]},
    {"role": "tool", "content": "sunny"},
    {"role": "assistant", "content": "Checking both.", "tool_calls": [
        {"type": "function", "function": {"name": "a", "arguments": "{\"x\": 1}"}}, {"name": "b", "arguments": {}}]},
]  # fmt: skip


def test_tool_calls_are_rendered_as_qwen25_and_carry_loss(qwen):
    table, report = pack_dataset([{"messages": TOOL_CHAT}], capacity=512)
    ids = np.asarray(table.column("input_ids").to_pylist()[0])
    labels = np.asarray(table.column("labels").to_pylist()[0])
    assert qwen.decode(ids) == (
        "<|im_start|>user\nWeather in Paris?<|im_end|>\n"
        "<|im_start|>assistant\n<tool_call>\n"
        '{"name": "get_weather", "arguments": {"city": "Paris"}}\n</tool_call><|im_end|>\n'
        "<|im_start|>tool\nsunny<|im_end|>\n"
        "<|im_start|>assistant\nChecking both.\n<tool_call>\n"
        '{"name": "a", "arguments": {"x": 1}}\n</tool_call>\n<tool_call>\n'
        '{"name": "b", "arguments": {}}\n</tool_call><|im_end|>\n'
    )
    assert qwen.decode(ids[labels != -100]) == (
        '<tool_call>\n{"name": "get_weather", "arguments": {"city": "Paris"}}\n</tool_call><|im_end|>'
        'Checking both.\n<tool_call>\n{"name": "a", "arguments": {"x": 1}}\n</tool_call>\n'
        '<tool_call>\n{"name": "b", "arguments": {}}\n</tool_call><|im_end|>'
    )
    assert report.loss_tokens_packed == int((labels != -100).sum())


@pytest.mark.parametrize(
    ("row", "options", "message"),
    [
        ({"messages": [TOOL_CHAT[0], TOOL_CHAT[1]]}, {"chat_template": "{% for m in messages %}{{ m.content }}{% endfor %}",
         "loss_on": "all"}, "field 'messages[1].tool_calls' would be dropped: the chat template never reads tool_calls"),
        ({"messages": [TOOL_CHAT[0], {**TOOL_CHAT[1], "tool_calls": [{"function": {"name": "f", "arguments": "{x"}}]}]},
         {}, "field 'messages[1].tool_calls[0].function.arguments' is a string but not valid JSON"),
        ({"messages": [{**TOOL_CHAT[0], "tool_calls": TOOL_CHAT[1]["tool_calls"]}, TOOL_CHAT[1]]}, {},
         "field 'messages[0].tool_calls' is on a 'user' message; only assistant messages call tools"),
        ({"messages": [TOOL_CHAT[0], {"role": "assistant", "content": "", "function_call": {"name": "f"}}]}, {},
         "field 'messages[1].function_call' is OpenAI's legacy single-call field"),
        ({"messages": TOOL_CHAT, "tools": [{"type": "function", "function": {"name": "get_weather"}}]}, {},
         "field 'tools' holds tool definitions, which packwise does not render"),
        ({"messages": [{"role": "user", "content": "see <|image_pad|> here"}, {"role": "assistant", "content": "ok"}]},
         {}, "field 'messages[0].content' holds the literal vision token <|image_pad|>"),
        ({"messages": [{"role": "user", "content": "hi"}, {"role": "assistant", "content": "<|video_pad|>"}]},
         {}, "field 'messages[1].content' holds the literal vision token <|video_pad|>"),
        ({"prompt": "a <|vision_start|>", "completion": "b"}, {},
         "field 'prompt' holds the literal vision token <|vision_start|>"),
    ],
)  # fmt: skip
def test_chat_rows_refused(row, options, message):
    with pytest.raises(ValueError) as info:
        pack_dataset([row], capacity=512, **options)
    assert message in str(info.value) and "list row 0" in str(info.value)


def test_empty_tool_calls_fields_are_no_calls():
    rows = [{"messages": [{"role": "user", "content": "hi", "tool_calls": None},
                          {"role": "assistant", "content": "yo", "tool_calls": []}]}]  # fmt: skip
    table, _ = pack_dataset(rows, capacity=64)
    assert table.num_rows == 1


@pytest.mark.slow  # transformers' image processor and Qwen2.5-VL rope import: ~5 s
def test_replaced_image_is_detected(tmp_path):
    from PIL import Image

    from packwise.cli import main
    from packwise.data import PackedParquetDataset

    Image.new("RGB", (112, 112), (200, 10, 10)).save(tmp_path / "red.png")
    rows = [{"messages": [{"role": "user", "content": [{"type": "image", "path": "red.png"}]},
                          {"role": "assistant", "content": "red"}]}]  # fmt: skip
    (tmp_path / "in.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    out = tmp_path / "out"
    assert main(["pack", str(tmp_path / "in.jsonl"), "-o", str(out), "--capacity", "128", "--max-pixels",
                 str(112 * 112), "-q", "--no-report"]) == 0  # fmt: skip
    import pyarrow.parquet as pq

    recorded = pq.read_table(next(out.glob("packs-*.parquet"))).column("image_sha256").to_pylist()
    import hashlib

    assert recorded == [[hashlib.sha256((tmp_path / "red.png").read_bytes()).hexdigest()]]
    assert PackedParquetDataset(out)[0].media["pixel_values"].shape[0] == 64
    Image.new("RGB", (112, 112), (10, 200, 10)).save(tmp_path / "red.png")  # same size, other pixels
    with pytest.raises(ValueError, match=r"pack 0: image .*red\.png changed since packing \(SHA-256"):
        PackedParquetDataset(out)[0]
    # a row with an image may still not carry other vision tokens typed in its text
    video = [{"messages": [{"role": "user", "content": [{"type": "image", "path": str(tmp_path / "red.png")},
                                                        {"type": "text", "text": "and <|video_pad|>"}]},
                           {"role": "assistant", "content": "red"}]}]  # fmt: skip
    with pytest.raises(ValueError, match=r"field 'messages\[0\].content' holds the literal vision token <\|video_pad"):
        pack_dataset(video, capacity=128)
