"""Owning an output directory: an exclusive lock, a manifest of the files packwise wrote, an all-or-nothing commit.

Layout of an output directory ``OUT`` while and after packwise writes it::

    OUT/
      .packwise.lock                   held (fcntl.flock) by the run writing OUT; holds its pid; removed at the end
      .packwise-staging-PID-XXXX/      the new files, written here first (same filesystem: renames never cross)
      .packwise-commit                 the commit journal, present only while files move from staging into OUT
      .packwise-manifest.json          every file packwise wrote in OUT, with its size and SHA-256 (no timestamps)
      metadata.json, packs-*.parquet, report*   the dataset

Rules (the issue-15 data-safety contract):

- ``overwrite`` removes only the files named in the manifest, under a name packwise writes, whose size and
  SHA-256 are still the recorded ones (see :mod:`._manifest`; for an output of an older packwise without
  one: ``metadata.json``, the shards it lists and the report files, by name and content); anything else in
  ``OUT``, or a recorded file changed since, makes it refuse before deleting anything, naming the files.
  Without ``overwrite`` a non-empty ``OUT`` is refused.
- One writer at a time: a second run on the same ``OUT`` fails at once, naming the lock holder's pid.
- ``OUT`` itself is never renamed or deleted (only a directory this run created and left empty is removed),
  so a mount point, or any path that must be written in place, works; staging lives inside ``OUT``.
- The commit writes a journal first (atomic rename), then removes the old files, moves the new ones in and
  writes the manifest. A run killed before the journal leaves the old output; one killed after it is rolled
  forward to the new output by the next writer or reader. Readers never see a mix: they refuse, or finish
  the commit, while the journal exists.
- Leftovers of interrupted runs (staging directories, ``.NAME.tmp-PID`` files, the older sibling
  ``.OUT.old-PID`` directories) are removed only when the pid in their name is dead AND their content is
  recognisably packwise's; anything else is left in place and named in a note (and then counts as a file
  packwise did not write). A journal is rolled forward only when its staging directory holds the files it
  installs and every file it removes is one packwise wrote.
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import json
import os
import re
import shutil
import socket
import tempfile
from pathlib import Path

from ._lines import read_own_json
from ._manifest import (  # noqa: F401 (re-exported)
    MANIFEST_FORMAT,
    classify,
    read_manifest,
    register_files,
    roll_forward,
    staged_records,
)
from ._owned import (  # noqa: F401 (re-exported)
    _MANIFEST_TMP,
    _REPORT_TMP,
    _STAGING,
    JOURNAL,
    LEGACY_REPORT_FILES,
    LOCK,
    MANIFEST,
    STAGING_PREFIX,
    _is_packwise_file,
    _leftover_is_packwise,
    _names,
    _regular,
    pid_alive,
)


class OutputDir:
    """Exclusive, owned writing of one packwise output directory (a context manager; re-entrant).

    ``with OutputDir(out, overwrite=...) as dest:`` checks the path, creates it if missing, takes the lock,
    finishes an interrupted commit, removes dead runs' staging, and checks ownership — all before any work.
    Write into :meth:`staging`, then :meth:`commit`. Leaving the block without a commit removes the
    staging (and ``out`` when this run created it and it is empty) and releases the lock.

    Raises:
        ValueError: (on entering) another run holds the lock (its pid is named), ``out`` is not empty without
            ``overwrite``, or holds files packwise did not write or that changed since (named); (on commit)
            files appeared or changed in ``out`` during the run; (on leaving) a write failed because ``out``
            was removed or replaced during the run (instead of the raw OSError).
    """

    def __init__(self, out, *, overwrite: bool = False, inputs: tuple = ()) -> None:
        self.path = check_output_dir(out, overwrite=overwrite, inputs=inputs).resolve()
        self.overwrite = overwrite
        self.notes: list[str] = []
        self._depth = 0
        self._fd: int | None = None
        self._created = False
        self._staging: Path | None = None
        self._owned: list[str] = []
        self.committed = False

    # -- lock -------------------------------------------------------------------------------------------
    def __enter__(self) -> OutputDir:
        self._depth += 1
        if self._depth == 1:
            try:
                self._acquire()
            except BaseException:
                self._depth = 0
                self._release(failed=True)
                raise
        return self

    def __exit__(self, exc_type, exc, tb) -> None:
        self._depth -= 1
        gone = isinstance(exc, OSError) and self._depth == 0 and self._fd is not None and not self._lock_is_ours()
        if self._depth == 0:
            self._release(failed=not self.committed)
        if gone:
            raise ValueError(
                f"output {self.path} was removed or replaced during the run "
                f"({type(exc).__name__}: {exc}); nothing was written — run again, and leave the output directory "
                "alone while packwise writes it"
            ) from exc

    def _lock_is_ours(self) -> bool:
        """The lock file at ``out`` is still the one this run holds (False: ``out`` was removed or replaced)."""
        if self._fd is None:
            return False
        try:
            return os.stat(self.path / LOCK).st_ino == os.fstat(self._fd).st_ino
        except FileNotFoundError:
            return False

    def _acquire(self) -> None:
        out = self.path
        try:
            out.mkdir(parents=True)
            self._created = True
        except FileExistsError:
            if not out.is_dir():
                raise ValueError(f"output {out} exists and is a file; pass a directory path") from None
        except OSError as e:
            raise ValueError(f"output {out}: cannot create it ({e.strerror}); pick a writable directory") from None
        fd = _lock(out, self.notes)
        self._fd = fd
        os.ftruncate(fd, 0)
        os.write(fd, f"pid {os.getpid()} on {socket.gethostname()}".encode())
        if (note := roll_forward(out)) is not None:
            self.notes.append(note)
        self._clean_stale()
        self._check_ownership()

    def _clean_stale(self) -> None:
        """Remove leftovers of dead runs whose content is packwise's; name any other leftover in a note."""
        out = self.path
        for p in sorted(out.iterdir()):
            name = p.name
            if name.startswith(STAGING_PREFIX):
                m = _STAGING.match(name)
                if _leftover_is_packwise(p, int(m.group(1)) if m else None):
                    shutil.rmtree(p, ignore_errors=True)
                    self.notes.append(f"removed {p}, the unfinished staging of an interrupted packwise run")
                else:
                    self._left(p)
            elif _REPORT_TMP.match(name) or _MANIFEST_TMP.match(name):
                if _is_packwise_file(p):
                    p.unlink(missing_ok=True)
                    self.notes.append(f"removed {p}, a temporary file of an interrupted packwise run")
                else:
                    self._left(p)
            elif name == f"{JOURNAL}.tmp":
                if self._journal_tmp_is_ours(p):
                    p.unlink(missing_ok=True)
                else:
                    self._left(p)
        # older packwise versions staged next to the output: .NAME.tmp-XXXX (mkdtemp) and .NAME.old-PID
        legacy = re.compile(rf"^\.{re.escape(out.name)}\.(tmp-\w+|old-(\d+))$")
        with contextlib.suppress(OSError):
            for p in sorted(out.parent.iterdir()):
                if not (m := legacy.match(p.name)):
                    continue
                if _leftover_is_packwise(p, int(m.group(2)) if m.group(2) else None):
                    shutil.rmtree(p, ignore_errors=True)
                    self.notes.append(f"removed {p}, the temporary directory of an interrupted packwise run")
                else:
                    self._left(p)

    def _left(self, p: Path) -> None:
        self.notes.append(
            f"left {p} in place: its name looks like a leftover of an interrupted packwise run, but its pid is "
            "alive or missing, or its content is not packwise's — remove it yourself if it is not needed"
        )

    @staticmethod
    def _journal_tmp_is_ours(p: Path) -> bool:
        if p.is_symlink() or not p.is_file():
            return False
        try:
            data = read_own_json(p)
        except (OSError, ValueError):
            return False
        pid = data.get("pid") if isinstance(data, dict) else None
        return isinstance(pid, int) and pid != os.getpid() and not pid_alive(pid)

    def _foreign(self) -> tuple[list[str], list[str], list[str]]:
        """``(files packwise wrote here, files it wrote that changed since, other entries)`` in ``out``,
        ignoring the lock, the manifest and our staging (see :func:`._manifest.classify`)."""
        out = self.path
        present = [p.name for p in out.iterdir() if p.name not in (LOCK, MANIFEST) and p != self._staging]
        return classify(out, present)

    def _check_ownership(self) -> None:
        out = self.path
        owned, changed, other = self._foreign()
        if not (owned or changed or other):
            self._owned = []
            return
        if other or changed:  # --overwrite could not help: say so, do not suggest it
            raise ValueError(f"output directory {out} {_refusal(owned, changed, other)}")
        if not self.overwrite:
            raise ValueError(
                f"output directory {out} is not empty ({_names(owned)}); pass --overwrite (overwrite=True) or "
                "another path"
            )
            raise ValueError(f"output directory {out} {_refusal(owned, changed, other)}")
        self._owned = owned

    # -- writing ----------------------------------------------------------------------------------------
    def staging(self) -> Path:
        """The directory to write the new files into (inside ``out``; created on first use)."""
        if self._fd is None:
            raise RuntimeError("packwise internal error: OutputDir.staging() outside its with-block")
        if self._staging is None:
            self._staging = Path(tempfile.mkdtemp(prefix=f"{STAGING_PREFIX}{os.getpid()}-", dir=self.path))
            umask = os.umask(0)
            os.umask(umask)
            self._staging.chmod(0o777 & ~umask)
        return self._staging

    def commit(self) -> list[Path]:
        """Replace the owned files of ``out`` with the staging's files; returns the new files' paths.

        Raises:
            ValueError: ``out`` was replaced during the run, or holds new files packwise did not write.
        """
        out, staging = self.path, self.staging()
        if not self._lock_is_ours():
            raise ValueError(
                f"output {out} was removed or replaced by something else during the run; nothing was written — "
                "run again"
            )
        owned, changed, other = self._foreign()
        other = [n for n in other if not n.startswith(STAGING_PREFIX)]
        if other or changed:
            what = f"{_names(other)} appeared" if other else f"{_names(changed)}, written by packwise, changed"
            if other and changed:
                what += f" and {_names(changed)}, written by packwise, changed"
            raise ValueError(
                f"output directory {out}: {what} during the run and packwise did not write them; nothing was "
                "replaced — move them away (or delete them yourself) and run again"
            )
        files = staged_records(staging)
        journal = {
            "files": files, "pid": os.getpid(), "remove": sorted(set(owned) - set(files)), "staging": staging.name,
        }  # fmt: skip
        tmp = out / f"{JOURNAL}.tmp"
        tmp.write_text(json.dumps(journal))
        os.replace(tmp, out / JOURNAL)  # the commit point
        roll_forward(out)
        self._staging = None
        self.committed = True
        return [out / f for f in files]

    def _release(self, *, failed: bool) -> None:
        if self._staging is not None:
            shutil.rmtree(self._staging, ignore_errors=True)
            self._staging = None
        if self._fd is None:
            return
        lock = self.path / LOCK
        with contextlib.suppress(OSError):
            if os.stat(lock).st_ino == os.fstat(self._fd).st_ino:
                lock.unlink()  # while still holding it: a waiting run re-checks the inode and retries
        if failed and self._created:
            with contextlib.suppress(OSError):
                self.path.rmdir()  # only when empty: never removes anything else
        os.close(self._fd)
        self._fd = None


