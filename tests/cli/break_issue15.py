"""Break test for issue 15 (not collected by pytest): careless and hostile `packwise pack` runs, classified as
clean error / traceback / hang / silent wrong / data loss.

    PYTHONPATH=src python tests/cli/break_issue15.py [-k SUBSTRING]

Every case runs the real CLI in a subprocess (4 GiB address-space limit but for Ray, 120 s timeout) in a fresh
folder.
"""

from __future__ import annotations

import gzip
import json
import os
import resource
import shutil
import subprocess
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

CHAT = {"messages": [{"role": "user", "content": "Hi"}, {"role": "assistant", "content": "Yo"}]}
TOK = [{"input_ids": list(range(1, n + 1))} for n in (5, 3, 7, 2)]
CHATML = Path(__file__).parents[2] / "src" / "packwise" / "templates" / "chatml.jinja"
LIMIT_S = 120


def jsonl(d: Path, rows, name="in.jsonl") -> Path:
    p = d / name
    p.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return p


def packed(d: Path, out="out", *extra) -> list[str]:
    return ["pack", str(jsonl(d, TOK)), "-o", str(d / out), "--capacity", "8", "--no-report", "-q", *extra]


def meta(d: Path, out="out") -> dict:
    return json.loads((d / out / "metadata.json").read_text())


CASES: list[tuple[str, str, object]] = []  # (class, name, setup(d) -> (argv, expect, keep, check))


def case(cls: str):
    def deco(f):
        CASES.append((cls, f.__name__, f))
        return f

    return deco


def pre(d, *argv):
    """Run a CLI command first (setup)."""
    env = {**os.environ}
    subprocess.run([sys.executable, "-c", "from packwise.cli import run; run()", *map(str, argv)], cwd=d, env=env,
                   capture_output=True, timeout=LIMIT_S)  # fmt: skip


# -- files: output ownership -------------------------------------------------------------------------------------
@case("files")
def overwrite_with_user_files(d):
    pre(d, *packed(d))
    (d / "out" / "model.bin").write_bytes(b"w")
    return packed(d, "out", "--overwrite"), "error", ["out/model.bin", "out/metadata.json"], None


@case("files")
def overwrite_user_subdir(d):
    pre(d, *packed(d))
    (d / "out" / "checkpoints").mkdir()
    (d / "out" / "checkpoints" / "x.pt").write_bytes(b"w")
    return packed(d, "out", "--overwrite"), "error", ["out/checkpoints/x.pt"], None


@case("files")
def overwrite_legacy_output_with_notes(d):
    pre(d, *packed(d))
    (d / "out" / ".packwise-manifest.json").unlink()
    (d / "out" / "notes.md").write_text("n")
    return packed(d, "out", "--overwrite"), "error", ["out/notes.md"], None


@case("files")
def overwrite_foreign_metadata_lookalike(d):
    (d / "out").mkdir()
    (d / "out" / "metadata.json").write_text(json.dumps({"format": "packwise-packed-v1", "shards": []}))
    (d / "out" / "data.csv").write_text("a")
    return packed(d, "out", "--overwrite"), "error", ["out/data.csv"], None


@case("files")
def second_run_no_overwrite(d):
    pre(d, *packed(d))
    return packed(d, "out", "--capacity", "16"), "error", ["out/metadata.json"], lambda: meta(d)["capacity"] == 8


@case("files")
def overwrite_ok_replaces(d):
    pre(d, *packed(d))
    return packed(d, "out", "--overwrite", "--capacity", "16"), "ok", [], lambda: meta(d)["capacity"] == 16


@case("files")
def overwrite_fewer_shards_removes_old(d):
    pre(d, *packed(d, "out", "--packs-per-shard", "1"))

    def check():
        return sorted(p.name for p in (d / "out").glob("packs-*")) == ["packs-00000-of-00001.parquet"]

    return packed(d, "out", "--overwrite"), "ok", [], check


