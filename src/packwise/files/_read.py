"""Reading inputs: JSONL, Parquet, or a saved Hugging Face dataset directory (read with pyarrow alone).

A row is one of three kinds, told apart by its fields: ``messages`` (a list of ``{role, content}``),
``prompt`` + ``completion``, or pre-tokenized ``input_ids`` (+ optional ``labels`` or ``loss_mask`` and any
other per-token column). Rows are numbered from 0 in file order (``source_index`` in the output); messages
name JSONL rows by their 1-based line number.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Literal

import pyarrow as pa

from ._lines import (  # noqa: F401 (re-exported: the Ray engine, verify and the CLI import them from here)
    MAX_JSONL_LINE_BYTES,
    SKIP_HINT,
    check_input_path,
    check_jsonl_file,
    jsonl_lines,
    parse_line,
)
from ._listing import check_shard_set, hf_dataset_files, listed_data_files, parquet_files  # noqa: F401

Format = Literal["jsonl", "parquet", "hf"]
Kind = Literal["messages", "prompt_completion", "tokens"]
FORMATS: tuple[str, ...] = ("jsonl", "parquet", "hf")


class BadRow(ValueError):
    """A malformed input row; the message names the file, row, field, value and the fix."""

    def __init__(self, where: str, field_name: str, problem: str, fix: str = SKIP_HINT) -> None:
        self.where, self.field, self.problem = where, field_name, problem
        super().__init__(f"{where}: field {field_name!r} {problem}; {fix}")


@dataclass
class RawInput:
    """Rows as read, before tokenization.

    Attributes:
        name: what was read (a path, or a description of in-memory data).
        kind: ``messages``, ``prompt_completion`` or ``tokens``.
        rows: Python rows (JSONL, iterables); ``None`` marks a row that could not be parsed.
        table: the Arrow table (Parquet, HF directories, pyarrow/HF inputs); ``rows`` is then None.
        fingerprint: SHA-256 (hex, 16 chars) of the input bytes.
        errors: ``(row, message)`` for rows that could not be parsed (only with skip_bad_rows).
    """

    name: str
    kind: Kind
    rows: list | None = None
    table: pa.Table | None = None
    fingerprint: str = ""
    errors: list[tuple[int, str]] = field(default_factory=list)
    line_numbers: list[int] | None = None

    @property
    def num_rows(self) -> int:
        if self.rows is not None:
            return len(self.rows)
        if self.table is None:
            raise ValueError(f"{self.name}: a RawInput holds rows or a table, neither was given")
        return self.table.num_rows

    def locate(self, i: int) -> str:
        """Human name of row ``i``: ``data.jsonl line 12`` or ``data.parquet row 11``."""
        if self.line_numbers is not None:
            return f"{self.name} line {self.line_numbers[i]}"
        return f"{self.name} row {i}"


def detect_kind(fields, where: str) -> Kind:
    fields = set(fields)
    if "input_ids" in fields:
        return "tokens"
    if "messages" in fields:
        return "messages"
    if "prompt" in fields and "completion" in fields:
        return "prompt_completion"
    raise ValueError(
        f"{where}: no 'messages', 'prompt' + 'completion' or 'input_ids' field (found: "
        f"{', '.join(sorted(map(str, fields))) or 'none'}); see README 'Input formats'"
    )


def input_digest(paths: list[Path]) -> str:
    h = hashlib.sha256()
    for p in paths:
        with open(p, "rb") as f:
            for block in iter(lambda: f.read(1 << 20), b""):
                h.update(block)
    return h.hexdigest()[:16]


def detect_format(path: Path) -> Format:
    if path.is_dir():
        if (path / "state.json").exists() or any(path.glob("*.arrow")):
            return "hf"
        if any(path.glob("*.parquet")):
            return "parquet"
        if (path / "dataset_dict.json").exists():
            splits = sorted(p.name for p in path.iterdir() if (p / "state.json").exists())
            raise ValueError(
                f"input {path} is a saved DatasetDict (splits: {', '.join(splits) or 'none'}); pass one split's "
                f"folder, e.g. {path / (splits[0] if splits else 'train')}"
            )
        raise ValueError(f"input {path}: a directory without *.arrow (saved HF dataset) or *.parquet files")
    suffix = path.suffix.lower()
    if suffix in (".jsonl", ".json", ".ndjson"):
        return "jsonl"
    if suffix in (".parquet", ".pq"):
        return "parquet"
    raise ValueError(f"input {path}: cannot tell the format from {suffix!r}; pass --format jsonl|parquet|hf")


def read_input(path, *, format: Format | None = None, skip_bad_rows: bool = False) -> RawInput:  # noqa: A002
    """Read a JSONL file, a Parquet file or directory, or a saved HF dataset directory.

    Raises:
        ValueError: the path does not exist, the format is unknown, the file is empty, or (without
            ``skip_bad_rows``) a line is not valid JSON — naming the file and line.
    """
    path = check_input_path(path)
    fmt = format or detect_format(path)
    if fmt not in FORMATS:
        raise ValueError(f"unknown --format {fmt!r}; use one of {', '.join(FORMATS)}")
    if fmt == "jsonl":
        return _read_jsonl(path, skip_bad_rows)
    if not path.is_dir() and fmt == "hf":
        raise ValueError(f"input {path}: --format hf reads a save_to_disk directory, not a file; pass the directory")
    files = parquet_files(path) if fmt == "parquet" else hf_dataset_files(path)
    tables = []
    for f in files:
        try:
            tables.append(_read_parquet(f) if fmt == "parquet" else _read_arrow(f))
        except (pa.ArrowException, OSError) as e:
            raise ValueError(f"input {path}: {f.name} cannot be read as {fmt} ({e}); replace or remove it") from e
    for f, t in zip(files[1:], tables[1:]):  # a column only some files hold would be null-filled in the others
        if set(t.column_names) != set(tables[0].column_names):
            only_here = sorted(set(t.column_names) - set(tables[0].column_names))
            only_first = sorted(set(tables[0].column_names) - set(t.column_names))
            what = f"has column(s) {only_here} that {files[0].name} lacks" if only_here else (
                f"lacks column(s) {only_first} that {files[0].name} has"
            )  # fmt: skip
            raise ValueError(
                f"input {path}: {f.name} {what} (a mixed-schema folder: the other files' rows would get nulls); "
                "every file of a dataset needs the same columns — add or drop the column(s), or pack the files "
                "separately"
            )
    try:
        table = pa.concat_tables(tables, promote_options="default")
    except pa.ArrowException as e:
        first = tables[0].schema
        bad = next((f for f, t in zip(files, tables) if not _compatible(first, t.schema)), files[-1])
        raise ValueError(
            f"input {path}: {bad.name} has columns that do not match {files[0].name}'s ({e}); every file of a "
            "dataset needs the same columns and types — remove or convert it"
        ) from e
    if table.num_rows == 0:
        raise ValueError(f"input {path} is empty (no rows)")
    kind = detect_kind(table.column_names, str(path))
    return RawInput(name=str(path), kind=kind, table=table, fingerprint=input_digest(files))


def _read_parquet(f: Path) -> pa.Table:
    import pyarrow.parquet as pq

    return pq.read_table(f)


def _compatible(a: pa.Schema, b: pa.Schema) -> bool:
    try:
        pa.unify_schemas([a, b], promote_options="default")
    except pa.ArrowException:
        return False
    return True


def _read_arrow(path: Path) -> pa.Table:
    with pa.memory_map(str(path)) as source:
        try:
            return pa.ipc.open_stream(source).read_all()
        except pa.ArrowInvalid:
            return pa.ipc.open_file(source).read_all()


def _read_jsonl(path: Path, skip_bad_rows: bool) -> RawInput:
    check_jsonl_file(path)
    rows: list = []
    lines: list[int] = []
    errors: list[tuple[int, str]] = []
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for lineno, raw in jsonl_lines(f, path):
            h.update(raw)
            if not raw.strip():
                continue
            try:
                row = parse_line(raw, path, lineno)
            except ValueError as e:
                if not skip_bad_rows:
                    raise
                errors.append((len(rows), str(e)))
                row = None
            rows.append(row)
            lines.append(lineno)
    if not rows:
        raise ValueError(f"input {path} is empty (no rows)")
    first = next((r for r in rows if r is not None), None)
    if first is None:
        n = len(rows)
        raise ValueError(f"input {path}: no line is a valid row ({n} bad line{'' if n == 1 else 's'}, all skipped)")
    kind = detect_kind(first.keys(), f"{path} line {lines[rows.index(first)]}")
    return RawInput(
        name=str(path), kind=kind, rows=rows, fingerprint=h.hexdigest()[:16], errors=errors, line_numbers=lines
    )


def from_rows(rows, *, name: str = "rows") -> RawInput:
    """Wrap in-memory rows (an iterable of dicts), a pyarrow Table, or a ``datasets.Dataset``."""
    if isinstance(rows, pa.Table):
        return _from_table(rows, name)
    if type(rows).__module__.startswith("datasets") and hasattr(rows, "data"):
        indexed = getattr(rows, "_indices", None) is not None  # select/shuffle: an indices mapping to apply
        return _from_table(rows.flatten_indices().data.table if indexed else rows.data.table, name)
    rows = list(rows)
    if not rows:
        raise ValueError(f"{name}: no rows")
    for i, row in enumerate(rows):
        if not isinstance(row, dict):
            raise TypeError(f"{name} row {i}: expected a dict, got {type(row).__name__}")
    h = hashlib.sha256(json.dumps(rows, sort_keys=True, default=str).encode())
    return RawInput(
        name=name, kind=detect_kind(rows[0].keys(), f"{name} row 0"), rows=rows, fingerprint=h.hexdigest()[:16]
    )


def without_fields(raw: RawInput, names) -> tuple[RawInput, int]:
    """``raw`` with the top-level fields ``names`` removed from every row (``drop_fields``), and how many
    non-null values were removed (the report's ``field_values_dropped``). Fields no row holds drop nothing.

    Example:
        >>> raw = from_rows([{"input_ids": [1, 2], "id": "a"}, {"input_ids": [3], "id": None}])
        >>> kept, n = without_fields(raw, ["id"])
        >>> kept.rows, n
        ([{'input_ids': [1, 2]}, {'input_ids': [3]}], 1)
    """
    names = set(names)
    if not names:
        return raw, 0
    if raw.table is not None:
        gone = [c for c in raw.table.column_names if c in names]
        count = sum(raw.table.num_rows - raw.table.column(c).null_count for c in gone)
        return dataclasses.replace(raw, table=raw.table.drop_columns(gone)), count
    rows, count = [], 0
    for row in raw.rows if raw.rows is not None else []:  # no table: the rows are set
        if row is not None and not names.isdisjoint(row):
            count += sum(row[k] is not None for k in names & row.keys())
            row = {k: v for k, v in row.items() if k not in names}
        rows.append(row)
    return dataclasses.replace(raw, rows=rows), count


def _from_table(table: pa.Table, name: str) -> RawInput:
    if table.num_rows == 0:
        raise ValueError(f"{name}: no rows")
    h = hashlib.sha256()
    sink = pa.BufferOutputStream()
    with pa.ipc.new_stream(sink, table.schema) as writer:
        writer.write_table(table)
    h.update(sink.getvalue().to_pybytes())
    return RawInput(name=name, kind=detect_kind(table.column_names, name), table=table, fingerprint=h.hexdigest()[:16])
