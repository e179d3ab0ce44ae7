"""The ``packwise`` command line: a thin layer over the public Python API.

Exit codes: 0 success; 1 bad input, options or a failed check (message on stderr); 2 usage error.
"""

from __future__ import annotations

import sys
from typing import Annotated

import typer
from rich.markup import escape

from ._config import app as config_app
from ._console import err, out
from ._inspect import inspect
from ._pack import pack
from ._plan import plan
from ._report import report
from ._verify import verify

app = typer.Typer(
    name="packwise",
    help="Sequence packing for LLM/VLM SFT: plan, assemble, run, prove.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
)


def _version(value: bool) -> None:
    if value:
        from .. import __version__

        out.print(f"packwise {__version__}", highlight=False)
        raise typer.Exit(0)


@app.callback()
def _group(
    version: Annotated[
        bool, typer.Option("--version", callback=_version, is_eager=True, help="Print the version and exit.")
    ] = False,
) -> None:
    """Sequence packing for LLM/VLM SFT: plan, assemble, run, prove."""


app.command(epilog="Exit codes: 0 ok, 1 bad input/options, 2 usage.")(pack)
app.command(
    epilog="Exit codes: 0 every packwise path not refused is isolated, 1 a leak or bad options, 2 usage, "
    "3 every path refused (the reason is printed)."
)(verify)
app.command(epilog="Exit codes: 0 ok, 1 not a packed dataset or it was modified, 2 usage.")(report)
app.command(epilog="Exit codes: 0 ok, 1 bad path, pack out of range or tokenizer not loadable, 2 usage.")(inspect)
app.command(epilog="Exit codes: 0 ok, 1 bad lengths file or options, 2 usage.")(plan)
app.add_typer(config_app, name="config")


def _short(value, limit: int = 80) -> str:
    """``repr`` of a config value, cut to ``limit`` characters (containers are summarised, never expanded)."""
    if isinstance(value, (dict, list, tuple, set)):
        return f"<{type(value).__name__} of {len(value)} items>"
    text = repr(value)
    return text if len(text) <= limit else text[: limit - 3] + "..."


def _pydantic_error(x: dict) -> str:
    msg = str(x.get("msg", x)).removeprefix("Value error, ")
    if len(msg) > 500:
        msg = msg[:497] + "..."
    loc = ".".join(str(p) for p in x.get("loc", ()))
    return f"{loc}={_short(x.get('input'))}: {msg}" if loc else msg


def main(argv: list[str] | None = None) -> int:
    """Entry point of the ``packwise`` console script; returns the exit code."""
    try:
        rc = app(args=argv, standalone_mode=False)  # click returns typer.Exit's code here instead of raising
    except (ValueError, TypeError, OSError) as e:
        errors = getattr(e, "errors", None)
        if callable(errors) and type(e).__name__ == "ValidationError":  # pydantic: one line per broken rule
            message = "; ".join(_pydantic_error(x) for x in errors(include_url=False)[:10])
            err.print(f"[bold red]error:[/] invalid configuration: {escape(message)}", highlight=False, soft_wrap=True)
            return 1
        err.print(f"[bold red]error:[/] {escape(str(e))}", highlight=False, soft_wrap=True)
        return 1
    except typer.Exit as e:
        return e.exit_code
    except Exception as e:  # click usage errors (typer vendors its own click)
        if hasattr(e, "show") and hasattr(e, "exit_code"):
            e.show()
            return e.exit_code
        raise
    return rc if isinstance(rc, int) else 0


if __name__ == "__main__":
    sys.exit(main())


def run() -> None:
    """Console-script wrapper: exit with :func:`main`'s code."""
    sys.exit(main())
