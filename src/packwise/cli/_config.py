"""``packwise config show``: the resolved PackingConfig (derived alignment filled in)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Annotated

import typer

from ._console import out

app = typer.Typer(help="Inspect a PackingConfig.", no_args_is_help=True, add_completion=False)


@app.command()
def show(
    config: Annotated[
        Path | None, typer.Argument(help="A .yaml/.toml/.json PackingConfig; default: the defaults")
    ] = None,
    json_out: Annotated[bool, typer.Option("--json", help="Print JSON instead of YAML.")] = False,
) -> None:
    """Print the resolved configuration (every option, the derived alignment) or the rule it breaks."""
    from ..config import PackingConfig

    cfg = PackingConfig.from_file(config) if config else PackingConfig()
    resolved = cfg.resolved()
    if json_out:
        out.print_json(json.dumps(resolved))
        return
    import yaml

    out.print(yaml.safe_dump(resolved, sort_keys=False).rstrip(), highlight=False)