@case("files")
def overwrite_hand_edited_manifest_lists_notes(d):
    pre(d, *packed(d))
    (d / "out" / "notes.txt").write_text("mine")
    m = json.loads((d / "out" / ".packwise-manifest.json").read_text())
    files = m["files"]
    if isinstance(files, dict):
        files["notes.txt"] = None
    else:
        files.append("notes.txt")
    (d / "out" / ".packwise-manifest.json").write_text(json.dumps(m))
    return packed(d, "out", "--overwrite"), "error", ["out/notes.txt", "out/metadata.json"], None


@case("files")
def overwrite_modified_shard(d):
    pre(d, *packed(d, "out", "--packs-per-shard", "1"))
    shutil.copyfile(d / "out" / "packs-00000-of-00003.parquet", d / "out" / "packs-00001-of-00003.parquet")
    keep = ["out/packs-00001-of-00003.parquet", "out/packs-00000-of-00003.parquet", "out/metadata.json"]
    return packed(d, "out", "--overwrite"), "error", keep, None


@case("files")
def report_over_users_report_md(d):
    pre(d, *packed(d))
    (d / "out" / "report.md").write_text("my notes")
    return ["report", str(d / "out"), "-q", "--no-plots"], "error", ["out/report.md"], None


@case("files")
def overwrite_manifest_v1_output(d):
    pre(d, *packed(d))
    m = json.loads((d / "out" / ".packwise-manifest.json").read_text())
    m = {"files": sorted(m["files"]), "format": "packwise-manifest-v1"}
    (d / "out" / ".packwise-manifest.json").write_text(json.dumps(m))
    return packed(d, "out", "--overwrite", "--capacity", "16"), "ok", [], lambda: meta(d)["capacity"] == 16


@case("files")
def output_is_cwd(d):
    return [*packed(d, "."), "--overwrite"], "error", ["in.jsonl"], None


@case("files")
def output_is_input_file(d):
    p = jsonl(d, TOK)
    return ["pack", str(p), "-o", str(p), "--no-report", "-q"], "error", ["in.jsonl"], None


@case("files")
def output_contains_input(d):
    (d / "o").mkdir()
    p = jsonl(d / "o", TOK)
    return ["pack", str(p), "-o", str(d / "o"), "--overwrite", "--no-report", "-q"], "error", ["o/in.jsonl"], None


@case("files")
def output_is_a_file(d):
    (d / "out").write_text("x")
    return packed(d), "error", ["out"], None


@case("files")
def output_dangling_symlink(d):
    os.symlink(d / "nowhere", d / "out")
    return packed(d), "error", [], None


@case("files")
def output_under_a_file(d):
    (d / "f").write_text("x")
    return packed(d, "f/out"), "error", ["f"], None


@case("files")
def output_readonly_parent(d):
    (d / "ro").mkdir()
    os.chmod(d / "ro", 0o555)
    if os.geteuid() == 0:
        return packed(d, "ro/out"), "ok", [], None  # root writes anyway
    return packed(d, "ro/out"), "error", [], None


@case("files")
def output_empty_existing_dir(d):
    (d / "out").mkdir()
    return packed(d), "ok", [], lambda: meta(d)["packs"] >= 1


@case("files")
def stale_staging_cleaned(d):
    pre(d, *packed(d))
    (d / "out" / ".packwise-staging-99999-x").mkdir()
    (d / "out" / ".packwise.lock").write_text("pid 99999 on gone")
    return packed(d, "out", "--overwrite"), "ok", [], lambda: not list((d / "out").glob(".packwise-staging-*"))


@case("files")
def killed_first_run_leftovers(d):
    (d / "out").mkdir()
    (d / "out" / ".packwise-staging-99999-x").mkdir()
    (d / "out" / ".packwise-staging-99999-x" / "packs-00000-of-00001.parquet").write_bytes(b"PAR1partial")
    return packed(d), "ok", [], lambda: meta(d)["packs"] >= 1  # a killed write leaves Parquet's magic first


