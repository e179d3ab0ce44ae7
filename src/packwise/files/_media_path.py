"""The one path check of every media file a row names (images, audio, video): inside the media root."""

from __future__ import annotations

import os
from pathlib import Path

from ._read import BadRow


def resolve_media_path(
    path, *, base: Path | str | None, media_root: Path | str | None, where: str, field: str, kind: str = "media file"
) -> Path:
    """The absolute path of a media file (image, audio, video) named in a row, refused outside ``media_root``.

    Relative paths are relative to ``base`` (the input file's folder; None: the working directory). The
    resolved path — symbolic links followed, so a link inside the root that points outside is refused too —
    must lie inside ``media_root`` (None: no bound, for in-memory rows). Every media kind calls this function.

    Raises:
        BadRow: the path is not a non-empty string, leaves the media root, does not exist, or is a directory —
            naming the row, the field, the path and the fix (``--media-root`` / ``media_root=`` widens the root).

    Example:
        >>> import tempfile, pathlib
        >>> root = pathlib.Path(tempfile.mkdtemp()).resolve()
        >>> _ = (root / "a.png").write_bytes(b"")
        >>> resolve_media_path("a.png", base=root, media_root=root, where="row 0", field="images[0]") == root / "a.png"
        True
        >>> resolve_media_path("../x.png", base=root, media_root=root, where="row 0", field="images[0]")
        Traceback (most recent call last):
        ...
        packwise.files._read.BadRow: row 0: field 'images[0]' names media file ..., outside the media root ...
    """
    if not isinstance(path, str) or not path:
        raise BadRow(where, field, f"has a {kind} path {path!r}; expected a non-empty string")
    if "\x00" in path:
        raise BadRow(where, field, f"has a {kind} path {path!r} with a NUL character; no file has such a name")
    raw = Path(path)
    raw = raw if raw.is_absolute() else Path(base or Path.cwd()) / raw
    try:
        full = raw.resolve()
    except (RuntimeError, OSError) as e:  # a link loop
        raise BadRow(where, field, f"names {kind} {raw}, which cannot be followed ({e})", "remove the link") from e
    # through a symbolic link, or with ``..`` after one: named as the row gives it, then where it leads
    named = f"{path!r}, which resolves to {full}," if Path(os.path.normpath(raw)) != full else f"{full},"
    if media_root is not None:
        root = Path(media_root).resolve()
        if full != root and root not in full.parents:
            raise BadRow(
                where, field,
                f"names {kind} {named} outside the media root {root}; media files must be inside it",
                "move the file there or pass --media-root (media_root=) a folder that contains it",
            )  # fmt: skip
    if full.is_dir():
        raise BadRow(where, field, f"names {kind} {named} which is a directory, not a file", "name the file itself")
    if not full.is_file():
        raise BadRow(
            where, field, f"names {kind} {named} which does not exist (relative paths are relative to the input file)"
        )
    return full
