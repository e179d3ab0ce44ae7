"""The manifest of a packwise output and the commit that rolls it forward (for :mod:`packwise.files._output`).

``OUT/.packwise-manifest.json`` records every file packwise wrote in ``OUT`` with its size and SHA-256::

    {"files": {"metadata.json": {"bytes": 1234, "sha256": "..."}, "packs-00000-of-00001.parquet": {...}},
     "format": "packwise-manifest-v2"}

A file is packwise's — ``--overwrite`` may remove or replace it — only when its name is one packwise writes
(shards ``packs-NNNNN-of-NNNNN.parquet``, ``metadata.json``, ``report.json``, ``report.md``, the
``report-*.png`` plots), the manifest lists it, and it is a regular file whose size and SHA-256 are still
the recorded ones. An entry without a record (``null``; every entry of a ``packwise-manifest-v1`` manifest,
written before packwise recorded hashes) falls back to the name-and-content rule of :mod:`._owned`.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
from pathlib import Path

from ._lines import read_own_json
from ._owned import (
    _SHARD,
    JOURNAL,
    LEGACY_REPORT_FILES,
    MANIFEST,
    METADATA,
    STAGING_PREFIX,
    _is_packwise_file,
    _legacy_files,
    _names,
    _plain_name,
)

MANIFEST_FORMAT = "packwise-manifest-v2"
MANIFEST_V1 = "packwise-manifest-v1"  # names only (packwise before content hashes)
_HASHES: dict[tuple, tuple[int, str]] = {}  # (dev, ino, size, mtime, ctime) -> (size, sha256): one read per run


def is_packwise_name(name: str) -> bool:
    """``name`` is one packwise writes into an output: a shard, ``metadata.json`` or a report file."""
    return bool(_SHARD.match(name)) or name == "metadata.json" or name in LEGACY_REPORT_FILES


def sha256_file(path, *, chunk: int = 1 << 22) -> tuple[int, str]:
    """``(size in bytes, SHA-256 hex digest)`` of a file, read in ``chunk``-byte blocks."""
    sha, size = hashlib.sha256(), 0
    with open(path, "rb") as f:
        while block := f.read(chunk):
            sha.update(block)
            size += len(block)
    return size, sha.hexdigest()


def file_record(path: Path) -> dict:
    """``{"bytes": size, "sha256": hex digest}`` of a regular file (cached per process by its stat identity)."""
    st = os.stat(path, follow_symlinks=False)
    key = (st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns, st.st_ctime_ns)
    if key not in _HASHES:
        if len(_HASHES) > 100_000:
            _HASHES.clear()
        _HASHES[key] = sha256_file(path)
    size, digest = _HASHES[key]
    return {"bytes": size, "sha256": digest}


def _valid_record(r) -> bool:
    if r is None:
        return True
    sha = r.get("sha256") if isinstance(r, dict) else None
    size = r.get("bytes") if isinstance(r, dict) else None
    hexdigits = isinstance(sha, str) and len(sha) == 64 and all(c in "0123456789abcdef" for c in sha)
    return hexdigits and isinstance(size, int) and not isinstance(size, bool) and size >= 0


def read_manifest(out) -> dict[str, dict | None] | None:
    """``{file name: {"bytes", "sha256"} or None}`` of what packwise recorded in ``out`` (None: no manifest).

    Raises:
        ValueError: the manifest is not packwise's, or names a path outside ``out``.
    """
    path = Path(out) / MANIFEST
    if not path.exists():
        return None
    try:
        data = read_own_json(path)
    except OSError as e:
        raise ValueError(f"{path} cannot be read ({e}); remove the directory yourself") from None
    files = data.get("files") if isinstance(data, dict) else None
    fmt = data.get("format") if isinstance(data, dict) else None
    if fmt == MANIFEST_V1 and isinstance(files, list):
        files = {f: None for f in files if isinstance(f, str)} if all(isinstance(f, str) for f in files) else None
    elif not (fmt == MANIFEST_FORMAT and isinstance(files, dict) and all(map(_valid_record, files.values()))):
        files = None
    if files is None:
        raise ValueError(f"{path} is not a packwise manifest ({MANIFEST_FORMAT}); remove the directory yourself")
    bad = [f for f in files if not _plain_name(f)]
    if bad:
        raise ValueError(f"{path} names {bad[0]!r}, which is not a file name inside {out}; the manifest was edited")
    return files


def write_manifest(out: Path, files: dict[str, dict | None]) -> None:
    """Write ``out``'s manifest atomically (a temporary file renamed over it)."""
    tmp = out / f"{MANIFEST}.tmp-{os.getpid()}"
    data = {"files": {name: files[name] for name in sorted(files)}, "format": MANIFEST_FORMAT}
    tmp.write_text(json.dumps(data, indent=2) + "\n")
    os.replace(tmp, out / MANIFEST)


def unchanged(path: Path, record: dict | None) -> bool:
    """``path`` is a regular file (not a link) with ``record``'s size and SHA-256 (None: packwise's name and
    content, the rule for outputs written before packwise recorded hashes)."""
    if path.is_symlink() or not path.is_file():
        return False
    if record is None:
        return _is_packwise_file(path)
    return path.stat().st_size == record["bytes"] and file_record(path) == record


