"""Input readers and the packed-dataset writer/loader (pyarrow)."""

from ._read import FORMATS, BadRow, Format, RawInput, detect_format, from_rows, read_input
from ._write import load_packed, read_metadata, write_packed

__all__ = [
    "FORMATS",
    "BadRow",
    "Format",
    "RawInput",
    "detect_format",
    "from_rows",
    "load_packed",
    "read_input",
    "read_metadata",
    "write_packed",
]
