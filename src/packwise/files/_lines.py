"""JSON lines: the bounded line reader and parser shared by the local reader (:mod:`._read`) and the Ray
engine's pieces (``integrations/ray/_io.py``), and the checks on an input path before it is opened.

Bounds: regular files and directories only; a JSONL line is capped at 64 MiB; JSON nesting depth is bounded; an
object naming a key twice is refused (``loads_unique``, also used for ``state.json``, tool-call arguments,
``--runtime-env`` and packwise's own files)."""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

SKIP_HINT = "fix the row or pass --skip-bad-rows (skip_bad_rows=True) to skip and count it"


class DuplicateKeyError(ValueError):
    """A JSON object names one key twice (``key``): Python's ``json`` would silently keep the last value,
    other readers the first; packwise refuses instead of guessing which one the writer meant."""

    def __init__(self, key: str) -> None:
        self.key = key
        super().__init__(f"duplicate key {key!r} in one JSON object (JSON keeps only one of its values)")


def _unique_pairs(pairs: list) -> dict:
    out = dict(pairs)
    if len(out) != len(pairs):
        seen = set()
        for key, _ in pairs:
            if key in seen:
                raise DuplicateKeyError(key)
            seen.add(key)
    return out


def _no_constant(name: str):
    raise ValueError(f"{name} is not JSON (RFC 8259 has no NaN or Infinity); write null or a number")


_UNIQUE = json.JSONDecoder(object_pairs_hook=_unique_pairs, parse_constant=_no_constant)


def loads_unique(text: str | bytes):
    """``json.loads(text)`` that refuses an object naming a key twice, at any depth (user JSON: data rows,
    ``state.json``, tool-call arguments, ``--runtime-env``; packwise's own files), ``NaN``/``Infinity`` (which
    Python's ``json`` reads but JSON does not have: re-serialised into a chat they would be invalid JSON) and
    nesting deeper than the interpreter's recursion limit. Bytes are decoded as ``json.loads`` decodes them
    (UTF-8/16/32 by their first bytes).

    Raises:
        DuplicateKeyError: a ``ValueError`` naming the key. ValueError: not JSON (``json.JSONDecodeError``),
        NaN/Infinity, or nested more than about ``sys.getrecursionlimit()`` levels.

    Example:
        >>> loads_unique('{"a": 1, "b": {"c": 2}}')
        {'a': 1, 'b': {'c': 2}}
        >>> loads_unique('{"a": 1, "b": {"c": 2, "c": 3}}')
        Traceback (most recent call last):
        ...
        packwise.files._lines.DuplicateKeyError: duplicate key 'c' in one JSON object (JSON keeps only one ...)
    """
    if isinstance(text, (bytes, bytearray)):
        text = text.decode(json.detect_encoding(text), "surrogatepass")
    elif text.startswith("\ufeff"):
        raise json.JSONDecodeError("Unexpected UTF-8 BOM (decode using utf-8-sig)", text, 0)
    try:
        return _UNIQUE.decode(text)
    except RecursionError:
        raise ValueError(f"nested more than about {sys.getrecursionlimit()} levels of [ or {{ deep") from None


#: Longest JSONL line read (bytes): a row beyond it is refused rather than read into memory without end.
MAX_JSONL_LINE_BYTES = 64 << 20


def check_input_path(path) -> Path:
    """Refuse an input that is missing or is not a regular file or a directory (a FIFO, a socket, a device such
    as ``/dev/zero``) before opening it: reading one could block or never end.

    Raises:
        ValueError: naming the path and what it is.
    """
    import stat

    path = Path(path)
    try:
        mode = os.stat(path).st_mode
    except FileNotFoundError:
        raise ValueError(f"input {path} does not exist") from None
    except OSError as e:
        raise ValueError(f"input {path} cannot be read ({e.strerror})") from None
    if not (stat.S_ISREG(mode) or stat.S_ISDIR(mode)):
        what = (
            "a named pipe (FIFO)" if stat.S_ISFIFO(mode) else "a socket" if stat.S_ISSOCK(mode)
            else "a character device" if stat.S_ISCHR(mode) else "a block device" if stat.S_ISBLK(mode)
            else "not a regular file"
        )  # fmt: skip
        raise ValueError(
            f"input {path} is {what}, not a regular file or directory; packwise reads files — write the data "
            "to a file first"
        )
    return path


def jsonl_lines(f, path, *, limit: int | None = None, first: int = 1, size: int | None = None):
    """``(line number, raw bytes)`` of an open binary JSONL file, refusing a line over ``limit`` bytes
    (default :data:`MAX_JSONL_LINE_BYTES`) with a ValueError naming the file, line and limit.

    The local reader reads a whole file; the Ray engine's pieces read ``size`` bytes from where ``f`` stands
    (a piece of whole lines whose first line is line ``first``), with the same bound and message. Memory per
    line is bounded by ``limit``.
    """
    limit = MAX_JSONL_LINE_BYTES if limit is None else limit
    lineno, left = first - 1, size
    while (left is None or left > 0) and (raw := f.readline(limit + 1 if left is None else min(limit + 1, left))):
        lineno += 1
        if left is not None:
            left -= len(raw)
        if len(raw) > limit and not (len(raw) == limit + 1 and raw.endswith(b"\n")):
            raise ValueError(
                f"{path} line {lineno}: longer than the {limit:,} byte limit of one JSONL row; is this JSON lines "
                "(one object per line)? Split the file into rows, or pass Parquet"
            )
        yield lineno, raw