@case("files")
def leftover_staging_with_foreign_content(d):
    (d / "out").mkdir()
    (d / "out" / ".packwise-staging-99999-x").mkdir()
    (d / "out" / ".packwise-staging-99999-x" / "packs-00000-of-00001.parquet").write_bytes(b"not parquet")
    return packed(d), "error", ["out/.packwise-staging-99999-x/packs-00000-of-00001.parquet"], None  # named, kept


@case("files")
def interrupted_commit_rolled_forward(d):
    pre(d, *packed(d))
    st = d / "out" / ".packwise-staging-99999-x"
    st.mkdir()
    shutil.copy(d / "out" / "metadata.json", st / "metadata.json")
    m = meta(d)
    m["capacity"] = 99
    (st / "metadata.json").write_text(json.dumps(m))
    (d / "out" / ".packwise-commit").write_text(
        json.dumps({"files": ["metadata.json", "packs-00000-of-00001.parquet"], "pid": 99999, "remove": [],
                    "staging": st.name})
    )  # fmt: skip
    return ["report", str(d / "out"), "-q", "--no-plots"], "ok", [], lambda: meta(d)["capacity"] == 99


@case("files")
def edited_manifest_escaping(d):
    pre(d, *packed(d))
    (d / "victim.txt").write_text("v")
    (d / "out" / ".packwise-manifest.json").write_text(
        json.dumps({"files": ["../victim.txt", "metadata.json"], "format": "packwise-manifest-v1"})
    )
    return packed(d, "out", "--overwrite"), "error", ["victim.txt"], None


@case("files")
def lock_held_by_live_process(d):
    (d / "out").mkdir()
    holder = subprocess.Popen(
        [sys.executable, "-c", "import fcntl,os,sys,time; f=os.open(sys.argv[1],os.O_RDWR|os.O_CREAT); "
         "os.write(f,b'pid 1 on x'); fcntl.flock(f,fcntl.LOCK_EX); time.sleep(30)", str(d / "out" / ".packwise.lock")]
    )  # fmt: skip
    time.sleep(1.0)
    CLEANUP.append(holder)
    return packed(d), "error", [], None


@case("files")
def report_then_overwrite(d):
    pre(d, *packed(d))
    pre(d, "report", str(d / "out"), "-q")
    return packed(d, "out", "--overwrite"), "ok", [], lambda: not (d / "out" / "report.json").exists()


# -- templates ---------------------------------------------------------------------------------------------------
def chat_run(d, *extra, rows=None):
    return ["pack", str(jsonl(d, rows or [CHAT, CHAT])), "-o", str(d / "out"), "--no-report", "-q", *extra]


@case("templates")
def template_txt_file(d):
    shutil.copy(CHATML, d / "t.txt")
    return chat_run(d, "--chat-template", str(d / "t.txt")), "ok", [], lambda: meta(d)["loss_tokens_packed"] == 4


@case("templates")
def template_no_suffix_file(d):
    shutil.copy(CHATML, d / "template")
    return chat_run(d, "--chat-template", str(d / "template")), "ok", [], lambda: meta(d)["loss_tokens_packed"] == 4


@case("templates")
def template_missing_path(d):
    return chat_run(d, "--chat-template", str(d / "nope.txt")), "error", [], None


@case("templates")
def template_missing_jinja(d):
    return chat_run(d, "--chat-template", "nope.jinja"), "error", [], None


@case("templates")
def template_bare_word(d):
    return chat_run(d, "--chat-template", "llama3"), "error", [], None


@case("templates")
def template_directory(d):
    return chat_run(d, "--chat-template", str(d)), "error", [], None


@case("templates")
def template_no_assistant(d):
    return chat_run(d, "--chat-template", "{{ messages[0].content }}"), "error", [], None


@case("templates")
def template_syntax_error(d):
    return chat_run(d, "--chat-template", "{% for %}"), "error", [], None


@case("templates")
def template_raise_exception(d):
    return chat_run(d, "--chat-template", "{{ raise_exception('no') }}"), "error", [], None


