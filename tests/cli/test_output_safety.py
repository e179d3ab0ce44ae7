"""Output ownership (issue 15): packwise never deletes what it did not write, one writer at a time, and a
write killed at any point leaves the old complete output or the new complete one — never a mix."""

from __future__ import annotations

import errno
import hashlib
import json
import os
import shutil
import signal
import subprocess
import sys
import warnings
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from packwise.cli import main
from packwise.files import load_packed, read_metadata, write_packed
from packwise.files._output import LOCK, MANIFEST, OutputDir

ROWS = [{"input_ids": list(range(1, n + 1))} for n in (5, 3, 7, 2, 6, 1)]
ENV = {**os.environ, "PYTHONPATH": os.pathsep.join([str(Path(__file__).parents[2] / "src"), *sys.path])}


@pytest.fixture
def data(write_jsonl):
    return write_jsonl(ROWS)


def pack(data, out, *extra) -> int:
    return main(["pack", str(data), "-o", str(out), "--capacity", "8", "--no-report", "-q", *extra])


def test_second_run_without_overwrite_fails_and_keeps_the_first(data, tmp_path, capsys):
    out = tmp_path / "out"
    assert pack(data, out) == 0
    before = {p.name: p.read_bytes() for p in out.iterdir()}
    assert sorted(before) == [MANIFEST, "metadata.json", "packs-00000-of-00001.parquet"]
    record = {n: {"bytes": len(before[n]), "sha256": hashlib.sha256(before[n]).hexdigest()} for n in before}
    assert json.loads(before[MANIFEST]) == {
        "files": {n: record[n] for n in ("metadata.json", "packs-00000-of-00001.parquet")},
        "format": "packwise-manifest-v2",
    }
    capsys.readouterr()
    assert pack(data, out, "--capacity", "16") == 1
    assert capsys.readouterr().err.strip() == (
        f"error: output directory {out} is not empty (metadata.json, packs-00000-of-00001.parquet); pass "
        "--overwrite (overwrite=True) or another path"
    )
    assert {p.name: p.read_bytes() for p in out.iterdir()} == before


def test_overwrite_removes_only_what_packwise_wrote(data, tmp_path, capsys):
    out = tmp_path / "out"
    assert pack(data, out, "--packs-per-shard", "1") == 0  # 3 shards
    (out / "checkpoints").mkdir()
    (out / "checkpoints" / "model.bin").write_bytes(b"weights")
    (out / "notes.txt").write_text("mine")
    capsys.readouterr()
    assert pack(data, out, "--overwrite") == 1
    assert capsys.readouterr().err.strip() == (
        f"error: output directory {out} holds files packwise did not write: checkpoints, notes.txt; --overwrite "
        "only replaces the files packwise wrote, unchanged (listed in .packwise-manifest.json) — move those away "
        "(or delete them yourself), or pass a new or empty directory"
    )
    assert (out / "checkpoints" / "model.bin").read_bytes() == b"weights"
    assert len(read_metadata(out)["shards"]) == 3  # the old output is untouched
    (out / "notes.txt").unlink()
    (out / "checkpoints" / "model.bin").unlink()
    (out / "checkpoints").rmdir()
    assert pack(data, out, "--overwrite") == 0  # one shard now: the three old ones are removed
    assert sorted(p.name for p in out.iterdir()) == [MANIFEST, "metadata.json", "packs-00000-of-00001.parquet"]


def test_packwise_looking_folder_with_other_files_is_not_wiped(data, tmp_path, capsys):
    out = tmp_path / "out"
    assert pack(data, out) == 0
    (out / MANIFEST).unlink()  # as an older packwise wrote it: metadata.json + shards, no manifest
    (out / "train.py").write_text("print()")
    capsys.readouterr()
    assert pack(data, out, "--overwrite") == 1
    assert "holds files packwise did not write: train.py" in capsys.readouterr().err
    assert (out / "train.py").exists() and (out / "packs-00000-of-00001.parquet").exists()
    (out / "train.py").unlink()
    assert pack(data, out, "--overwrite") == 0  # the older output alone is replaced
    foreign = tmp_path / "foreign"
    foreign.mkdir()
    (foreign / "a.txt").write_text("x")
    assert pack(data, foreign, "--overwrite") == 1
    assert "is not a packwise output: a.txt" in capsys.readouterr().err
    assert (foreign / "a.txt").read_text() == "x"


