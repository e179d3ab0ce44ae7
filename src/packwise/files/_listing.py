"""Which files make up a dataset folder: a Parquet folder's ``*.parquet`` or a ``save_to_disk`` folder's
``.arrow`` files as its ``state.json`` lists them, checked complete. The checks on names are pure
(:func:`listed_data_files`, :func:`check_shard_set`), so the Ray engine applies the same ones to a folder on
a remote filesystem (``s3://``)."""

from __future__ import annotations

import posixpath
import re
from collections import Counter
from pathlib import Path

import pyarrow as pa

from ._lines import DuplicateKeyError, loads_unique

#: Data files of another format that a Parquet folder must not hold (their rows would not be read).
OTHER_DATA_SUFFIXES = (".jsonl", ".ndjson", ".jsonl.gz", ".jsonl.zst", ".arrow", ".pq", ".csv", ".tsv", ".feather")

_SHARD = re.compile(r"^(?P<stem>.*?)-(?P<i>\d{5})-of-(?P<n>\d{5})\.(?P<ext>\w+)$")


def check_shard_set(path, names: list[str]) -> None:
    """Files named ``NAME-00001-of-00003.EXT`` (HF, Spark, Dask) must form one complete set: none missing, and
    no second set beside it (a stale export with another count, or another split such as ``test-*`` beside
    ``train-*``, which would be packed together).

    Raises:
        ValueError: a shard of a set is missing (naming up to three and the count present), or the folder
            holds more than one set (naming them).
    """
    groups: dict[tuple[str, str, int], set[int]] = {}
    for name in names:
        if m := _SHARD.match(posixpath.basename(name)):
            groups.setdefault((m["stem"], m["ext"], int(m["n"])), set()).add(int(m["i"]))
    for (stem, ext, n), have in sorted(groups.items()):
        missing = [f"{stem}-{i:05d}-of-{n:05d}.{ext}" for i in range(n) if i not in have]
        if missing:
            more = f" and {len(missing) - 3} more" if len(missing) > 3 else ""
            raise ValueError(
                f"input {path} is incomplete: {', '.join(missing[:3])}{more} missing ({len(have)} of {n} shards "
                "present); an interrupted download or save — fetch or save the dataset again"
            )
    if len(groups) > 1:
        sets = ", ".join(f"{stem}-*-of-{n:05d}.{ext}" for stem, ext, n in sorted(groups))
        raise ValueError(
            f"input {path} holds {len(groups)} shard sets ({sets}): splits of a dataset or a stale export, which "
            "would be packed together; move each set into its own folder and pass one"
        )


def parquet_files(path: Path) -> list[Path]:
    """The Parquet files of an input (a file, or a directory's ``*.parquet``), checked complete.

    Raises:
        ValueError: a shard of a ``-NNNNN-of-NNNNN`` set is missing or a second set lies beside it; a
            ``*.parquet`` name is a folder or hidden (``.``/``_``, as pyarrow and Spark treat them); Parquet
            files lie in subfolders (hive partitions, not read); a data file of another format lies beside them
            (``.jsonl``, ``.arrow``, ...: its rows would be absent); two names are the same file (a link); or a
            ``_metadata`` summary file names other files or counts other rows than the files hold.
    """
    path = Path(path)
    if not path.is_dir():
        return [path]
    files = sorted(path.glob("*.parquet"))
    odd = [f.name for f in files if f.is_dir() or f.name[0] in "._"]
    if odd:
        raise ValueError(
            f"input {path}: {', '.join(odd[:3])} {'is' if len(odd) == 1 else 'are'} a folder or a hidden name "
            "(. or _) among the *.parquet files; packwise reads only the folder's own visible files — pass that "
            "folder itself, or move or rename these"
        )
    nested = next((f for d in path.iterdir() if d.is_dir() for f in d.rglob("*.parquet")), None)
    if nested is not None:
        raise ValueError(
            f"input {path} has Parquet files in subfolders ({nested.relative_to(path)}; hive partitions?), which "
            "packwise would not read; pass each subfolder, or move the files into one folder"
        )
    other = sorted(f.name for f in path.iterdir() if f.name.lower().endswith(OTHER_DATA_SUFFIXES))
    if other:
        raise ValueError(
            f"input {path}: {', '.join(other[:3])}{f' and {len(other) - 3} more' if len(other) > 3 else ''} "
            f"{'is a data file' if len(other) == 1 else 'are data files'} of another format beside the *.parquet "
            "files, whose rows would not be read; packwise reads one format per folder — move them into their own "
            "folder (or convert them to Parquet)"
        )
    check_shard_set(path, [f.name for f in files])
    _same_files(path, files, "the folder")
    summary = path / "_metadata"  # a pyarrow/Dask/Spark dataset summary: its files and row count must match
    if summary.exists() and files:
        import pyarrow.parquet as pq

        try:
            meta = pq.read_metadata(summary)
            named = {meta.row_group(i).column(0).file_path for i in range(meta.num_row_groups)} - {""}
            expected = meta.num_rows
            actual = sum(pq.ParquetFile(f).metadata.num_rows for f in files)
        except (pa.ArrowException, OSError) as e:
            raise ValueError(f"input {path}: cannot read the Parquet footers ({type(e).__name__}: {e})") from e
        if named and named != {f.name for f in files}:
            gone, extra = sorted(named - {f.name for f in files}), sorted({f.name for f in files} - named)
            raise ValueError(
                f"input {path}: _metadata names other files than the folder holds (missing: "
                f"{', '.join(gone[:3]) or 'none'}; not in _metadata: {', '.join(extra[:3]) or 'none'}); fetch the "
                "dataset again"
            )
        if expected != actual:
            raise ValueError(
                f"input {path}: _metadata counts {expected} rows but the *.parquet files hold {actual}; files are "
                "missing or extra — fetch the dataset again"
            )
    return files


