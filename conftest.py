"""Root conftest: skip doctest collection of modules whose optional dependency is not installed.

``make test`` installs every extra, so nothing is skipped there; a partial install (``pip install -e .[torch]``)
still collects and runs the rest instead of failing on ``import megatron.energon``.
"""

from __future__ import annotations

import importlib.util
import os

# pytest-xdist exports COLUMNS (the controller's terminal width, 80 when piped) to its workers; packwise's CLI
# takes an explicit COLUMNS as the user's choice of width, so under `make test` (-n auto) its piped output would
# wrap at 80 columns instead of the 140 it uses for pipes, unlike a serial run.
if os.environ.get("PYTEST_XDIST_WORKER"):
    os.environ.pop("COLUMNS", None)


def _missing(module: str) -> bool:
    try:
        return importlib.util.find_spec(module) is None
    except ModuleNotFoundError:
        return True


_OPTIONAL = {
    "src/packwise/integrations/energon/*": "megatron.energon",
    "src/packwise/integrations/ray/*": "ray",
    "src/packwise/assemble/_megatron.py": "megatron.core",
    "src/packwise/integrations/hf/*": "transformers",  # PackingRefused's example refuses a tiny model
    "src/packwise/verify/*": "transformers",
    "src/packwise/multimodal/*": "transformers",
    "src/packwise/text/*": "transformers",
    "src/packwise/report/_plots.py": "matplotlib",
    "src/packwise/config.py": "pydantic",
}
_TORCH = ["src/packwise/assemble/*", "src/packwise/attention/*", "src/packwise/loss.py", "src/packwise/stream/*",
          "src/packwise/integrations/*", "src/packwise/integrations/*/*", "src/packwise/verify/*", "src/packwise/multimodal/*"]  # fmt: skip

collect_ignore_glob = [path for path, module in _OPTIONAL.items() if _missing(module)]
if _missing("torch"):
    collect_ignore_glob += _TORCH