@case("templates")
def template_nested_range(d):
    t = "{% for i in range(100000) %}{% for j in range(100000) %}{% endfor %}{% endfor %}"
    return chat_run(d, "--chat-template", t), "error", [], None


@case("templates")
def template_mul_bomb(d):
    return chat_run(d, "--chat-template", "{{ 'x' * 10**10 }}"), "error", [], None


@case("templates")
def template_concat_doubling(d):
    t = "{% set ns = namespace(s='x') %}{% for i in range(80) %}{% set ns.s = ns.s ~ ns.s %}{% endfor %}{{ ns.s }}"
    return chat_run(d, "--chat-template", t), "error", [], None


@case("templates")
def template_list_doubling(d):
    t = "{% set ns = namespace(a=[1]) %}{% for i in range(80) %}{% set ns.a = ns.a + ns.a %}{% endfor %}"
    return chat_run(d, "--chat-template", t), "error", [], None


@case("templates")
def template_center(d):
    return chat_run(d, "--chat-template", "{{ 'x'|center(10**10) }}"), "error", [], None


@case("templates")
def template_format_width(d):
    return chat_run(d, "--chat-template", "{{ '{:9999999999}'.format(1) }}"), "error", [], None


@case("templates")
def template_percent_width(d):
    return chat_run(d, "--chat-template", "{{ '%9999999999d' % 1 }}"), "error", [], None


@case("templates")
def template_output_flood(d):
    t = "{% for i in range(100000) %}{% for j in range(100) %}xxxxxxxxxx{% endfor %}{% endfor %}"
    return chat_run(d, "--chat-template", t), "error", [], None


@case("templates")
def template_recursion(d):
    return chat_run(d, "--chat-template", "{% macro f() %}{{ f() }}{% endmacro %}{{ f() }}"), "error", [], None


@case("templates")
def template_sandbox_escape(d):
    t = "{{ ''.__class__.__mro__[1].__subclasses__() }}"
    return chat_run(d, "--chat-template", t), "error", [], None


@case("templates")
def template_pow_bomb(d):
    return chat_run(d, "--chat-template", "{{ 9 ** 9 ** 9 ** 9 }}"), "error", [], None


@case("templates")
def template_huge_file(d):
    (d / "big.jinja").write_text("{{ x }}" * 400_000)
    return chat_run(d, "--chat-template", str(d / "big.jinja")), "error", [], None


@case("templates")
def template_binary_file(d):
    (d / "bin.jinja").write_bytes(b"\xff\xfe\x00{{")
    return chat_run(d, "--chat-template", str(d / "bin.jinja")), "error", [], None


# -- input reading ---------------------------------------------------------------------------------------------
@case("input")
def gzip_named_jsonl(d):
    (d / "in.jsonl").write_bytes(gzip.compress(b'{"input_ids": [1]}\n'))
    return ["pack", str(d / "in.jsonl"), "-o", str(d / "out"), "-q", "--no-report"], "error", [], None


@case("input")
def parquet_named_jsonl(d):
    import pyarrow as pa
    import pyarrow.parquet as pq

    pq.write_table(pa.table({"input_ids": [[1, 2]]}), d / "in.jsonl")
    return ["pack", str(d / "in.jsonl"), "-o", str(d / "out"), "-q", "--no-report"], "error", [], None


@case("input")
def folder_with_format_jsonl(d):
    (d / "f").mkdir()
    jsonl(d / "f", TOK)
    return ["pack", str(d / "f"), "--format", "jsonl", "-o", str(d / "out"), "-q"], "error", [], None


@case("input")
def file_with_format_hf(d):
    return ["pack", str(jsonl(d, TOK)), "--format", "hf", "-o", str(d / "out"), "-q"], "error", [], None


def deep(n):
    return '{"input_ids": ' + "[" * n + "]" * n + "}"


@case("input")
def deep_json_local(d):
    (d / "in.jsonl").write_text(json.dumps(TOK[0]) + "\n" + deep(100_000) + "\n")
    return ["pack", str(d / "in.jsonl"), "-o", str(d / "out"), "-q", "--no-report"], "error", [], None