def test_a_second_run_errors_naming_the_lock_holder(data, tmp_path, capsys):
    out = tmp_path / "out"
    with OutputDir(out):
        assert pack(data, out) == 1
        err = capsys.readouterr().err
        assert f"error: output {out} is being written by another packwise run (pid {os.getpid()} on " in err
        assert f"lock {out / LOCK}); wait for it to finish or pass another output directory" in err
    assert not out.exists()  # the holder created it and wrote nothing: removed, nothing else
    assert pack(data, out) == 0


def test_files_appearing_during_the_run_are_kept_and_named(tmp_path):
    out = tmp_path / "out"
    with pytest.raises(ValueError) as e, OutputDir(out) as dest:
        (dest.staging() / "metadata.json").write_text("{}")
        (out / "user.txt").write_text("mine")  # someone writes into the output while packwise runs
        dest.commit()
    assert str(e.value) == (
        f"output directory {out}: user.txt appeared during the run and packwise did not write them; nothing was "
        "replaced — move them away (or delete them yourself) and run again"
    )
    assert sorted(p.name for p in out.iterdir()) == ["user.txt"]  # staging and lock gone, user.txt kept
    replaced = "was removed or replaced by something else during the run"
    with pytest.raises(ValueError, match=replaced), OutputDir(tmp_path / "o2") as dest:
        (dest.staging() / "metadata.json").write_text("{}")
        os.rename(tmp_path / "o2", tmp_path / "moved")
        (tmp_path / "o2").mkdir()  # a new folder at the output path
        (tmp_path / "o2" / "theirs.txt").write_text("x")
        dest.commit()
    assert [p.name for p in (tmp_path / "o2").iterdir()] == ["theirs.txt"]


def test_stale_staging_of_dead_runs_is_cleaned_and_reported(data, tmp_path, capsys):
    out = tmp_path / "out"
    assert pack(data, out) == 0
    stale = out / ".packwise-staging-999999-x1"
    stale.mkdir()
    (stale / "packs-00000-of-00001.parquet").write_bytes(b"PAR1partial")
    (stale / "packs-00001-of-00002.parquet").write_bytes(b"")  # killed right after creating it
    (out / LOCK).write_text("pid 999999 on gone")  # left by a SIGKILLed run; nobody holds it
    legacy = tmp_path / ".out.old-999999"  # an older packwise moved the old output aside next to it
    legacy.mkdir()
    (legacy / "metadata.json").write_text('{"format": "packwise-packed-v1"}')
    capsys.readouterr()
    assert main(["pack", str(data), "-o", str(out), "--capacity", "8", "--no-report", "--overwrite"]) == 0
    err = capsys.readouterr().err
    assert f"note: removed {stale}, the unfinished staging of an interrupted packwise run" in err
    assert f"note: removed {legacy}, the temporary directory of an interrupted packwise run" in err
    assert sorted(p.name for p in out.iterdir()) == [MANIFEST, "metadata.json", "packs-00000-of-00001.parquet"]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["data.jsonl", "out"]


def test_a_mount_point_is_written_in_place(data, tmp_path, monkeypatch):
    out = tmp_path / "mnt"
    assert pack(data, out) == 0
    real_replace, real_rename = os.replace, os.rename

    def busy(real):
        def f(src, dst, *a, **kw):
            if Path(src).resolve() == out.resolve() or Path(dst).resolve() == out.resolve():
                raise OSError(errno.EBUSY, "Device or resource busy", str(src))
            return real(src, dst, *a, **kw)

        return f

    monkeypatch.setattr(os, "replace", busy(real_replace))
    monkeypatch.setattr(os, "rename", busy(real_rename))
    assert pack(data, out, "--overwrite", "--capacity", "16") == 0
    assert read_metadata(out)["capacity"] == 16


# -- fault injection: SIGKILL at every mutating step of a write ---------------------------------------------

PRELUDE = r"""
import os, signal, sys
import pyarrow as pa, pyarrow.parquet as pq
k, calls = int(os.environ["KILL_AT_STEP"]), 0
def hook(real):
    def f(*a, **kw):
        global calls
        calls += 1
        if calls == k:
            os.kill(os.getpid(), signal.SIGKILL)
        return real(*a, **kw)
    return f
for mod, name in ((os, "replace"), (os, "unlink"), (pq, "write_table")):
    setattr(mod, name, hook(getattr(mod, name)))
"""
LIBRARY = (
    PRELUDE
    + r"""
from packwise.files import write_packed
out, gen = sys.argv[1], int(sys.argv[2])
write_packed(out, [pa.table({"input_ids": [[gen, i]] * gen}) for i in range(gen)], gen, {"gen": gen}, overwrite=True)
print(calls)
"""
)
CLI = PRELUDE + "from packwise.cli import main\nsys.exit(main(sys.argv[1:]))\n"