def _same_files(path: Path, files: list[Path], where: str) -> None:
    """Refuse two names of one file (a symbolic link to another): its rows would be read twice."""
    seen: dict[Path, Path] = {}
    for f in files:
        real = _resolve(path, f)
        if real in seen:
            raise ValueError(
                f"input {path}: {seen[real].name} and {f.name} in {where} are the same file ({real}), so its "
                "rows would be read twice; refused — remove the link"
            )
        seen[real] = f


def _resolve(path: Path, f: Path) -> Path:
    if not f.is_symlink() and f.parent == path:  # a plain name of the folder: no need to walk the links
        return path.resolve() / f.name
    try:
        return f.resolve(strict=False)
    except (RuntimeError, OSError) as e:  # a link loop
        raise ValueError(f"input {path}: {f.name} cannot be followed ({type(e).__name__}: {e}); remove it") from e


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
        names = [f["filename"] for f in loads_unique(state).get("_data_files", [])]
    except DuplicateKeyError as e:
        raise ValueError(f"input {path}: state.json has a {e}; save the dataset again with Dataset.save_to_disk") from e
    except (ValueError, AttributeError, TypeError, KeyError) as e:
        raise ValueError(f"input {path}: state.json is not a saved HF dataset's ({type(e).__name__}: {e})") from e
    for name in names:
        if not isinstance(name, str) or not name or posixpath.isabs(name) or "\\" in name or ".." in name.split("/"):
            raise ValueError(
                f"input {path}: state.json names data file {name!r}, which is outside the dataset folder; "
                "refused — the dataset's files must be inside it"
            )
        if "/" in name or "\x00" in name or name in (".", "state.json", "dataset_info.json"):
            raise ValueError(
                f"input {path}: state.json names data file {name!r}, not the plain name of a data file in the "
                "folder (save_to_disk lists names like data-00000-of-00001.arrow); save the dataset again"
            )
    if not names:
        raise ValueError(f"input {path}: state.json lists no data files; save the dataset again")
    twice = sorted(n for n, k in Counter(names).items() if k > 1)
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
    if state.exists() and not state.is_file():
        raise ValueError(f"input {path}: state.json is not a file; save the dataset again with Dataset.save_to_disk")
    text = state.read_text() if state.exists() else None
    names = listed_data_files(path, text, sorted(p.name for p in path.glob("*.arrow")))
    root = path.resolve()
    for name in names:
        if root not in _resolve(path, path / name).parents:  # a link inside the folder that leads out of it
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
    _same_files(path, [path / n for n in names], "state.json")
    return [path / n for n in names]