@case("input")
def deep_json_skip(d):
    (d / "in.jsonl").write_text(json.dumps(TOK[0]) + "\n" + deep(100_000) + "\n")
    argv = ["pack", str(d / "in.jsonl"), "-o", str(d / "out"), "-q", "--no-report", "--skip-bad-rows"]
    return argv, "ok", [], lambda: meta(d)["rows_skipped"] == 1


@case("input")
def deep_json_900(d):
    (d / "in.jsonl").write_text(json.dumps(TOK[0]) + "\n" + '{"input_ids": [1], "x": ' + "[" * 900 + "]" * 900 + "}\n")
    argv = ["pack", str(d / "in.jsonl"), "-o", str(d / "out"), "-q", "--no-report"]
    return argv, "ok", [], lambda: meta(d)["rows_read"] == 2


@case("input")
def deep_messages_content(d):
    row = {"messages": [{"role": "user", "content": json.loads("[" * 500 + "]" * 500)}]}
    return chat_run(d, rows=[CHAT, row]), "error", [], None


@case("input")
def ragged_input_ids(d):
    return ["pack", str(jsonl(d, [{"input_ids": [1, [2, 3]]}])), "-o", str(d / "out"), "-q"], "error", [], None


@case("input")
def ragged_labels(d):
    rows = [{"input_ids": [1, 2, 3], "labels": [1, [2], 3]}]
    return ["pack", str(jsonl(d, rows)), "-o", str(d / "out"), "-q"], "error", [], None


@case("input")
def nested_input_ids(d):
    return ["pack", str(jsonl(d, [{"input_ids": [[1, 2], [3]]}])), "-o", str(d / "out"), "-q"], "error", [], None


def hf_saved(d, shards=3):
    import datasets

    datasets.Dataset.from_list(TOK * 3).save_to_disk(d / "hf", num_shards=shards)
    return d / "hf"


@case("input")
def hf_missing_shard(d):
    hf = hf_saved(d)
    (hf / "data-00001-of-00003.arrow").unlink()
    return ["pack", str(hf), "-o", str(d / "out"), "-q", "--no-report"], "error", [], None


@case("input")
def hf_no_state(d):
    hf = hf_saved(d)
    (hf / "state.json").unlink()
    return ["pack", str(hf), "-o", str(d / "out"), "-q", "--no-report"], "error", [], None


@case("input")
def hf_truncated_shard(d):
    hf = hf_saved(d)
    f = hf / "data-00002-of-00003.arrow"
    f.write_bytes(f.read_bytes()[:200])
    return ["pack", str(hf), "-o", str(d / "out"), "-q", "--no-report"], "error", [], None


@case("input")
def hf_state_escape(d):
    hf = hf_saved(d, 1)
    shutil.copy(hf / "data-00000-of-00001.arrow", d / "outside.arrow")
    st = json.loads((hf / "state.json").read_text())
    st["_data_files"] = [{"filename": "../outside.arrow"}]
    (hf / "state.json").write_text(json.dumps(st))
    return ["pack", str(hf), "-o", str(d / "out"), "-q", "--no-report"], "error", [], None


@case("input")
def hf_state_absolute(d):
    hf = hf_saved(d, 1)
    st = json.loads((hf / "state.json").read_text())
    st["_data_files"] = [{"filename": "/etc/passwd"}]
    (hf / "state.json").write_text(json.dumps(st))
    return ["pack", str(hf), "-o", str(d / "out"), "-q", "--no-report"], "error", [], None


@case("input")
def hf_ok(d):
    hf = hf_saved(d)
    return (
        ["pack", str(hf), "-o", str(d / "out"), "-q", "--no-report", "--capacity", "8"],
        "ok",
        [],
        (lambda: meta(d)["rows_read"] == 12),
    )


@case("input")
def hf_dataset_dict_root(d):
    import datasets

    ds = datasets.Dataset.from_list(TOK)
    datasets.DatasetDict({"train": ds}).save_to_disk(d / "dd")
    return ["pack", str(d / "dd"), "-o", str(d / "out"), "-q"], "error", [], None


