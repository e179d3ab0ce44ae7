"""Issue 28 items 1, 2, 3, 6 (last clause) and 7: every field of a row reaches the packs or is refused by name;
the same checks at pack time as at load time; template spans from the render; clear errors for mixed Parquet
folders, corrupt tokenizers and ``{% include %}``; ``pack --config`` applies or refuses every key."""

from __future__ import annotations

import re

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from packwise.cli import main
from packwise.config import PackingConfig
from packwise.pipeline import pack_dataset
from packwise.text import encode_chats, load_tokenizer

CHAT = {"messages": [{"role": "user", "content": "Hi"}, {"role": "assistant", "content": "Yo"}]}


def run(capsys, *argv) -> tuple[int, str]:
    capsys.readouterr()
    rc = main([*map(str, argv), "--no-report", "-q"])
    return rc, capsys.readouterr().err.strip()


# -- item 6: pack --config ---------------------------------------------------------------------------------


def test_pack_config_refuses_the_keys_pack_does_not_apply(tmp_path, write_jsonl, capsys):
    data = write_jsonl([CHAT])
    cfg = tmp_path / "c.yaml"
    cfg.write_text("capacity: 64\nlabels: shifted\nfixed_width: true\ntopology:\n  pp: 2\n")
    rc, err = run(capsys, "pack", data, "-o", tmp_path / "o", "--config", cfg)
    assert rc == 1
    assert "fixed_width=True, labels='shifted', topology.pp=2 configure(s) the loaders" in " ".join(err.split())
    assert not (tmp_path / "o").exists()
    cfg.write_text("capacity: 64\ntopology:\n  cp: 2\n")  # cp: applied, as the alignment
    assert run(capsys, "pack", data, "-o", tmp_path / "o2", "--config", cfg)[0] == 0


def test_pack_unapplied_names_sections():
    cfg = PackingConfig(layout="padded", emit={"seq_idx": False}, buffer_size=8, loss_reduction="sum")
    assert cfg.pack_unapplied() == ["buffer_size=8", "emit.seq_idx=False", "layout='padded'", "loss_reduction='sum'"]
    assert PackingConfig(capacity=64, alignment=8).pack_unapplied() == []


# -- item 7: clear errors --------------------------------------------------------------------------------------


def test_mixed_schema_parquet_folder_names_the_file(tmp_path):
    (tmp_path / "d").mkdir()
    pq.write_table(pa.table({"input_ids": [[1, 2, 3]]}), tmp_path / "d" / "a.parquet")
    pq.write_table(pa.table({"input_ids": [[4, 5]], "weights": [[0.5, 1.0]]}), tmp_path / "d" / "b.parquet")
    with pytest.raises(ValueError, match=r"b\.parquet has column\(s\) \['weights'\] that a\.parquet lacks"):
        pack_dataset(tmp_path / "d", capacity=8)
    pq.write_table(pa.table({"input_ids": [[4, 5]]}), tmp_path / "d" / "b.parquet")
    table, _ = pack_dataset(tmp_path / "d", capacity=8)  # the same columns: fine
    assert table.column("input_ids").to_pylist() == [[1, 2, 3, 4, 5]]


def test_corrupt_tokenizer_names_the_file(tmp_path):
    (tmp_path / "tok").mkdir()
    (tmp_path / "tok" / "tokenizer.json").write_text("{not json")
    (tmp_path / "tok" / "tokenizer_config.json").write_text("{}")
    with pytest.raises(ValueError, match=r"its file .*tok/tokenizer\.json is corrupt \(JSONDecodeError"):
        load_tokenizer(str(tmp_path / "tok"))


@pytest.mark.parametrize(
    ("template", "tag"),
    [("{% include 'turn.j2' %}", "include"), ("{% extends 'base.j2' %}", "extends"),
     ("{% import 'm.j2' as m %}{{ m.x }}", "import")],
)  # fmt: skip
def test_template_include_is_refused_by_name(template, tag):
    tok = load_tokenizer("qwen2.5")
    with pytest.raises(ValueError, match=rf"the chat template uses \{{% {tag} %\}} \(line 1\)"):
        encode_chats([CHAT["messages"]], tok, chat_template=template)


# -- item 1: every field reaches the packs or is refused by name -----------------------------------------------