def classify(out: Path, names) -> tuple[list[str], list[str], list[str]]:
    """``(owned, changed, other)``: of ``names`` (entries of ``out``), those packwise wrote and are unchanged,
    those it recorded but that were changed since, and the rest (not recorded, or not a name packwise writes).
    An output without a manifest (older packwise) owns only what :func:`._owned._legacy_files` trusts."""
    manifest = read_manifest(out)
    owned: list[str] = []
    changed: list[str] = []
    other: list[str] = []
    if manifest is None:
        legacy = set(_legacy_files(out) or [])
        for n in names:
            (owned if n in legacy else other).append(n)
        return owned, changed, other
    for n in names:
        if n not in manifest or not is_packwise_name(n):
            other.append(n)
        else:
            (owned if unchanged(out / n, manifest[n]) else changed).append(n)
    return owned, changed, other


def check_replaceable(out, names) -> None:
    """Refuse to write ``names`` into ``out`` (``packwise report`` rewriting its files) when one of them exists
    and is not a file packwise wrote there, unchanged.

    Raises:
        ValueError: naming the files and the fix.
    """
    out = Path(out)
    present = [n for n in names if os.path.lexists(out / n)]
    if not present:
        return
    _, changed, other = classify(out, present)
    if changed or other:
        raise ValueError(
            f"{out}: {_names(changed + other)} was not written by packwise or changed since; packwise will not "
            "overwrite it — move it away (or delete it yourself) and run again"
        )


def register_files(out, names) -> None:
    """Add ``names`` (files just written into a committed ``out``, e.g. by ``packwise report``) to its
    manifest, with their size and SHA-256 (nothing happens without a manifest)."""
    out = Path(out)
    files = read_manifest(out)
    if files is None:
        return
    for name in names:
        if is_packwise_name(name) and (out / name).is_file() and not (out / name).is_symlink():
            files[name] = file_record(out / name)
    write_manifest(out, files)


def staged_records(staging: Path) -> dict[str, dict]:
    """The manifest records of the files in ``staging``: shards take the size and SHA-256 that
    ``metadata.json`` recorded as they were written (:func:`._write.write_shard`), other files are hashed."""
    known = {}
    try:
        meta = read_own_json(staging / METADATA)
        known = {s["file"]: s for s in meta.get("shards", []) if "sha256" in s}
    except (OSError, ValueError, AttributeError, TypeError, KeyError):
        pass
    records = {}
    for p in sorted(staging.iterdir()):
        s = known.get(p.name)
        if s is not None and p.stat().st_size == s.get("bytes"):
            records[p.name] = {"bytes": s["bytes"], "sha256": s["sha256"]}
        else:
            records[p.name] = file_record(p)
    return records


def roll_forward(out: Path) -> str | None:
    """Finish a commit whose journal is in ``out`` (idempotent). The caller holds the lock.

    The journal (``{"files": {name: record}, "remove": [names], "staging", "pid"}``) is the claim on the
    new files while they move in: a file it installs that is already in ``out`` must have its record's hash.

    Raises:
        ValueError: the journal is not one packwise could have written: its staging directory is missing,
            a file it installs is neither staged nor already installed, it would replace or remove a file
            packwise did not write or that changed since (named).
    """
    journal = out / JOURNAL
    try:
        data = read_own_json(journal)
    except FileNotFoundError:
        return None
    except OSError as e:
        raise ValueError(f"{journal} cannot be read ({e}); remove the directory yourself") from None
    try:
        staging, files, remove = data["staging"], data["files"], data["remove"]
        if isinstance(files, list):  # an older packwise's journal: names only
            files = dict.fromkeys(files)
        if not isinstance(files, dict) or not isinstance(remove, list):
            raise TypeError("files must be a mapping and remove a list")
        if not all(map(_valid_record, files.values())):
            raise TypeError("a file record is not {bytes, sha256}")
    except (KeyError, TypeError) as e:
        raise ValueError(f"{journal} cannot be read ({e}); remove the directory yourself") from None
    if not all(_plain_name(f) for f in [staging, *files, *remove]) or not staging.startswith(STAGING_PREFIX):
        raise ValueError(f"{journal} names a path outside {out}; the journal was edited — remove it yourself")
    refuse = f"packwise journal {journal} is not one packwise wrote"
    fix = "nothing was changed — check the directory and remove the journal yourself"
    src = out / staging
    if src.is_symlink() or not src.is_dir():
        raise ValueError(f"{refuse}: its staging directory {staging} is missing; {fix}")
    manifest = read_manifest(out)
    legacy = set(_legacy_files(out) or []) if manifest is None else set()

    def owned(name: str) -> bool:
        if manifest is None:
            return name in legacy
        return name in manifest and is_packwise_name(name) and unchanged(out / name, manifest[name])

    for name, record in files.items():
        staged = (src / name).is_file() and not (src / name).is_symlink()
        if not staged:  # moved in by an earlier try: it must be the file the journal installs
            here = out / name
            if not (unchanged(here, record) if record is not None else (owned(name) or _is_packwise_file(here))):
                raise ValueError(f"{refuse}: it installs {name}, which is not in {staging}; {fix}")
        elif os.path.lexists(out / name) and not owned(name):
            raise ValueError(
                f"{refuse}: it would replace {out / name}, which packwise did not write (or which changed since); {fix}"
            )
    foreign = [n for n in remove if os.path.lexists(out / n) and not owned(n)]
    if foreign:
        raise ValueError(
            f"{refuse}: it would remove {_names(foreign)}, which packwise did not write (or which changed since); {fix}"
        )
    for name in remove:
        (out / name).unlink(missing_ok=True)
    for name in files:
        if (src / name).exists():
            os.replace(src / name, out / name)
    write_manifest(out, {n: r if r is not None else file_record(out / n) for n, r in files.items()})
    journal.unlink()
    shutil.rmtree(src, ignore_errors=True)
    return f"{out}: finished the replacement interrupted in run pid {data.get('pid')} (new output complete)"