@case("input")
def parquet_mixed_folder(d):
    import pyarrow as pa
    import pyarrow.parquet as pq

    (d / "pq").mkdir()
    pq.write_table(pa.table({"input_ids": [[1, 2]]}), d / "pq" / "a.parquet")
    pq.write_table(pa.table({"input_ids": ["s"]}), d / "pq" / "b.parquet")
    return ["pack", str(d / "pq"), "-o", str(d / "out"), "-q"], "error", [], None


@case("input")
def parquet_missing_shard(d):
    import pyarrow as pa
    import pyarrow.parquet as pq

    (d / "pq").mkdir()
    for i in (0, 2):
        pq.write_table(pa.table({"input_ids": [[1, 2]]}), d / "pq" / f"train-{i:05d}-of-00003.parquet")
    return ["pack", str(d / "pq"), "-o", str(d / "out"), "-q"], "error", [], None


@case("input")
def parquet_truncated(d):
    import pyarrow as pa
    import pyarrow.parquet as pq

    pq.write_table(pa.table({"input_ids": [[1, 2]] * 100}), d / "a.parquet")
    (d / "a.parquet").write_bytes((d / "a.parquet").read_bytes()[:100])
    return ["pack", str(d / "a.parquet"), "-o", str(d / "out"), "-q"], "error", [], None


@case("input")
def parquet_not_parquet(d):
    (d / "a.parquet").write_text("hello")
    return ["pack", str(d / "a.parquet"), "-o", str(d / "out"), "-q"], "error", [], None


@case("input")
def jsonl_binary_garbage(d):
    (d / "in.jsonl").write_bytes(os.urandom(300).replace(b"\x1f", b"\x00"))
    return ["pack", str(d / "in.jsonl"), "-o", str(d / "out"), "-q"], "error", [], None


@case("input")
def jsonl_bom(d):
    (d / "in.jsonl").write_bytes(b"\xef\xbb\xbf" + json.dumps(TOK[0]).encode() + b"\n")  # read as UTF-8-sig
    argv = ["pack", str(d / "in.jsonl"), "-o", str(d / "out"), "-q", "--no-report"]
    return argv, "ok", [], lambda: meta(d)["tokens_packed"] == 5


@case("input")
def jsonl_huge_int(d):
    (d / "in.jsonl").write_text('{"input_ids": [1, ' + "9" * 5000 + "]}\n")
    return ["pack", str(d / "in.jsonl"), "-o", str(d / "out"), "-q"], "error", [], None


@case("input")
def ray_deep_json(d):
    (d / "in.jsonl").write_text(json.dumps(TOK[0]) + "\n" + deep(100_000) + "\n")
    return (
        ["pack", str(d / "in.jsonl"), "-o", str(d / "out"), "-q", "--engine", "ray", "--num-cpus", "1"],
        "error",
        [],
        None,
    )


@case("input")
def ray_gzip_named_jsonl(d):
    (d / "in.jsonl").write_bytes(gzip.compress(b'{"input_ids": [1]}\n'))
    return (
        ["pack", str(d / "in.jsonl"), "-o", str(d / "out"), "-q", "--engine", "ray", "--num-cpus", "1"],
        "error",
        [],
        None,
    )


# -- config ------------------------------------------------------------------------------------------------------
LAUGHS = "a: &a [lol, lol, lol, lol, lol, lol, lol, lol, lol]\n" + "".join(
    f"{c}: &{c} [{', '.join([f'*{p}'] * 9)}]\n" for p, c in zip("abcdefgh", "bcdefghi")
) + "capacity: *i\n"  # fmt: skip


def cfg_run(d, name, text):
    (d / name).write_text(text)
    return ["pack", str(jsonl(d, TOK)), "-o", str(d / "out"), "--config", str(d / name), "-q", "--no-report"]


@case("config")
def yaml_billion_laughs(d):
    return cfg_run(d, "c.yaml", LAUGHS), "error", [], None


