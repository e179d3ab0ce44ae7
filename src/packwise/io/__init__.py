"""Input readers and the packed-dataset writer/loader (pyarrow)."""

from ._read import FORMATS, BadRow, Format, RawInput, detect_format, from_rows, read_input

__all__ = ["FORMATS", "BadRow", "Format", "RawInput", "detect_format", "from_rows", "read_input"]