def _refusal(owned: list[str], changed: list[str], other: list[str]) -> str:
    """Why ``--overwrite`` refuses: the files packwise did not write, and those it wrote that changed since."""
    parts = []
    if other:
        what = "holds files packwise did not write" if owned or changed else "is not a packwise output"
        parts.append(f"{what}: {_names(other)}")
    if changed:
        parts.append(
            f"{'holds ' if not other else ''}files packwise wrote that were changed since: {_names(changed)} (size or "
            f"SHA-256 differs from {MANIFEST})"
        )
    return (
        "; ".join(parts) + f"; --overwrite only replaces the files packwise wrote, unchanged (listed in {MANIFEST}) — "
        "move those away (or delete them yourself), or pass a new or empty directory"
    )


#: flock errors of filesystems without locks (some FUSE mounts): packwise writes unlocked and says so.
_NO_LOCKS = {errno.ENOLCK, errno.EOPNOTSUPP, errno.ENOSYS, errno.EINVAL}


def _lock(out: Path, notes: list | None = None) -> int:
    """An fd holding ``out/.packwise.lock`` exclusively; ValueError naming the holder when it is taken."""
    while True:  # lock the file that is at the path now (a finished run unlinks it while holding it)
        try:
            fd = os.open(out / LOCK, os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW | os.O_NONBLOCK, 0o644)
        except OSError as e:
            if e.errno == errno.ELOOP:
                raise ValueError(
                    f"output {out}: {out / LOCK} is a symbolic link, not packwise's lock file; packwise will not "
                    "write through it — remove it yourself"
                ) from None
            if e.errno == errno.ENXIO or ((out / LOCK).exists() and not (out / LOCK).is_file()):
                raise ValueError(
                    f"output {out}: {out / LOCK} is not a regular file; packwise will not use it as its lock — "
                    "remove it yourself"
                ) from None
            raise ValueError(f"output {out}: cannot create {LOCK} ({e.strerror}); pick a writable directory") from None
        if not _regular(fd):
            os.close(fd)
            raise ValueError(
                f"output {out}: {out / LOCK} is not a regular file; packwise will not use it as its lock — "
                "remove it yourself"
            )
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError as e:
            if e.errno in _NO_LOCKS:
                if notes is not None:
                    notes.append(
                        f"{out}: the filesystem has no file locks ({e.strerror}); a concurrent run is not detected"
                    )
                return fd
            holder = os.read(fd, 200).decode(errors="replace").strip() or "pid unknown"
            os.close(fd)
            if e.errno not in (errno.EAGAIN, errno.EACCES, errno.EWOULDBLOCK):
                raise ValueError(f"output {out}: cannot lock {LOCK} ({e.strerror})") from None
            raise ValueError(
                f"output {out} is being written by another packwise run ({holder}; lock {out / LOCK}); "
                "wait for it to finish or pass another output directory"
            ) from None
        try:
            same = os.stat(out / LOCK).st_ino == os.fstat(fd).st_ino
        except FileNotFoundError:
            same = False
        if same:
            return fd
        os.close(fd)


