"""Issue 28 items 1, 2, 3, 6 (last clause) and 7: every field of a row reaches the packs or is refused by name;
the same checks at pack time as at load time; template spans from the render; clear errors for mixed Parquet
folders, corrupt tokenizers and ``{% include %}``; ``pack --config`` applies or refuses every key."""

from __future__ import annotations

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
