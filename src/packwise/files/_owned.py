"""What packwise wrote: the names and content of its files, for :mod:`packwise.files._output` (which owns the
output directory). A file counts as packwise's only when its name AND its content are those packwise writes;
a leftover of an interrupted run only when, in addition, the pid in its name is dead.

The bottom of ``files/``' write side, which imports in one direction: names and formats (this module) ->
the manifest (:mod:`._manifest`) -> the loaders' checks (:mod:`._verify`) -> the output directory
(:mod:`._output`) -> the writer and loader (:mod:`._write`)."""

from __future__ import annotations

import os
import re
import stat
from pathlib import Path

from ._lines import read_own_json

#: ``metadata.json``'s ``format``: the packed-dataset layout this packwise writes and reads.
FORMAT = "packwise-packed-v1"
METADATA = "metadata.json"
LOCK = ".packwise.lock"
MANIFEST = ".packwise-manifest.json"
JOURNAL = ".packwise-commit"
STAGING_PREFIX = ".packwise-staging-"
SPILL_DIR = ".packwise-spill"  # the Ray engine's pass-1 spill, inside a staging directory
#: Files of an older packwise output (no manifest) besides metadata.json and its shards.
LEGACY_REPORT_FILES = (
    "report.json", "report.md", "report-fill.png", "report-lengths.png", "report-speedup.png", "report-tokens.png",
)  # fmt: skip
_REPORT_TMP = re.compile(r"^\.(report[\w.-]*|metadata\.json)\.tmp-(\d+)$")  # report/_files.py's atomic writes
_SHARD = re.compile(r"^packs-\d{5}-of-\d{5}\.parquet$")
_STAGING = re.compile(rf"^{re.escape(STAGING_PREFIX)}(\d+)-\w+$")
_MANIFEST_TMP = re.compile(rf"^{re.escape(MANIFEST)}\.tmp-(\d+)$")
_PNG = b"\x89PNG\r\n\x1a\n"
_SPILL_FILE = re.compile(r"^piece-\d{7}\.(pkl|npy)$")
_SPILL_GROUP = re.compile(r"^g\d{6}$")
_SHOWN = 5


def _names(names) -> str:
    names = sorted(names)
    more = f" and {len(names) - _SHOWN} more" if len(names) > _SHOWN else ""
    return ", ".join(names[:_SHOWN]) + more


def pid_alive(pid: int) -> bool:
    """Whether process ``pid`` exists on this host (``kill(pid, 0)``; a process of another user counts as alive).

    Example:
        >>> import os
        >>> pid_alive(os.getpid())
        True
    """
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def _plain_name(name) -> bool:
    return isinstance(name, str) and name not in ("", ".", "..") and "/" not in name and "\\" not in name


def _legacy_files(out: Path) -> list[str] | None:
    """What an older packwise (no manifest) wrote: metadata.json, the ``packs-NNNNN-of-NNNNN.parquet`` shards
    it lists and the report files packwise names (report.json/report.md only when their content is
    packwise's). Any other name — even one metadata.json lists — is not trusted."""
    try:
        meta = read_own_json(out / METADATA)
    except (OSError, ValueError):
        return None
    if not isinstance(meta, dict) or meta.get("format") != FORMAT:
        return None
    shards = [s.get("file") for s in meta.get("shards") or [] if isinstance(s, dict)]
    reports = [n for n in LEGACY_REPORT_FILES if _is_packwise_file(out / n)]
    return [METADATA, *(f for f in shards if isinstance(f, str) and _SHARD.match(f)), *reports]


def _head(path: Path, n: int = 4096) -> bytes:
    try:
        with open(path, "rb", opener=lambda p, fl: os.open(p, fl | os.O_NOFOLLOW | os.O_NONBLOCK)) as f:
            return f.read(n) if _regular(f.fileno()) else b""
    except OSError:
        return b""


def _regular(fd: int) -> bool:
    return stat.S_ISREG(os.fstat(fd).st_mode)


def _is_packwise_file(path: Path) -> bool:
    """``path`` is a regular file (not a link) whose name AND content are those of a file packwise writes."""
    if path.is_symlink() or not path.is_file():
        return False
    name, head = path.name, _head(path)
    if m := _REPORT_TMP.match(name):  # an atomic write's temporary: the pid must be dead, the content ours
        if pid_alive(int(m.group(2))) or int(m.group(2)) == os.getpid():
            return False
        name = m.group(1)
        if name == "report.json":
            return head.startswith(b'{\n  "format": "packwise-report')
        if name == METADATA:
            return head.startswith(b"{") and b'"format": "packwise-packed' in path.read_bytes()[: 1 << 20]
    if m := _MANIFEST_TMP.match(name):
        return not pid_alive(int(m.group(1))) and head.startswith((b'{\n  "files": [', b'{\n  "files": {'))
    if _SHARD.match(name):
        return head.startswith(b"PAR1")
    if name == METADATA:
        try:
            return read_own_json(path).get("format") == FORMAT
        except (OSError, ValueError, AttributeError):
            return False
    if name == "report.json":
        try:
            data = read_own_json(path)
        except (OSError, ValueError):
            return False
        return isinstance(data, dict) and (
            str(data.get("format", "")).startswith("packwise-report") or {"capacity", "metrics"} <= data.keys()
        )
    if name == "report.md":
        return head.startswith(b"# packwise report")
    if name in LEGACY_REPORT_FILES and name.endswith(".png"):
        return head.startswith(_PNG)
    return False


def _leftover_is_packwise(path: Path, pid: int | None) -> bool:
    """A leftover directory of an interrupted run: its name's pid is dead, every entry is a packwise file
    (or an empty file under a name packwise writes: a run killed right after creating it)."""
    if pid is None or pid == os.getpid() or pid_alive(pid) or path.is_symlink() or not path.is_dir():
        return False
    try:
        return all(
            _is_packwise_file(p) or _empty_packwise_name(p) or (p.name == SPILL_DIR and _is_spill(p))
            for p in path.iterdir()
        )
    except OSError:
        return False


def _is_spill(path: Path, depth: int = 0) -> bool:
    """The Ray engine's spill folder (``integrations/_ray_spill.py``): ``piece-NNNNNNN.pkl``/``.npy`` files
    (pickle protocol 5 / numpy ``.npy`` by their first bytes; empty: killed while writing) and ``gNNNNNN/``
    writer-group folders of such files; nothing else, no links."""
    if path.is_symlink() or not path.is_dir():
        return False
    for p in path.iterdir():
        if p.is_symlink():
            return False
        if p.is_dir():
            if depth or not _SPILL_GROUP.match(p.name) or not _is_spill(p, depth + 1):
                return False
            continue
        m = _SPILL_FILE.match(p.name)
        head = _head(p, 8)
        if not m or not p.is_file() or (head and not head.startswith(b"\x80\x05" if m[1] == "pkl" else b"\x93NUMPY")):
            return False
    return True


def _empty_packwise_name(path: Path) -> bool:
    name = path.name
    named = bool(_SHARD.match(name)) or name == "metadata.json" or name in LEGACY_REPORT_FILES
    return named and not path.is_symlink() and path.is_file() and path.stat().st_size == 0