def parse_line(raw: bytes, path, lineno: int, *, hint: str = SKIP_HINT) -> dict:
    """One JSONL line as a dict; ``ValueError`` naming the file, line and JSON error, then ``hint``.

    Nesting deeper than Python's recursion limit (about 1,000 levels) is refused with the same message shape;
    an object that names a key twice is refused naming the key (:func:`loads_unique`).
    """
    try:
        row = loads_unique(raw)
        if not isinstance(row, dict):
            raise ValueError(f"expected a JSON object, got {type(row).__name__}")
    except DuplicateKeyError as e:
        raise ValueError(f"{path} line {lineno}: {e}; {hint}") from None
    except ValueError as e:  # also NaN/Infinity and nesting beyond the recursion limit (loads_unique)
        raise ValueError(f"{path} line {lineno}: malformed JSON ({e}); {hint}") from None
    return row


#: Largest file of packwise's own (metadata.json, the manifest, the journal) read as JSON, in bytes.
MAX_OWN_JSON_BYTES = 256 << 20


def read_own_json(path):
    """The parsed content of one of packwise's own JSON files (``metadata.json``, ``.packwise-manifest.json``,
    the commit journal), read with a size cap (:data:`MAX_OWN_JSON_BYTES`) and a nesting bound.

    Raises:
        OSError: the file cannot be opened (``FileNotFoundError`` when it is missing).
        ValueError: it is larger than the cap, is not JSON or is nested deeper than Python's recursion limit;
            the message names the file, says it is not a valid packwise file and the fix. Nothing is deleted.

    >>> import tempfile, pathlib
    >>> p = pathlib.Path(tempfile.mkdtemp()) / "metadata.json"
    >>> _ = p.write_text("[" * 100000 + "]" * 100000)
    >>> read_own_json(p)
    Traceback (most recent call last):
    ...
    ValueError: ...metadata.json is not a valid packwise file (not JSON: nested more than about ... levels ...); ...
    """
    path = Path(path)
    fix = "restore it from a copy, or move the folder away and re-run packwise pack"
    chunks, size = [], 0
    with open(path, "rb") as f:  # in 1 MiB reads: read(n) reserves n bytes up front, and the limit is 256 MB
        while size <= MAX_OWN_JSON_BYTES and (chunk := f.read(1 << 20)):
            chunks.append(chunk)
            size += len(chunk)
    raw = b"".join(chunks)
    if len(raw) > MAX_OWN_JSON_BYTES:
        raise ValueError(
            f"{path} is not a valid packwise file (larger than the {MAX_OWN_JSON_BYTES:,} byte limit); {fix}"
        )
    try:
        return loads_unique(raw)
    except DuplicateKeyError as e:
        raise ValueError(f"{path} is not a valid packwise file ({e}); {fix}") from None
    except ValueError as e:
        raise ValueError(f"{path} is not a valid packwise file (not JSON: {e}); {fix}") from None


#: File signatures that mean the file is not JSON text (checked on the first bytes of a .jsonl input).
_MAGIC = (
    (b"\x1f\x8b", "gzip-compressed", "decompress it: gunzip -c {p} > data.jsonl"),
    (b"\x28\xb5\x2f\xfd", "zstd-compressed", "decompress it: zstd -d {p} -o data.jsonl"),
    (b"BZh", "bzip2-compressed", "decompress it: bunzip2 -k {p}"),
    (b"\xfd7zXZ\x00", "xz-compressed", "decompress it: unxz -k {p}"),
    (b"PK\x03\x04", "a zip archive", "extract it: unzip {p}"),
    (b"PAR1", "a Parquet file", "rename it to .parquet or pass --format parquet"),
    (b"ARROW1", "an Arrow file", "load it with datasets and save_to_disk, then pass the folder"),
)


def check_jsonl_file(path: Path) -> None:
    """Refuse a directory, or a file whose first bytes say it is compressed, an archive or Parquet.

    Raises:
        ValueError: naming the path, what it is and the fix.
    """
    check_input_path(path)
    if path.is_dir():
        raise ValueError(
            f"input {path} is a directory; --format jsonl reads one file: pass the .jsonl file itself "
            "(or a Parquet / saved HF dataset directory without --format jsonl)"
        )
    with open(path, "rb") as f:
        head = f.read(8)
    for magic, what, fix in _MAGIC:
        if head.startswith(magic) and not (what == "bzip2-compressed" and not head[3:4].isdigit()):
            raise ValueError(f"input {path} is {what}, not JSON lines; {fix.format(p=path)}")
