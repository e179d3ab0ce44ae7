"""``packwise inspect``: show one pack — documents, boundaries, loss tokens and padding."""

from __future__ import annotations

import json
from inspect import cleandoc
from pathlib import Path
from typing import Annotated

import typer

from ._console import out

EXAMPLES = """
Examples:

  packwise inspect packed --pack 0   # decoded with the dataset's tokenizer
  packwise inspect packed --pack 12 --max-tokens 40
  packwise inspect packed --pack 3 --ids --json   # ids, labels, loss flags
"""


def inspect(
    path: Annotated[Path, typer.Argument(metavar="PATH", help="Output directory of `packwise pack`.")],
    pack: Annotated[int, typer.Option("--pack", "-k", help="Pack index, 0-based.")] = 0,
    max_tokens: Annotated[int | None, typer.Option(help="Show at most this many tokens of each document.")] = None,
    tokenizer: Annotated[
        str | None, typer.Option(help="Decode with this tokenizer instead of the dataset's: qwen2.5 | smollm2 | PATH.")
    ] = None,
    ids: Annotated[bool, typer.Option("--ids", help="Show token ids instead of decoded text.")] = False,
    json_out: Annotated[bool, typer.Option("--json", help="Print the pack as JSON on stdout.")] = False,
) -> None:
    """Show one pack: its documents, boundaries, loss tokens and padding.

    Each document is numbered, with its source_index and length; tokens are decoded one by one with the dataset's tokenizer (or shown as ids); loss tokens (label != -100) are highlighted and their positions listed; the padding up to the capacity ends the pack.
    """
    from ..report import pack_view, render_pack

    view = pack_view(path, pack, tokenizer=tokenizer, ids=ids, max_tokens=max_tokens)
    if json_out:
        out.print_json(json.dumps(view))
    else:
        out.print(render_pack(view))


inspect.__doc__ = cleandoc(inspect.__doc__ or "") + "\n" + EXAMPLES