def check_output_dir(out, *, overwrite: bool, inputs: tuple = ()) -> Path:
    """Refuse an unusable output path before any work is done (its contents are checked under the lock by
    :class:`OutputDir`: ``overwrite`` only ever removes files packwise wrote).

    Raises:
        ValueError: ``out`` is a file, a dangling link, the current directory, the input or a directory
            containing it, or below a file or an unwritable directory.
    """
    out = Path(out)
    if out.is_symlink() and not out.exists():
        raise ValueError(f"output {out} is a dangling symbolic link; pass a directory path")
    if out.exists() and not out.is_dir():
        raise ValueError(f"output {out} exists and is a file; pass a directory path")
    resolved = out.resolve()
    for src in inputs:
        src = Path(src).resolve()
        if src == resolved or resolved in src.parents:
            raise ValueError(f"output {out} is or contains the input {src}; write the packs somewhere else")
    if resolved == Path.cwd().resolve():
        raise ValueError(f"output {out} is the current directory; pass a new directory, e.g. -o packed")
    if resolved.is_dir():  # written in place (a mount point works): its own permissions count
        if not os.access(resolved, os.W_OK | os.X_OK):
            raise ValueError(f"output {out}: no permission to write in it")
        return out
    parent = resolved.parent
    while not parent.exists():
        parent = parent.parent
    if not parent.is_dir():
        raise ValueError(f"output {out}: {parent} is a file, so the directory cannot be created")
    if not os.access(parent, os.W_OK | os.X_OK):
        raise ValueError(f"output {out}: no permission to write in {parent}")
    return out


def finish_interrupted(out) -> str | None:
    """Roll forward a commit interrupted in ``out`` (a reader's entry point; returns a note or None)."""
    out = Path(out)
    fd = _lock(out)
    try:
        return roll_forward(out)
    finally:
        with contextlib.suppress(OSError):
            if os.stat(out / LOCK).st_ino == os.fstat(fd).st_ino:
                (out / LOCK).unlink()
        os.close(fd)


def claim_output(out, *, overwrite: bool = False, inputs: tuple = ()) -> OutputDir:
    """``out`` as an :class:`OutputDir` (returned as is when it already is one)."""
    return out if isinstance(out, OutputDir) else OutputDir(out, overwrite=overwrite, inputs=inputs)
