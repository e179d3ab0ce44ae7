"""Generate docs/api.md from the docstrings of packwise's public names: ``python docs/gen_api.py``."""

from __future__ import annotations

import importlib
import inspect
import re
from pathlib import Path

MODULES = [
    "packwise",
    "packwise.plan",
    "packwise.pipeline",
    "packwise.files",
    "packwise.text",
    "packwise.assemble",
    "packwise.attention",
    "packwise.hf",
    "packwise.loss",
    "packwise.data",
    "packwise.stream",
    "packwise.report",
    "packwise.verify",
    "packwise.multimodal",
    "packwise.config",
    "packwise.integrations.energon",
    "packwise.integrations.ray",
]
ADDRESS = re.compile(r" at 0x[0-9a-f]+")


def _public(module) -> list[str]:
    names = getattr(module, "__all__", None)
    if names is None:
        names = [
            n
            for n, v in vars(module).items()
            if not n.startswith("_") and getattr(v, "__module__", "").startswith(module.__name__)
        ]
    return sorted(n for n in names if not n.startswith("__"))


def _signature(obj) -> str:
    try:
        return ADDRESS.sub("", str(inspect.signature(obj)))
    except (TypeError, ValueError):
        return ""


def _homes() -> dict[int, str]:
    """id(object) -> the dotted name it is documented under: its first facade in MODULES other than the top
    ``packwise`` (which re-exports a few names for convenience)."""
    homes: dict[int, str] = {}
    for name in [*MODULES[1:], MODULES[0]]:
        try:
            module = importlib.import_module(name)
        except ImportError:
            continue
        for attr in _public(module):
            homes.setdefault(id(getattr(module, attr, None)), f"{name}.{attr}")
    return homes


def render() -> str:
    out = [
        "# API reference",
        "",
        "Generated from the docstrings by `python docs/gen_api.py` (a test keeps it current). Each module lists",
        "its `__all__`, the user API; the other names a facade imports are for packwise's own layers.",
        "",
    ]
    homes = _homes()
    for name in MODULES:
        try:
            module = importlib.import_module(name)
        except ImportError as e:  # optional extra missing
            out += [f"## `{name}`", "", f"*(not importable here: {e})*", ""]
            continue
        doc = inspect.getdoc(module) or ""
        out += [f"## `{name}`", "", doc.split("\n\n")[0], ""]
        for attr in _public(module):
            obj = getattr(module, attr, None)
            if obj is None or not (inspect.isclass(obj) or inspect.isfunction(obj)):
                continue
            kind = "class" if inspect.isclass(obj) else "def"
            home = homes.get(id(obj), f"{name}.{attr}")
            if home != f"{name}.{attr}":
                out += [f"### `{kind} {attr}`", "", f"Re-exported: see `{home}`.", ""]
                continue
            out += [f"### `{kind} {attr}{_signature(obj)}`", ""]
            text = inspect.getdoc(obj) or "(no docstring)"
            out += [text, ""]
    return "\n".join(out).rstrip() + "\n"


if __name__ == "__main__":
    path = Path(__file__).with_name("api.md")
    path.write_text(render())
    print(f"wrote {path}")
