"""Which files make up a dataset folder: a Parquet folder's ``*.parquet`` or a ``save_to_disk`` folder's
``.arrow`` files as its ``state.json`` lists them, checked complete. The checks on names are pure
(:func:`listed_data_files`, :func:`check_shard_set`), so the Ray engine applies the same ones to a folder on
a remote filesystem (``s3://``)."""

from __future__ import annotations

import json
import posixpath
import re
from pathlib import Path

import pyarrow as pa

_SHARD = re.compile(r"^(?P<stem>.*?)-(?P<i>\d{5})-of-(?P<n>\d{5})\.(?P<ext>\w+)$")


def check_shard_set(path, names: list[str]) -> None:
    """Files named ``NAME-00001-of-00003.EXT`` (HF, Spark, Dask) must all be present: none missing.

    Raises:
        ValueError: a shard of a set is missing, naming up to three of them and the count present.
    """
    groups: dict[tuple[str, str, int], set[int]] = {}
    for name in names:
        if m := _SHARD.match(name):
            groups.setdefault((m["stem"], m["ext"], int(m["n"])), set()).add(int(m["i"]))
    for (stem, ext, n), have in sorted(groups.items()):
        missing = [f"{stem}-{i:05d}-of-{n:05d}.{ext}" for i in range(n) if i not in have]
        if missing:
            more = f" and {len(missing) - 3} more" if len(missing) > 3 else ""
            raise ValueError(
                f"input {path} is incomplete: {', '.join(missing[:3])}{more} missing ({len(have)} of {n} shards "
                "present); an interrupted download or save — fetch or save the dataset again"
            )


def parquet_files(path: Path) -> list[Path]:
    """The Parquet files of an input (a file, or a directory's ``*.parquet``), checked complete.

    Raises:
        ValueError: a shard of a ``-NNNNN-of-NNNNN`` set is missing, or a ``_metadata`` summary file
            counts other rows than the files hold.
    """
    path = Path(path)
    if not path.is_dir():
        return [path]
    files = sorted(path.glob("*.parquet"))
    check_shard_set(path, [f.name for f in files])
    summary = path / "_metadata"  # a pyarrow/Dask/Spark dataset summary: its row count must match
    if summary.is_file() and files:
        import pyarrow.parquet as pq

        try:
            expected = pq.read_metadata(summary).num_rows
            actual = sum(pq.ParquetFile(f).metadata.num_rows for f in files)
        except (pa.ArrowException, OSError) as e:
            raise ValueError(f"input {path}: cannot read the Parquet footers ({e})") from e
        if expected != actual:
            raise ValueError(
                f"input {path}: _metadata counts {expected} rows but the *.parquet files hold {actual}; files are "
                "missing or extra — fetch the dataset again"
            )
    return files


def listed_data_files(path, state: str | None, arrows: list[str]) -> list[str]:
    """The data file names a ``save_to_disk`` folder's ``state.json`` text lists, checked by name alone.

    ``path`` names the folder in messages; ``state`` is the text of its ``state.json`` (None: there is none);
    ``arrows`` are the ``*.arrow`` names found in it (only counted in the message when ``state`` is None).

    Raises:
        ValueError: no ``state.json`` (an interrupted save or a cache folder), a text that is not a saved
            dataset's, a name that leaves the folder, no names, a name listed twice (its rows would be read
            twice), or an incomplete ``-NNNNN-of-NNNNN`` shard set.

    Example:
        >>> listed_data_files("ds", '{"_data_files": [{"filename": "data-00000-of-00001.arrow"}]}', [])
        ['data-00000-of-00001.arrow']
        >>> listed_data_files("ds", '{"_data_files": [{"filename": "../x.arrow"}]}', [])
        Traceback (most recent call last):
        ...
        ValueError: input ds: state.json names data file '../x.arrow', which is outside the dataset folder; ...
    """
    if state is None:
        raise ValueError(
            f"input {path} has no state.json, so it is not a complete save_to_disk folder (save_to_disk writes "
            f"state.json last: the save was interrupted, or this is a cache folder; found {len(arrows)} .arrow "
            "files); save the dataset again with Dataset.save_to_disk"
        )
    try:
        names = [f["filename"] for f in json.loads(state).get("_data_files", [])]
    except (ValueError, AttributeError, TypeError, KeyError) as e:
        raise ValueError(f"input {path}: state.json is not a saved HF dataset's ({type(e).__name__}: {e})") from e
    for name in names:
        if not isinstance(name, str) or not name or posixpath.isabs(name) or "\\" in name or ".." in name.split("/"):
            raise ValueError(
                f"input {path}: state.json names data file {name!r}, which is outside the dataset folder; "
                "refused — the dataset's files must be inside it"
            )
    if not names:
        raise ValueError(f"input {path}: state.json lists no data files; save the dataset again")
    twice = sorted({n for n in names if names.count(n) > 1})
    if twice:  # read twice, every row of it would be packed twice
        raise ValueError(
            f"input {path}: state.json lists {', '.join(map(repr, twice[:3]))} more than once, so its rows would be "
            "read twice; refused — save the dataset again with Dataset.save_to_disk"
        )
    check_shard_set(path, names)
    return names


def hf_dataset_files(path: Path) -> list[Path]:
    """The ``.arrow`` files a local ``save_to_disk`` folder's ``state.json`` lists, all present and inside it
    (symbolic links followed).

    Raises:
        ValueError: as :func:`listed_data_files`, or a listed file is missing or leads outside the folder.
    """
    state = path / "state.json"
    text = state.read_text() if state.exists() else None
    names = listed_data_files(path, text, sorted(p.name for p in path.glob("*.arrow")))
    root = path.resolve()
    for name in names:
        if root not in (path / name).resolve().parents:  # a link inside the folder that leads out of it
            raise ValueError(
                f"input {path}: state.json names data file {name!r}, which is outside the dataset folder; "
                "refused — the dataset's files must be inside it"
            )
    missing = [n for n in names if not (path / n).is_file()]
    if missing:
        raise ValueError(
            f"input {path} is incomplete: {', '.join(missing[:3])} listed in state.json "
            f"{'is' if len(missing) == 1 else 'are'} missing; save the dataset again"
        )
    return [path / n for n in names]