def run_killed(script: str, k: int, *argv) -> subprocess.CompletedProcess:
    env = {**ENV, "KILL_AT_STEP": str(k)}
    return subprocess.run([sys.executable, "-c", script, *map(str, argv)], env=env, capture_output=True, text=True)


def write_gen(out: Path, gen: int) -> None:
    with warnings.catch_warnings():  # "removed ... staging of an interrupted packwise run"
        warnings.simplefilter("ignore")
        write_packed(
            out, [pa.table({"input_ids": [[gen, i]] * gen}) for i in range(gen)], gen, {"gen": gen}, overwrite=True
        )


def expect_complete(out: Path, gen: int) -> None:
    meta = read_metadata(out)  # finishes an interrupted commit first
    assert meta["gen"] == gen and len(meta["shards"]) == gen
    assert load_packed(out).column("input_ids").to_pylist() == [[gen, i] for i in range(gen) for _ in range(gen)]
    assert sorted(p.name for p in out.glob("packs-*.parquet")) == [s["file"] for s in meta["shards"]]
    assert all(pq.read_metadata(out / s["file"]).num_rows == s["packs"] for s in meta["shards"])


@pytest.mark.slow  # one interpreter per kill point: 12 processes, ~7 s
def test_sigkill_at_every_step_leaves_old_or_new_never_a_mix(tmp_path):
    out = tmp_path / "out"
    write_gen(out, 3)  # the old output: 3 shards of 3 packs
    full = run_killed(LIBRARY, 0, out, 2)  # counts the steps of a whole write
    assert full.returncode == 0, full.stderr
    steps = int(full.stdout)
    assert steps >= 10  # 2 shard writes, the journal, 3 removals, 3 moves, the manifest, cleanup
    seen = set()
    for k in range(1, steps + 1):  # the old output, then the new one (2 shards) killed before its k-th step
        write_gen(out, 3)
        proc = run_killed(LIBRARY, k, out, 2)
        assert proc.returncode == -signal.SIGKILL, (k, proc.stderr)
        gen = read_metadata(out)["gen"]  # a reader finishes a commit past its journal
        seen.add(gen)
        expect_complete(out, gen)
    write_gen(out, 3)  # the rerun after the last kill: complete, nothing left over
    expect_complete(out, 3)
    names = [MANIFEST, "metadata.json", *(f"packs-0000{i}-of-00003.parquet" for i in range(3))]
    assert sorted(p.name for p in out.iterdir()) == sorted(names)
    assert seen == {2, 3}  # early kills keep the old output, later ones (after the journal) give the new


@pytest.mark.slow  # three CLI interpreters: ~5 s
def test_sigkill_during_packwise_pack_then_rerun(data, tmp_path):
    """The CLI killed while writing a shard, and after its commit point: old or new, and the rerun completes."""
    out = tmp_path / "out"
    assert pack(data, out, "--packs-per-shard", "1") == 0
    old = read_metadata(out)
    argv = ["pack", data, "-o", out, "--capacity", "16", "--overwrite", "--no-report", "-q"]
    # k=1: the first shard write (its empty file stays in the dead run's staging); k=4: after the journal, once
    # the next run removed that staging (1 unlink), wrote its shard (2) and its journal (3)
    for k, capacity in ((1, 8), (4, 16)):
        proc = run_killed(CLI, k, *argv)
        assert proc.returncode == -signal.SIGKILL, proc.stderr
        meta = read_metadata(out)
        assert meta["capacity"] == capacity
        assert load_packed(out).num_rows == sum(s["packs"] for s in meta["shards"]) == meta["packs"]
    assert pack(data, out, "--overwrite", "--packs-per-shard", "1") == 0
    assert read_metadata(out) == old  # same input and settings as the first run: the same metadata


@pytest.mark.slow  # two CLI processes at once: ~6 s
def test_two_concurrent_runs_one_wins_the_other_errors(data, tmp_path):
    out = tmp_path / "out"
    cmd = [sys.executable, "-c", "from packwise.cli import run; run()"]
    argv = ["pack", str(data), "-o", str(out), "--capacity", "8", "--no-report", "-q"]
    procs = [subprocess.Popen([*cmd, *argv], env=ENV, stderr=subprocess.PIPE, text=True) for _ in range(2)]
    results = sorted((p.wait(timeout=120), p.stderr.read()) for p in procs)
    assert [rc for rc, _ in results] == [0, 1], results
    assert "is being written by another packwise run" in results[1][1] or "is not empty" in results[1][1]
    assert load_packed(out).num_rows == 3
    assert sorted(p.name for p in out.iterdir()) == [MANIFEST, "metadata.json", "packs-00000-of-00001.parquet"]


