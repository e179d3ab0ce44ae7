"""Every Python example in README.md and docs/*.md runs (blocks on one page share a namespace)."""

from __future__ import annotations

import importlib.util
import os
import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
BLOCK = re.compile(r"```python\n(.*?)```", re.S)
NEEDS = re.compile(r"# docs: needs ([\w.-]+)")


def blocks(page: Path) -> list[str]:
    return BLOCK.findall(page.read_text())


@pytest.mark.parametrize("page", [p for p in PAGES if blocks(p)], ids=lambda p: p.name)
def test_page_examples_run(page, tmp_path, monkeypatch):
    import sys
    import types

    monkeypatch.chdir(tmp_path)
    module = types.ModuleType(f"docs_{page.stem.replace('-', '_')}")
    monkeypatch.setitem(sys.modules, module.__name__, module)  # dataclasses defined in examples need it
    namespace = module.__dict__
    for i, code in enumerate(blocks(page)):
        for need in NEEDS.findall(code):
            needed = need.replace("-", "_").replace("megatron_energon", "megatron.energon")
            if _missing(needed):
                pytest.skip(f"{page.name} block {i} needs {need}")
        exec(compile(code, f"{page.name}[block {i}]", "exec"), namespace)


def _missing(module: str) -> bool:
    """True when ``module`` (dotted: ``megatron.energon``) cannot be imported; the parent may be absent too."""
    try:
        return importlib.util.find_spec(module) is None
    except ModuleNotFoundError:
        return True


def test_api_reference_is_current():
    from docs_api import render  # docs/gen_api.py, imported below

    assert (ROOT / "docs" / "api.md").read_text() == render(), "docs/api.md is stale: python docs/gen_api.py"


@pytest.fixture(autouse=True, scope="module")
def _docs_on_path():
    import sys

    sys.path.insert(0, str(ROOT / "docs"))
    spec = importlib.util.spec_from_file_location("docs_api", ROOT / "docs" / "gen_api.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    sys.modules["docs_api"] = module
    had = os.environ.get("TOKENIZERS_PARALLELISM")
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
    yield
    if had is None:  # leave the environment as found: later tests on this worker read it
        os.environ.pop("TOKENIZERS_PARALLELISM", None)