@case("config")
def yaml_alias_small(d):
    return cfg_run(d, "c.yaml", "x: &c 64\ncapacity: *c\n"), "error", [], None


@case("config")
def yaml_python_tag(d):
    return cfg_run(d, "c.yaml", "capacity: !!python/object/apply:os.system ['echo hi']\n"), "error", [], None


@case("config")
def yaml_deep(d):
    return cfg_run(d, "c.yaml", "[" * 100_000 + "]" * 100_000), "error", [], None


@case("config")
def json_deep(d):
    return cfg_run(d, "c.json", '{"a": ' * 100_000 + "1" + "}" * 100_000), "error", [], None


@case("config")
def json_big_list(d):
    return cfg_run(d, "c.json", json.dumps({"capacity": list(range(1_000_000))})), "error", [], None


@case("config")
def toml_bad(d):
    return cfg_run(d, "c.toml", "capacity = [\n"), "error", [], None


@case("config")
def config_huge_file(d):
    return cfg_run(d, "c.yaml", "# " + "x" * (2 << 20) + "\n"), "error", [], None


@case("config")
def config_unknown_key(d):
    return cfg_run(d, "c.yaml", "capacty: 8\n"), "error", [], None


@case("config")
def config_wrong_extension(d):
    return cfg_run(d, "c.ini", "capacity=8\n"), "error", [], None


@case("config")
def config_list_not_mapping(d):
    return cfg_run(d, "c.yaml", "- 1\n- 2\n"), "error", [], None


@case("config")
def config_ok(d):
    return cfg_run(d, "c.yaml", "capacity: 16\n"), "ok", [], lambda: meta(d)["capacity"] == 16


# -- paths -----------------------------------------------------------------------------------------------------
def image_rows(d, path):
    from PIL import Image

    (d / "data").mkdir(exist_ok=True)
    (d / "img").mkdir(exist_ok=True)
    Image.new("RGB", (56, 56)).save(d / "img" / "x.png")
    Image.new("RGB", (56, 56)).save(d / "data" / "in.png")
    row = {"messages": [{"role": "user", "content": [{"type": "image", "path": path}, {"type": "text", "text": "?"}]},
                        {"role": "assistant", "content": "ok"}]}  # fmt: skip
    return jsonl(d / "data", [row])


@case("paths")
def image_parent_escape(d):
    return ["pack", str(image_rows(d, "../img/x.png")), "-o", str(d / "out"), "-q"], "error", [], None


@case("paths")
def image_absolute_outside(d):
    p = image_rows(d, str(d / "img" / "x.png"))
    return ["pack", str(p), "-o", str(d / "out"), "-q"], "error", [], None


@case("paths")
def image_etc_passwd(d):
    return ["pack", str(image_rows(d, "/etc/passwd")), "-o", str(d / "out"), "-q"], "error", [], None


@case("paths")
def image_symlink_out(d):
    p = image_rows(d, "link.png")
    os.symlink(d / "img" / "x.png", d / "data" / "link.png")
    return ["pack", str(p), "-o", str(d / "out"), "-q"], "error", [], None


@case("paths")
def image_widened_root(d):
    p = image_rows(d, "../img/x.png")
    argv = ["pack", str(p), "-o", str(d / "out"), "-q", "--no-report", "--media-root", str(d)]
    return argv, "ok", [], lambda: meta(d)["multimodal"]["media_root"] == str(d.resolve())


@case("paths")
def image_inside_default(d):
    p = image_rows(d, "in.png")
    return (
        ["pack", str(p), "-o", str(d / "out"), "-q", "--no-report"],
        "ok",
        [],
        lambda: meta(d)["multimodal"]["images_packed"] == 1,
    )


@case("paths")
def image_root_missing(d):
    p = image_rows(d, "in.png")
    argv = ["pack", str(p), "-o", str(d / "out"), "-q", "--media-root", str(d / "nope")]
    return argv, "error", [], None


