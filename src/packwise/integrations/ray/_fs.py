"""Ray engine, storage: input and output on any pyarrow filesystem (``s3://``, ``gs://``, ``hdfs://``, ...).

A URI is resolved with ``pyarrow.fs.FileSystem.from_uri`` (query options such as
``?endpoint_override=host:port&scheme=http`` are pyarrow's), or an explicit ``filesystem`` is used with a
plain path. Local paths keep the local engine's own code (and messages). The filesystem object travels to the
workers with each task (pyarrow filesystems pickle with their options; credentials come from the workers'
environment as pyarrow reads them, e.g. ``AWS_ACCESS_KEY_ID``).

Remote output cannot be renamed atomically, so the commit is "marker last": shards are written under a
temporary prefix ``<out>/_packwise-tmp-<id>/``, moved to ``<out>/`` when every writer succeeded, and
``metadata.json`` (what every packwise reader requires) is written last. A failed run deletes what it wrote.
"""

from __future__ import annotations

import contextlib
import hashlib
import uuid
from dataclasses import dataclass
from typing import TYPE_CHECKING

import pyarrow as pa

from ...files import listed_data_files

if TYPE_CHECKING:
    import pyarrow.fs as pafs


@dataclass(frozen=True)
class Loc:
    """A file or directory on a pyarrow filesystem; ``str()`` is the name packwise prints."""

    fs: pafs.FileSystem
    path: str
    name: str

    def __str__(self) -> str:
        return self.name

    def child(self, name: str) -> Loc:
        return Loc(self.fs, f"{self.path.rstrip('/')}/{name}", f"{self.name.rstrip('/')}/{name}")

    def info(self):
        return self.fs.get_file_info(self.path)

    def exists(self) -> bool:
        import pyarrow.fs as pafs

        return self.info().type != pafs.FileType.NotFound

    def is_dir(self) -> bool:
        import pyarrow.fs as pafs

        return self.info().type == pafs.FileType.Directory

    def size(self) -> int:
        return int(self.info().size)

    def list(self, suffix: str) -> list[Loc]:
        import pyarrow.fs as pafs

        infos = self.fs.get_file_info(pafs.FileSelector(self.path, allow_not_found=True))
        names = sorted(i.base_name for i in infos if i.type == pafs.FileType.File and i.base_name.endswith(suffix))
        return [self.child(n) for n in names]

    def open(self):
        return self.fs.open_input_file(self.path)

    def read_text(self) -> str:
        with self.open() as f:
            return f.read().decode()


def resolve(data, filesystem=None) -> Loc | None:
    """A :class:`Loc` for a URI (``scheme://...``) or for a path on ``filesystem``; None for a local path."""
    import pyarrow.fs as pafs

    text = str(data)
    if filesystem is not None:
        if not isinstance(filesystem, pafs.FileSystem):
            raise TypeError(f"filesystem must be a pyarrow.fs.FileSystem, got {type(filesystem).__name__}")
        return Loc(filesystem, text, text)
    if "://" not in text or text.startswith("file://"):
        return None
    try:
        fs, path = pafs.FileSystem.from_uri(text)
    except (pa.ArrowException, ValueError) as e:
        raise ValueError(f"{text}: pyarrow cannot open this URI ({e}); check the scheme and its options") from e
    return Loc(fs, path, text.split("?", 1)[0])


def digest(locs: list[Loc]) -> str:
    """The local reader's fingerprint (SHA-256 of the files' bytes, first 16 hex digits), streamed."""
    h = hashlib.sha256()
    for loc in locs:
        with loc.fs.open_input_stream(loc.path) as f:
            while block := f.read(1 << 20):
                h.update(block)
    return h.hexdigest()[:16]


def hf_files(loc: Loc) -> list[Loc]:
    """The Arrow files of a directory saved with ``datasets.Dataset.save_to_disk`` (order of state.json), with
    the local reader's checks on the names (:func:`packwise.files.listed_data_files`) and every file present.

    Raises:
        ValueError: as ``listed_data_files``, or a listed file is missing.
    """
    state = loc.child("state.json")
    text = state.read_text() if state.exists() else None
    names = listed_data_files(loc, text, [f.path.rsplit("/", 1)[-1] for f in loc.list(".arrow")])
    files = [loc.child(n) for n in names]
    missing = [n for n, f in zip(names, files) if not f.exists()]
    if missing:
        raise ValueError(
            f"input {loc} is incomplete: {', '.join(missing[:3])} listed in state.json "
            f"{'is' if len(missing) == 1 else 'are'} missing; save the dataset again"
        )
    return files


def read_arrow(loc) -> pa.Table:
    """Worker: one Arrow IPC file (stream format, as ``save_to_disk`` writes; file format accepted)."""
    from pathlib import Path

    if isinstance(loc, Loc):
        with loc.open() as f:
            data = f.read_buffer()
    else:
        data = pa.memory_map(str(Path(loc)))
    try:
        return pa.ipc.open_stream(data).read_all()
    except pa.ArrowInvalid:
        return pa.ipc.open_file(data).read_all()


class RemoteOutput:
    """Output under a URI: refuse a non-empty prefix, write under a temporary prefix, commit marker-last."""

    def __init__(self, out: Loc, *, overwrite: bool) -> None:
        import pyarrow.fs as pafs

        self.out = out
        if out.exists() and not out.is_dir():
            raise ValueError(f"output {out} exists and is a file; pass a directory URI")
        found = out.fs.get_file_info(pafs.FileSelector(out.path, allow_not_found=True, recursive=False))
        if found:
            why = "overwrite is not supported for remote output" if overwrite else "it is not empty"
            raise ValueError(
                f"output {out}: {why} (packwise never deletes what it did not write); pass an empty or new prefix"
            )
        self.tmp = out.child(f"_packwise-tmp-{uuid.uuid4().hex[:12]}")
        self.moved: list[str] = []

    def start(self) -> Loc:
        """Create the temporary prefix the writers write into; returns it."""
        try:
            self.out.fs.create_dir(self.tmp.path, recursive=True)
        except (OSError, pa.ArrowException) as e:
            raise ValueError(f"output {self.out}: cannot write there ({e}); check the URI and credentials") from e
        return self.tmp

    def commit(self, names: list[str], metadata: str) -> None:
        fs = self.out.fs
        for name in names:
            dst = self.out.child(name).path
            fs.move(self.tmp.child(name).path, dst)
            self.moved.append(dst)
        self.cleanup_tmp()
        with fs.open_output_stream(self.out.child("metadata.json").path) as f:
            f.write(metadata.encode())

    def cleanup_tmp(self) -> None:
        with contextlib.suppress(OSError, pa.ArrowException):
            self.out.fs.delete_dir(self.tmp.path)

    def abort(self) -> None:
        self.cleanup_tmp()
        for path in self.moved:
            with contextlib.suppress(OSError, pa.ArrowException):
                self.out.fs.delete_file(path)