U, A = {"role": "user", "content": "Hi"}, {"role": "assistant", "content": "Yo"}
REASONING_TEMPLATE = (  # renders every assistant turn's reasoning, with the generation prompt
    "{% for m in messages %}<|im_start|>{{ m.role }}\n{% if m.reasoning_content %}<think>{{ m.reasoning_content }}"
    "</think>{% endif %}{{ m.content }}<|im_end|>\n{% endfor %}{% if add_generation_prompt %}<|im_start|>assistant\n"
    "{% endif %}"
)


@pytest.mark.parametrize("name", ["reasoning_content", "thinking"])
def test_reasoning_is_refused_where_the_template_does_not_render_it(name):
    rows = [{"messages": [U, {**A, name: "hmm"}]}]
    with pytest.raises(
        ValueError, match=rf"field 'messages\[1\]\.{name}' is reasoning, which the chat template does not render"
    ):
        pack_dataset(rows, capacity=64)  # the built-in ChatML renders no reasoning


def test_reasoning_is_rendered_where_the_template_renders_it():
    tok = load_tokenizer("qwen2.5")
    plain, _ = pack_dataset([{"messages": [U, A]}], capacity=64, chat_template=REASONING_TEMPLATE)
    table, report = pack_dataset(
        [{"messages": [U, {**A, "thinking": "hmm"}]}], capacity=64, chat_template=REASONING_TEMPLATE
    )
    ids, labels = table.column("input_ids")[0].as_py(), table.column("labels")[0].as_py()
    assert (len(plain.column("input_ids")[0].as_py()), len(ids)) == (12, 20)  # <think>hmm</think>: 8 tokens
    assert tok.decode([t for t in labels if t != -100]) == "<think>hmm</think>Yo<|im_end|>"
    assert report.loss_tokens_read == 10


def test_reasoning_the_template_renders_only_for_the_last_turn_is_refused():
    last_only = REASONING_TEMPLATE.replace("{% if m.reasoning_content %}", "{% if m.reasoning_content and loop.last %}")
    rows = [{"messages": [U, {**A, "reasoning_content": "first"}, U, {**A, "reasoning_content": "second"}]}]
    with pytest.raises(ValueError, match=r"field 'messages\[1\]\.reasoning_content' is reasoning, which the chat"):
        pack_dataset(rows, capacity=64, chat_template=last_only, loss_on="all")  # the render without it is the same
    from packwise.text import check_rendered

    with pytest.raises(ValueError, match=r"field 'messages\[1\]\.reasoning_content' \(role assistant\) is not in"):
        check_rendered(rows[0]["messages"], "user Hi assistant Yo user Hi assistant second Yo", "row 0")


def test_weight_zero_takes_the_turn_out_of_the_loss():
    tok = load_tokenizer("qwen2.5")
    two = [U, {"role": "assistant", "content": "one"}, U, {"role": "assistant", "content": "two"}]
    _, full = pack_dataset([{"messages": two}], capacity=64)
    table, report = pack_dataset([{"messages": [two[0], {**two[1], "weight": 0}, two[2], {**two[3], "weight": 1}]}],
                                 capacity=64)  # fmt: skip
    assert (full.loss_tokens_read, report.loss_tokens_read) == (4, 2)
    assert tok.decode([t for t in table.column("labels")[0].as_py() if t != -100]) == "two<|im_end|>"
    with pytest.raises(ValueError, match=r"field 'messages' has only assistant turns with weight 0"):
        pack_dataset([{"messages": [U, {**A, "weight": 0}]}], capacity=64)
    with pytest.raises(ValueError, match=r"'messages\[1\]\.weight' = 0\.5; a turn's weight is 0 \(no loss\) or 1"):
        pack_dataset([{"messages": [U, {**A, "weight": 0.5}]}], capacity=64)
    with pytest.raises(ValueError, match=r"'messages\[0\]\.weight' = 1 on a turn that carries no loss"):
        pack_dataset([{"messages": [{**U, "weight": 1}, A]}], capacity=64)
    with pytest.raises(ValueError, match=r"'messages\[1\]\.weight' = 0 but loss_on='all'"):
        pack_dataset([{"messages": [U, {**A, "weight": 0}, U, A]}], capacity=64, loss_on="all")


def test_a_row_with_two_input_kinds_is_refused():
    with pytest.raises(ValueError, match=r"row 0: field 'prompt' is given together with 'messages'"):
        pack_dataset([{"messages": [U, A], "prompt": "x", "completion": "y"}], capacity=64)
    with pytest.raises(ValueError, match=r"row 1: field 'messages' is given together with 'prompt/completion'"):
        pack_dataset([{"prompt": "x", "completion": "y"}, {"prompt": "x", "completion": "y", "messages": [U]}],
                     capacity=64)  # fmt: skip


