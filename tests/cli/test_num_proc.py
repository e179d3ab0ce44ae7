"""``packwise pack --num-proc``: sizes the tokenizer's thread pool; the output does not depend on it."""

from __future__ import annotations

import os

import pytest

from packwise.cli import main


@pytest.fixture
def chats(write_jsonl):
    rows = [
        {"messages": [{"role": "user", "content": f"question {i} " * (i + 1)}, {"role": "assistant", "content": "ok"}]}
        for i in range(12)
    ]
    return write_jsonl(rows)


def test_output_is_the_same_for_any_thread_count(chats, tmp_path, monkeypatch):
    monkeypatch.delenv("RAYON_NUM_THREADS", raising=False)
    monkeypatch.delenv("TOKENIZERS_PARALLELISM", raising=False)  # another test's fixture may have set it
    outs = []
    for name, extra in (("default", []), ("one", ["--num-proc", "1"])):
        out = tmp_path / name
        assert main(["pack", str(chats), "-o", str(out), "--capacity", "64", "-q", "--no-report", *extra]) == 0
        outs.append({p.name: p.read_bytes() for p in sorted(out.iterdir()) if p.suffix == ".parquet"})
    assert outs[0] and outs[0] == outs[1]


@pytest.mark.parametrize(
    ("value", "env", "match"),
    [
        ("0", None, "--num-proc must be in [1, "),
        ("100000", None, "--num-proc must be in [1, "),  # break test: 9,600 threads, never finished
        ("99999999999999999999", None, "--num-proc must be in [1, "),  # Rayon ignored it: the default pool ran
        ("2", "false", "TOKENIZERS_PARALLELISM"),
    ],
)
def test_bad_num_proc_is_refused_before_any_output(chats, tmp_path, monkeypatch, capsys, value, env, match):
    monkeypatch.delenv("RAYON_NUM_THREADS", raising=False)
    if env is not None:
        monkeypatch.setenv("TOKENIZERS_PARALLELISM", env)
    out = tmp_path / "out"
    assert main(["pack", str(chats), "-o", str(out), "--num-proc", value]) == 1
    err = capsys.readouterr().err
    assert match in err and "RAYON_NUM_THREADS" not in os.environ
    if value != "2":
        assert f"this machine has {os.cpu_count()} cores), got {value}" in " ".join(err.split())
    assert not out.exists()
