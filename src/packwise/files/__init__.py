"""Input readers and the packed-dataset writer/loader (pyarrow).

``__all__`` is the user API. The other names imported here (marked ``noqa: F401``) are the layer API: what
the pipeline, report, the integrations and the CLI import from this facade instead of its private modules.
"""

from ._lines import DuplicateKeyError, loads_unique  # noqa: F401
from ._listing import check_shard_set, listed_data_files  # noqa: F401
from ._manifest import check_replaceable  # noqa: F401
from ._media_path import resolve_media_path  # noqa: F401
from ._output import OutputDir, claim_output, register_files  # noqa: F401
from ._owned import SPILL_DIR, pid_alive  # noqa: F401
from ._read import (  # noqa: F401
    FORMATS,
    SKIP_HINT,
    BadRow,
    Format,
    Kind,
    RawInput,
    check_input_path,
    check_jsonl_file,
    detect_format,
    detect_kind,
    from_rows,
    hf_dataset_files,
    input_digest,
    jsonl_lines,
    parquet_files,
    parse_line,
    read_input,
    without_fields,
)
from ._token_cells import cell_values, is_nested_numeric, nested_values, token_lists, trailing_shape  # noqa: F401
from ._write import (  # noqa: F401
    FORMAT,
    METADATA,
    ROW_GROUP_PACKS,
    check_checksum,
    check_column_types,
    load_packed,
    metadata_text,
    packed_files,
    read_metadata,
    sha256_file,
    shard_name,
    shard_records,
    write_metadata,
    write_packed,
    write_shard,
)

__all__ = ["load_packed", "read_metadata"]