def test_write_packed_library_call_is_owned_too(tmp_path):
    out = tmp_path / "lib"
    write_packed(out, [pa.table({"input_ids": [[1, 2]]})], 1, {"capacity": 2})
    (out / "keep.txt").write_text("k")
    with pytest.raises(ValueError, match=r"holds files packwise did not write: keep\.txt"):
        write_packed(out, [pa.table({"input_ids": [[3]]})], 1, {"capacity": 2}, overwrite=True)
    assert load_packed(out).column("input_ids").to_pylist() == [[1, 2]]


def test_files_written_later_by_packwise_report_are_owned_too(data, tmp_path, capsys):
    out = tmp_path / "out"
    assert pack(data, out) == 0
    assert main(["report", str(out), "-q", "--no-plots"]) == 0
    files = json.loads((out / MANIFEST).read_text())["files"]
    assert list(files) == ["metadata.json", "packs-00000-of-00001.parquet", "report.json", "report.md"]
    assert files["report.md"] == {
        "bytes": (out / "report.md").stat().st_size,
        "sha256": hashlib.sha256((out / "report.md").read_bytes()).hexdigest(),
    }
    assert pack(data, out, "--overwrite") == 0  # report.json and report.md are packwise's: replaced, not refused
    assert sorted(p.name for p in out.iterdir()) == [MANIFEST, "metadata.json", "packs-00000-of-00001.parquet"]


def test_a_filesystem_without_locks_is_written_with_a_note(data, tmp_path, monkeypatch, capsys):
    import fcntl

    def no_locks(fd, op):
        raise OSError(errno.ENOLCK, "No locks available")

    monkeypatch.setattr(fcntl, "flock", no_locks)
    assert main(["pack", str(data), "-o", str(tmp_path / "out"), "--capacity", "8", "--no-report"]) == 0
    assert f"{tmp_path / 'out'}: the filesystem has no file locks (No locks available)" in capsys.readouterr().err
    assert read_metadata(tmp_path / "out")["packs"] == 3


# -- break-test findings: packwise never deletes or overwrites what it did not write ----------------------------
def test_a_lock_that_is_a_symlink_is_refused_and_its_target_kept(data, tmp_path, capsys):
    out, precious = tmp_path / "out", tmp_path / "p.txt"
    out.mkdir()
    precious.write_text("precious\n")
    (out / LOCK).symlink_to(precious)
    assert pack(data, out) == 1
    assert capsys.readouterr().err.strip() == (
        f"error: output {out}: {out / LOCK} is a symbolic link, not packwise's lock file; packwise will not write "
        "through it — remove it yourself"
    )
    assert precious.read_text() == "precious\n"


def test_a_lock_that_is_a_fifo_is_refused(data, tmp_path, capsys):
    out = tmp_path / "out"
    out.mkdir()
    os.mkfifo(out / LOCK)
    assert pack(data, out) == 1
    assert "is not a regular file; packwise will not use it as its lock" in capsys.readouterr().err


def test_a_forged_journal_does_not_delete_user_files(data, tmp_path, capsys):
    out = tmp_path / "out"
    out.mkdir()
    (out / "model.bin").write_text("w")
    journal = {"staging": ".packwise-staging-1-x", "files": [], "remove": ["model.bin"], "pid": 1}
    (out / ".packwise-commit").write_text(json.dumps(journal))
    assert pack(data, out) == 1
    assert capsys.readouterr().err.strip() == (
        f"error: packwise journal {out / '.packwise-commit'} is not one packwise wrote: its staging directory "
        ".packwise-staging-1-x is missing; nothing was changed — check the directory and remove the journal yourself"
    )
    (out / ".packwise-staging-1-x").mkdir()  # even with its staging present: model.bin is not packwise's
    assert pack(data, out, "--overwrite") == 1
    assert "it would remove model.bin, which packwise did not write (or which changed since)" in capsys.readouterr().err
    (out / ".packwise-staging-1-x" / "model.bin").write_text("evil")  # nor may it be replaced
    journal.update(files=["model.bin"], remove=[])
    (out / ".packwise-commit").write_text(json.dumps(journal))
    assert pack(data, out, "--overwrite") == 1
    assert f"it would replace {out / 'model.bin'}, which packwise did not write" in capsys.readouterr().err
    assert (out / "model.bin").read_text() == "w"