def test_unknown_fields_are_refused_and_drop_fields_counts_them(write_jsonl):
    rows = [{"messages": [U, A], "id": 1, "source": "web"}, {"messages": [U, A], "id": 2}]
    with pytest.raises(ValueError, match=r"line 1: field 'id' is not a field packwise reads from messages rows .*"
                       r"drop_fields=\['id'\] \(--drop-field id\)"):  # fmt: skip
        pack_dataset(write_jsonl(rows), capacity=64)
    with pytest.raises(ValueError, match=r"no usable rows \(2 skipped\)"):  # both rows counted as bad
        pack_dataset(write_jsonl(rows), capacity=64, skip_bad_rows=True)
    table, report = pack_dataset(write_jsonl(rows), capacity=64, drop_fields=["source", "id"])
    assert (report.drop_fields, report.field_values_dropped, report.samples) == (["id", "source"], 3, 2)
    with pytest.raises(ValueError, match=r"row 0: field 'messages\[0\]\.name' is not rendered by the chat template"):
        pack_dataset([{"messages": [{**U, "name": "bob"}, A]}], capacity=64)
    with pytest.raises(ValueError, match=r"drop_fields holds 'messages', an input field"):
        pack_dataset(rows, capacity=64, drop_fields=["messages"])


def test_drop_field_on_the_command_line(tmp_path, write_jsonl, capsys):
    import json

    data = write_jsonl([{**CHAT, "id": 7}])
    rc, err = run(capsys, "pack", data, "-o", tmp_path / "bad")
    assert rc == 1 and "field 'id' is not a field packwise reads" in err
    capsys.readouterr()
    assert (
        main([str(a) for a in ("pack", data, "-o", tmp_path / "o", "--drop-field", "id", "--json", "--no-report")]) == 0
    )
    report = json.loads(capsys.readouterr().out)
    assert (report["drop_fields"], report["field_values_dropped"], report["packs_without_loss"]) == (["id"], 1, 0)


@pytest.mark.parametrize(
    ("value", "problem"),
    [([["a"]] * 3, "is a list of lists that are not (non-empty lists of) numbers"), (["a", "b", "c"], "holds str values"),
     ("x", "is a str, not a per-token list")],
)  # fmt: skip
def test_pre_tokenized_fields_that_are_not_flat_per_token_numbers_are_refused(value, problem):
    with pytest.raises(ValueError, match=rf"row 0: field 'topk' {re.escape(problem)}: only per-token numbers"):
        pack_dataset([{"input_ids": [1, 2, 3], "topk": value}], capacity=8)
    table, report = pack_dataset([{"input_ids": [1, 2, 3], "topk": value}], capacity=8, drop_fields=["topk"])
    assert table.column_names == ["input_ids", "labels", "seq_lengths", "source_index"]
    assert report.field_values_dropped == 1


def test_parquet_columns_that_are_not_per_token_are_refused_per_row(tmp_path):
    path = tmp_path / "d.parquet"
    pq.write_table(pa.table({"input_ids": [[1, 2, 3], [4, 5]], "id": ["a", None]}), path)
    with pytest.raises(ValueError, match=r"row 0: field 'id' is a column of string, not flat per-token numbers"):
        pack_dataset(path, capacity=8)
    table, report = pack_dataset(path, capacity=8, skip_bad_rows=True)  # row 1's id is null: not given
    assert (report.rows_skipped, table.column("input_ids").to_pylist()) == (1, [[4, 5]])


# -- item 2: the load-time checks at pack time -----------------------------------------------------------------


def test_megatron_shifted_labels_are_refused_at_pack_time(tmp_path):
    rows = [{"input_ids": [5, 6, 7, 8], "labels": [6, 7, 8, -100]}, {"input_ids": [4, 5], "labels": [4, 5]}]
    with pytest.raises(ValueError, match=r"row 0: field 'labels' look Megatron-shifted \(labels\[t\] == input_ids"):
        pack_dataset(rows, capacity=8)
    pq.write_table(pa.Table.from_pylist(rows), tmp_path / "d.parquet")
    table, report = pack_dataset(tmp_path / "d.parquet", capacity=8, skip_bad_rows=True)
    assert (report.rows_skipped, table.column("input_ids").to_pylist()) == (1, [[4, 5]])
    table, _ = pack_dataset([{"input_ids": [5, 6, 7, 8], "labels": [5, 6, 7, 8]}], capacity=8)  # HF labels: fine
    assert table.column("labels").to_pylist() == [[-100, 6, 7, 8]]


