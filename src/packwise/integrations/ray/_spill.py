"""Ray engine, spill: pass 1's tokenized, overflow-applied pieces, written once and read back by pass 2.

Every pack may draw rows from anywhere in the input, so pass 2 needs pass 1's rows again. Rather than read and
tokenize the input a second time, or hold the tokenized dataset in the object store, pass 1 (``_data``)
writes each piece's :class:`~packwise.pipeline.Samples` and its ``(n,)`` int32 lengths (what the plan hash
streams); pass 2 reads each piece once, writes its rows into the folder of the shard group each lands in
(``g000012/piece-0000345.pkl``) and deletes the piece's samples; each group's writer reads its folder in piece
order. All of it lives in a folder packwise creates inside the run's own staging area, so the output's rules
hold:

- local output: ``<staging>/.packwise-spill/`` inside the output's staging directory. It is removed before
  the commit; on failure the staging (spill included) is removed as before. Every node of a cluster must see
  the output path already, so it sees the spill too.
- remote output (``s3://``): ``<out>/_packwise-tmp-<id>/spill/`` on the output's own filesystem, removed
  with the temporary prefix by the commit or the abort. Not a node-local temporary folder: the pass-2 task
  of a piece may run on another node than the pass-1 task that wrote it, and the output's filesystem is the
  one storage every node is known to reach. It costs two PUTs and two GETs of the token bytes.

Disk: about one copy of the tokenized rows at a time (~8 bytes per token + 20 per sequence, more with extra
per-token columns), plus 4 bytes per sequence of lengths.

Only files written by this run, in a folder this run created, are read back, so the Samples are pickled
(numpy arrays and the media lists as they are).
"""

from __future__ import annotations

import io
import pickle
import shutil
from pathlib import Path

import numpy as np

from ...files import SPILL_DIR
from ._fs import Loc

# SPILL_DIR: inside the local staging directory (removed before the commit); files/_owned.py knows its
# contents, so a killed run's staging directory with a spill in it is removed as packwise's own leftover
REMOTE_SPILL_DIR = "spill"  # inside the remote output's temporary prefix


def spill_root(tmp):
    """Create the spill folder inside ``tmp`` (the staging directory, or a remote temporary prefix ``Loc``)
    and return it (a path string, or a ``Loc``)."""
    if isinstance(tmp, Loc):
        root = tmp.child(REMOTE_SPILL_DIR)
        root.fs.create_dir(root.path, recursive=True)
        return root
    root = Path(tmp) / SPILL_DIR
    root.mkdir()
    return str(root)


def _names(root, i: int) -> tuple:
    stem = f"piece-{i:07d}"
    if isinstance(root, Loc):
        return root.child(f"{stem}.pkl"), root.child(f"{stem}.npy")
    return f"{root}/{stem}.pkl", f"{root}/{stem}.npy"


def _open_write(where):
    return where.fs.open_output_stream(where.path) if isinstance(where, Loc) else open(where, "wb")


def _dump(where, obj) -> int:
    """Pickle ``obj`` straight into the file (large arrays are written from their own memory, not copied
    into one bytes object first); returns the bytes written."""
    with _open_write(where) as f:
        pickle.dump(obj, f, protocol=5)
        return f.tell()


def _load(where):
    if isinstance(where, Loc):
        with where.open() as f:
            return pickle.loads(f.read_buffer())
    with open(where, "rb") as f:
        return pickle.load(f)


def write_piece(root, i: int, samples, lengths: np.ndarray) -> int:
    """Worker: spill piece ``i``'s samples and ``(n,)`` lengths; returns the bytes written."""
    data, lens = _names(root, i)
    with _open_write(lens) as f:
        np.save(f, np.ascontiguousarray(lengths, dtype=np.int32), allow_pickle=False)
        written = f.tell()
    return _dump(data, samples) + written


def read_piece(root, i: int):
    """Worker: piece ``i``'s :class:`~packwise.pipeline.Samples`, as pass 1 spilled them."""
    return _load(_names(root, i)[0])


def drop_piece(root, i: int) -> None:
    """Worker, pass 2: piece ``i``'s samples once its rows are in the group folders (its lengths stay, for
    the plan hash), so the spill holds about one copy of the rows at a time."""
    where = _names(root, i)[0]
    if isinstance(where, Loc):
        where.fs.delete_file(where.path)
    else:
        Path(where).unlink()


def read_lengths(root, i: int) -> np.ndarray:
    """Worker: piece ``i``'s ``(n,)`` int32 lengths (after overflow), as pass 1 spilled them."""
    where = _names(root, i)[1]
    if isinstance(where, Loc):
        with where.open() as f:
            return np.load(io.BytesIO(f.read()), allow_pickle=False)
    return np.load(where, allow_pickle=False)


def _part(root, g: int, i: int):
    name = f"g{g:06d}/piece-{i:07d}.pkl"
    return root.child(name) if isinstance(root, Loc) else f"{root}/{name}"


def group_folders(root, n: int) -> None:
    """Driver: the folders of writer groups ``0 .. n-1`` (before any place task writes into them)."""
    for g in range(n):
        if isinstance(root, Loc):
            root.fs.create_dir(root.child(f"g{g:06d}").path, recursive=True)
        else:
            (Path(root) / f"g{g:06d}").mkdir()


def write_part(root, g: int, i: int, part) -> int:
    """Worker, pass 2: piece ``i``'s rows that land in writer group ``g``; returns the bytes written."""
    return _dump(_part(root, g, i), part)


def read_parts(root, g: int) -> list:
    """Worker, pass 2: every piece's rows for writer group ``g``, in piece (input) order."""
    found: list[Loc] | list[Path]
    if isinstance(root, Loc):
        found = root.child(f"g{g:06d}").list(".pkl")
    else:
        folder = Path(root) / f"g{g:06d}"
        found = sorted(folder.iterdir()) if folder.is_dir() else []
    return [_load(f) for f in found]


def remove(root) -> None:
    """Driver: the spill folder and what this run wrote into it (it holds nothing else)."""
    if isinstance(root, Loc):
        root.fs.delete_dir(root.path)
    else:
        shutil.rmtree(root)