@case("paths")
def images_list_escape(d):
    image_rows(d, "in.png")
    row = {"images": ["../img/x.png"], "messages": [{"role": "user", "content": "<image> what?"},
                                                   {"role": "assistant", "content": "ok"}]}  # fmt: skip
    return ["pack", str(jsonl(d / "data", [row], "l.jsonl")), "-o", str(d / "out"), "-q"], "error", [], None


@case("files")
def overwrite_with_user_symlink(d):
    pre(d, *packed(d))
    (d / "mine").mkdir()
    (d / "mine" / "keep.txt").write_text("k")
    os.symlink(d / "mine", d / "out" / "link")
    return packed(d, "out", "--overwrite"), "error", ["mine/keep.txt", "out/link/keep.txt"], None


CLEANUP: list = []


def classify(name, argv, expect, keep, check, d: Path, before: dict) -> tuple[str, str]:
    def limit():
        if "ray" not in argv:  # Ray's raylet reserves more address space than the cap: it fails to start
            resource.setrlimit(resource.RLIMIT_AS, (4 << 30, 4 << 30))

    cmd = [sys.executable, "-c", "from packwise.cli import run; run()", *argv]
    t = time.time()
    try:
        proc = subprocess.run(cmd, cwd=d, capture_output=True, text=True, timeout=LIMIT_S, preexec_fn=limit)
    except subprocess.TimeoutExpired:
        return "hang", f"> {LIMIT_S} s"
    took = time.time() - t
    err = proc.stderr.strip().splitlines()[-1] if proc.stderr.strip() else ""
    for rel in keep:
        if not (d / rel).exists() or (d / rel).read_bytes() != before.get(rel, (d / rel).read_bytes()):
            return "data loss", f"{rel} gone or changed"
    if "Traceback" in proc.stderr or proc.returncode not in (0, 1):
        return "traceback", f"rc {proc.returncode}: {err[:150]}"
    if expect == "error":
        if proc.returncode == 0:
            return "silent wrong", "exit 0"
        if not err.startswith("error:"):
            return "traceback", err[:150]
        return "clean", f"{took:.1f}s {err[:150]}"
    if proc.returncode != 0:
        return "silent wrong", f"expected success: {err[:150]}"
    if check is not None and not check():
        return "silent wrong", "output check failed"
    return "clean", f"{took:.1f}s ok"


def run_case(item):
    cls, name, setup = item
    d = Path(tempfile.mkdtemp(prefix=f"brk-{name}-"))
    try:
        argv, expect, keep, check = setup(d)
        before = {rel: (d / rel).read_bytes() for rel in keep if (d / rel).is_file()}
        verdict, why = classify(name, argv, expect, keep, check, d, before)
    except Exception as e:  # a broken case definition
        verdict, why = "setup failed", f"{type(e).__name__}: {e}"
    finally:
        os.chmod(d, 0o755)
        shutil.rmtree(d, ignore_errors=True)
    return cls, name, verdict, why


def main():
    pick = sys.argv[sys.argv.index("-k") + 1] if "-k" in sys.argv else ""
    items = [c for c in CASES if pick in c[1]]
    with ThreadPoolExecutor(2) as pool:
        results = list(pool.map(run_case, items))
    for p in CLEANUP:
        p.kill()
    kinds = ["clean", "traceback", "hang", "silent wrong", "data loss", "setup failed"]
    for cls, name, verdict, why in results:
        print(f"{cls:10} {name:38} {verdict:13} {why}")
    print()
    print(f"{'class':10} " + " ".join(f"{k:>12}" for k in kinds))
    for cls in dict.fromkeys(c for c, *_ in results):
        row = [sum(1 for c, _, v, _ in results if c == cls and v == k) for k in kinds]
        print(f"{cls:10} " + " ".join(f"{n:>12}" for n in row))
    total = [sum(1 for *_, v, _ in results if v == k) for k in kinds]
    print(f"{'total':10} " + " ".join(f"{n:>12}" for n in total) + f"   ({len(results)} cases)")


if __name__ == "__main__":
    main()