def test_legacy_output_trusts_only_packwise_names_and_content(data, tmp_path, capsys):
    out = tmp_path / "out"
    out.mkdir()
    meta = {"format": "packwise-packed-v1", "shards": [{"file": "model.bin"}]}
    (out / "metadata.json").write_text(json.dumps(meta))
    (out / "report.md").write_text("notes")
    (out / "model.bin").write_text("w")
    assert pack(data, out, "--overwrite") == 1
    assert (
        capsys.readouterr()
        .err.strip()
        .startswith(f"error: output directory {out} holds files packwise did not write: model.bin, report.md; ")
    )
    assert sorted(p.name for p in out.iterdir()) == ["metadata.json", "model.bin", "report.md"]
    # a real legacy output (its shards listed, packwise's report.md) is replaced
    (out / "model.bin").unlink()
    (out / "report.md").write_text("# packwise report — old\n")
    (out / "packs-00000-of-00001.parquet").write_bytes(b"PAR1")
    meta["shards"] = [{"file": "packs-00000-of-00001.parquet"}]
    (out / "metadata.json").write_text(json.dumps(meta))
    assert pack(data, out, "--overwrite") == 0
    assert sorted(p.name for p in out.iterdir()) == [MANIFEST, "metadata.json", "packs-00000-of-00001.parquet"]


def test_leftovers_are_removed_only_with_a_dead_pid_and_packwise_content(data, tmp_path, capsys):
    out = tmp_path / "out"
    out.mkdir()
    kept = {
        out / ".packwise-staging-backup": "keep",  # no pid
        out / f".packwise-staging-{os.getpid()}-ab": "report.md",  # a live pid
        out / ".packwise-staging-999999-cd": "keep",  # dead pid, not packwise's content
        tmp_path / ".out.tmp-mine": "report.md",  # an older packwise's mkdtemp name: no pid
    }
    for folder, name in kept.items():
        folder.mkdir()
        (folder / name).write_text("mine")
    (out / ".report.md.tmp-999999").write_text("mine")
    (out / ".packwise-manifest.json.tmp-999999").write_text("mine")
    assert pack(data, out, "--overwrite") == 1
    err = capsys.readouterr().err
    inside = [p.name for p in kept if p.parent == out] + [".packwise-manifest.json.tmp-999999", ".report.md.tmp-999999"]
    assert f"error: output directory {out} is not a packwise output: {', '.join(sorted(inside))};" in err
    assert all(p.exists() for p in kept) and len(list(out.iterdir())) == 5
    for p in [p for p in kept if p.parent == out] + [out / ".packwise-manifest.json.tmp-999999"]:
        shutil.rmtree(p) if p.is_dir() else p.unlink()
    (out / ".report.md.tmp-999998").write_text("# packwise report — a dead run's")  # removed: dead pid, ours
    assert pack(data, out, "--overwrite") == 1  # .report.md.tmp-999999 still blocks
    err = capsys.readouterr().err
    assert "not a packwise output: .report.md.tmp-999999;" in err
    (out / ".report.md.tmp-999999").unlink()
    assert pack(data, out) == 0
    err = capsys.readouterr().err
    assert f"note: left {tmp_path / '.out.tmp-mine'} in place: its name looks like a leftover" in err
    assert (tmp_path / ".out.tmp-mine" / "report.md").read_text() == "mine"


def test_a_killed_ray_runs_spill_is_removed_with_its_staging_and_nothing_else_is(data, tmp_path, capsys):
    import pickle

    import numpy as np

    out = tmp_path / "out"
    assert pack(data, out) == 0
    spill = out / ".packwise-staging-999997-ab" / ".packwise-spill"  # a dead run's, as _ray_spill writes it
    (spill / "g000000").mkdir(parents=True)
    (spill / "piece-0000000.pkl").write_bytes(pickle.dumps({"rows": [1]}, protocol=5))
    with open(spill / "piece-0000000.npy", "wb") as f:
        np.save(f, np.array([3], dtype=np.int32))
    (spill / "g000000" / "piece-0000000.pkl").write_bytes(pickle.dumps([1], protocol=5))
    (spill / "piece-0000001.pkl").write_bytes(b"")  # killed while writing
    foreign = out / ".packwise-staging-999996-cd" / ".packwise-spill"
    foreign.mkdir(parents=True)
    (foreign / "notes.txt").write_text("mine")  # not what the spill holds: kept and named
    assert pack(data, out, "--overwrite") == 1
    err = capsys.readouterr().err
    assert "holds files packwise did not write" in err and ".packwise-staging-999996-cd" in err, err
    assert ".packwise-staging-999997-ab" not in err  # the spill is packwise's
    shutil.rmtree(foreign.parent)
    assert pack(data, out, "--overwrite") == 0
    assert not spill.parent.exists()