def test_samples_without_a_loss_token_are_refused_on_every_input_kind(tmp_path):
    with pytest.raises(ValueError, match=r"row 0: field 'completion' has no assistant turn"):
        pack_dataset([{"prompt": [U], "completion": [{"role": "user", "content": "more"}]}], capacity=64)
    with pytest.raises(ValueError, match=r"row 0: field 'labels' gives no loss token"):
        pack_dataset([{"input_ids": [1, 2, 3], "labels": [1, -100, -100]}], capacity=8)
    with pytest.raises(ValueError, match=r"row 0: field 'loss_mask' gives no loss token"):
        pack_dataset([{"input_ids": [1, 2, 3], "loss_mask": [1, 0, 0]}], capacity=8)
    pq.write_table(pa.table({"input_ids": [[1, 2, 3], [4, 5]], "loss_mask": [[1, 0, 0], [1, 1]]}), tmp_path / "m.pq")
    _, report = pack_dataset(tmp_path / "m.pq", capacity=8, skip_bad_rows=True, format="parquet")
    assert (report.rows_skipped, report.loss_tokens_read) == (1, 1)


def test_the_report_counts_packs_without_a_loss_token():
    rows = [{"prompt": "word " * 40, "completion": "yes"}, {"prompt": "2+2=", "completion": "4"}]
    _, report = pack_dataset(rows, capacity=16, algorithm="next_fit")  # the long prompt fills its pack alone
    assert (report.packs, report.packs_without_loss, report.loss_tokens_truncated) == (2, 1, 2)


# -- item 3: template spans from the render --------------------------------------------------------------------

PLAIN = "{% for m in messages %}{{ m.role }}: {{ m.content }}\n{% endfor %}"


def test_a_template_ignoring_the_generation_prompt_is_refused_and_spans_are_exact():
    tok = load_tokenizer("qwen2.5")
    chat = [U, {"role": "assistant", "content": "a"}]
    with pytest.raises(ValueError, match="the chat template ignores add_generation_prompt"):
        encode_chats([chat], tok, chat_template=PLAIN)
    ((ids, mask),) = encode_chats(
        [chat], tok, chat_template=PLAIN + "{% if add_generation_prompt %}assistant:{% endif %}"
    )
    assert tok.decode(ids[mask]) == " a"  # the reply: not 'assistant', ':'


def test_a_template_that_skips_system_turns_is_refused():
    skips = PLAIN.replace("{{ m.role }}", "{% if m.role != 'system' %}{{ m.role }}").replace(
        "\n{% endfor", "\n{% endif %}{% endfor"
    )
    skips += "{% if add_generation_prompt %}assistant:{% endif %}"
    rows = [{"messages": [{"role": "system", "content": "Be brief"}, U, A]}, {"messages": [U, A]}]
    with pytest.raises(ValueError, match=r"row 0: field 'messages\[0\]\.content' \(role system\) is not in the text"):
        pack_dataset(rows, capacity=64, chat_template=skips)
    _, report = pack_dataset(rows, capacity=64, chat_template=skips, skip_bad_rows=True)
    assert (report.rows_skipped, report.samples) == (1, 1)


def test_vision_markers_in_an_assistant_turn_are_never_targets(tmp_path):
    import json

    from PIL import Image

    from packwise.multimodal import VisionSpec

    Image.new("RGB", (56, 56), "red").save(tmp_path / "red.png")
    reply = [{"type": "image", "path": "red.png"}, {"type": "text", "text": "red"}]
    row = {"messages": [U, {"role": "assistant", "content": reply}]}
    (tmp_path / "d.jsonl").write_text(json.dumps(row) + "\n")
    table, report = pack_dataset(tmp_path / "d.jsonl", capacity=64, vision=VisionSpec(max_pixels=56 * 56))
    tok = load_tokenizer("qwen2.5")
    targets = [t for t in table.column("labels")[0].as_py() if t != -100]
    assert tok.decode(targets) == "red<|im_end|>"  # not <|vision_start|> / <|vision_end|> (ids 151652, 151653)
    assert report.loss_tokens_read == 2
