"""Architecture metrics of packwise: ``python docs/gen_arch_metrics.py [--no-run] [--json]``.

Prints, for ``src/packwise``:

- ``lines``: lines of Python source (all ``.py`` files, blank and comment lines included);
- ``module_cycles``: import cycles among packwise modules over every import that runs, those inside functions
  included (an import moved into a function to dodge a cycle is still the cycle; only ``if TYPE_CHECKING:``
  imports, which never run, are left out) — strongly connected components of more than one module;
- ``unit_cycles``: cycles among units (a unit is the first component under ``packwise``: ``plan``, ``io``,
  ``config``, ``_build`` …) over *all* imports, lazy ones included: a lazy import still is a dependency;
- ``private_reach_ins``: imports, lazy ones included, of a private module or name of another unit
  (``packwise.files._read`` or ``from packwise.plan import _x`` from outside ``io`` / ``plan``);
- ``upward_imports``: imports, lazy ones included, from a unit to a unit its layer may not depend on
  (:data:`ALLOWED`, the "depends on" column of ``docs/architecture.md``);
- ``lazy_third_party``: the packages other than packwise and the standard library imported inside a function
  (optional or heavy dependencies imported on first use: transformers, ray, av, matplotlib ...);
- ``public_names``: the union of the facades' ``__all__`` (every public module: no ``_`` in its dotted path,
  ``cli`` left out), counted once per object;
- ``doctested``: public names whose own docstring has a ``>>>`` example that runs (constants and type aliases
  count when a running example of their facade's module docstring names them).

The import graph is static (``ast``); the public names and doctests import the package. ``tests/test_architecture.py``
uses :func:`import_edges` and :data:`ALLOWED` to enforce the layer order.
"""

from __future__ import annotations

import ast
import doctest
import importlib
import inspect
import json
import sys
from dataclasses import dataclass
from pathlib import Path

SRC = Path(__file__).resolve().parents[1] / "src"
PACKAGE = "packwise"

#: unit -> the units it may import: the layer order of docs/architecture.md, bottom to top. ``constants`` and
#: ``packwise.__version__`` are leaves every unit may use; ``None``: any unit. A unit absent from a set is an
#: upward (or sideways) import.
_DATA_IN = {"plan", "files", "text", "multimodal"}
_TORCH = {"assemble", "attention", "loss", "stream"}
_BELOW_CONFIG = _DATA_IN | {"pipeline", "report"} | _TORCH | {"integrations", "hf", "data"}
ALLOWED: dict[str, set[str] | None] = {
    "constants": set(),
    "plan": set(),  # numpy only
    "files": {"plan"},  # pyarrow
    "text": {"plan", "files"},  # hf extra
    "multimodal": {"plan", "files", "text"},  # media -> tokens
    "pipeline": set(_DATA_IN),  # offline pipeline: numpy + pyarrow, no torch
    "report": _DATA_IN | {"pipeline"},
    "assemble": {"plan"},  # torch
    "attention": {"plan", "assemble"},
    "loss": {"plan", "assemble", "attention"},
    "stream": {"plan", "assemble", "pipeline"},  # pipeline: the one overflow implementation (numpy)
    "integrations": _DATA_IN | {"pipeline", "report"} | _TORCH,
    "hf": {"integrations"},  # facade
    "data": {"integrations"},  # facade
    "_config_files": set(),
    "config": _BELOW_CONFIG | {"_config_files", "_build"},
    "_build": set(_BELOW_CONFIG),  # the builders PackingConfig mixes in: config imports _build, not back
    "verify": _BELOW_CONFIG | {"config", "_build"},
    "__init__": {"plan", "pipeline", "config"},  # packwise/__init__.py: lazy top-level names
    "cli": None,  # everything (thin)
    "__main__": {"cli"},  # python -m packwise: the CLI's entry point, nothing else
    "_renamed": set(),  # old import paths of renamed modules (issue 17); imports nothing of packwise
}
LEAF = {"constants", "_renamed"}


@dataclass(frozen=True)
class Edge:
    """One import statement: ``src`` (dotted module) imports ``dst`` (dotted module, or ``module.name``)."""

    src: str
    dst: str
    line: int
    lazy: bool  # inside a function or under ``if TYPE_CHECKING:``
    private: bool  # a private module or name of a package the importer is not inside (a reach-in)
    name: str = ""  # the imported name when ``dst`` is not the module imported (``from dst import name``)
    type_only: bool = False  # under ``if TYPE_CHECKING:``: never runs


def unit(module: str) -> str:
    """``packwise.files._read`` -> ``io``; ``packwise`` (the top ``__init__``) -> ``__init__``."""
    parts = module.split(".")
    return parts[1] if len(parts) > 1 else "__init__"


def _modules(src: Path = SRC) -> dict[str, Path]:
    out = {}
    for path in sorted((src / PACKAGE).rglob("*.py")):
        rel = path.relative_to(src).with_suffix("")
        parts = list(rel.parts)
        if parts[-1] == "__init__":
            parts.pop()
        out[".".join(parts)] = path
    return out


def _is_private(dotted: str) -> bool:
    return any(p.startswith("_") and not p.startswith("__") for p in dotted.split(".")[1:])


def _reach_in(importer: str, dotted: str) -> bool:
    """True when ``dotted`` (a module, or ``module.name``) is private to a package ``importer`` is not inside:
    ``packwise.files._read`` is private to ``packwise.files``; ``packwise._build`` to ``packwise`` (every module
    of packwise may use it, Python's convention)."""
    parts = dotted.split(".")
    for i, p in enumerate(parts[1:], start=1):
        if p.startswith("_") and not p.startswith("__"):
            owner = ".".join(parts[:i])
            return not (importer + ".").startswith(owner + ".")
    return False


def _type_checking(node: ast.If) -> bool:
    t = node.test
    return (isinstance(t, ast.Name) and t.id == "TYPE_CHECKING") or (
        isinstance(t, ast.Attribute) and t.attr == "TYPE_CHECKING"
    )


def import_edges(src: Path = SRC) -> list[Edge]:
    """Every import of a packwise module by a packwise module (static, via ``ast``).

    ``from .x import name`` gives an edge to ``x.name`` when ``name`` is a submodule, else to ``x`` (plus
    ``private`` when ``name`` starts with ``_``). The implicit import of parent packages is not an edge.
    """
    modules = _modules(src)
    edges: list[Edge] = []
    for name, path in modules.items():
        is_pkg = path.name == "__init__.py"
        tree = ast.parse(path.read_text(), str(path))

        def visit(node: ast.AST, lazy: bool, typed: bool = False, name=name, is_pkg=is_pkg) -> None:
            for child in ast.iter_child_nodes(node):
                child_lazy = lazy or isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda))
                child_typed = typed
                if isinstance(child, ast.If) and _type_checking(child):
                    child_lazy = child_typed = True
                if isinstance(child, ast.Import):
                    for a in child.names:
                        if a.name == PACKAGE or a.name.startswith(PACKAGE + "."):
                            edges.append(Edge(name, a.name, child.lineno, lazy, _reach_in(name, a.name), "", typed))
                elif isinstance(child, ast.ImportFrom):
                    if child.level:
                        base = name.split(".") if is_pkg else name.split(".")[:-1]
                        base = base[: len(base) - (child.level - 1)]
                        target = ".".join(base + ([child.module] if child.module else []))
                    else:
                        target = child.module or ""
                    if target != PACKAGE and not target.startswith(PACKAGE + "."):
                        continue
                    for a in child.names:
                        sub = f"{target}.{a.name}"
                        if sub in modules:
                            edges.append(Edge(name, sub, child.lineno, lazy, _reach_in(name, sub), "", typed))
                        else:
                            edges.append(Edge(name, target, child.lineno, lazy, _reach_in(name, sub), a.name, typed))
                visit(child, child_lazy, child_typed)

        visit(tree, False)
    return edges


def _sccs(graph: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components of more than one node (Tarjan, iterative)."""
    index, low, on, stack, out, counter = {}, {}, set(), [], [], [0]
    for root in sorted(graph):
        if root in index:
            continue
        work = [(root, iter(sorted(graph.get(root, ()))))]
        index[root] = low[root] = counter[0]
        counter[0] += 1
        stack.append(root)
        on.add(root)
        while work:
            v, it = work[-1]
            for w in it:
                if w not in index:
                    index[w] = low[w] = counter[0]
                    counter[0] += 1
                    stack.append(w)
                    on.add(w)
                    work.append((w, iter(sorted(graph.get(w, ())))))
                    break
                if w in on:
                    low[v] = min(low[v], index[w])
            else:
                work.pop()
                if work:
                    low[work[-1][0]] = min(low[work[-1][0]], low[v])
                if low[v] == index[v]:
                    comp = []
                    while True:
                        w = stack.pop()
                        on.discard(w)
                        comp.append(w)
                        if w == v:
                            break
                    if len(comp) > 1:
                        out.append(sorted(comp))
    return sorted(out)


def module_cycles(edges: list[Edge]) -> list[list[str]]:
    """Import cycles among modules over every import that runs, inside functions included (``TYPE_CHECKING``
    imports left out; a package's ``__init__`` importing its own submodules is not an edge back from them)."""
    graph: dict[str, set[str]] = {}
    for e in edges:
        if not e.type_only and e.src != e.dst:
            graph.setdefault(e.src, set()).add(e.dst)
    return _sccs(graph)


def unit_cycles(edges: list[Edge]) -> list[list[str]]:
    """Cycles among units over every import, lazy ones included."""
    graph: dict[str, set[str]] = {}
    for e in edges:
        a, b = unit(e.src), unit(e.dst)
        if a != b and (e.dst, e.name) != (PACKAGE, "__version__"):
            graph.setdefault(a, set()).add(b)
    return _sccs(graph)


def lazy_third_party(src: Path = SRC) -> dict[str, list[str]]:
    """Packages (top-level names) other than packwise and the standard library imported inside a function or
    under ``if TYPE_CHECKING:``, each with the ``module:line`` places (sorted)."""
    found: dict[str, set[str]] = {}
    for name, path in _modules(src).items():
        tree = ast.parse(path.read_text(), str(path))

        def visit(node: ast.AST, lazy: bool, name=name) -> None:
            for child in ast.iter_child_nodes(node):
                child_lazy = lazy or isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda))
                child_lazy = child_lazy or (isinstance(child, ast.If) and _type_checking(child))
                mods = []
                if isinstance(child, ast.Import):
                    mods = [a.name for a in child.names]
                elif isinstance(child, ast.ImportFrom) and not child.level and child.module:
                    mods = [child.module]
                for m in mods:
                    top = m.split(".")[0]
                    if lazy and top != PACKAGE and top not in sys.stdlib_module_names:
                        found.setdefault(top, set()).add(f"{name}:{child.lineno}")
                visit(child, child_lazy)

        visit(tree, False)
    return {k: sorted(v) for k, v in sorted(found.items())}


def private_reach_ins(edges: list[Edge]) -> list[Edge]:
    """Import statements that reach into a private module or name of a package the importer is not inside,
    one per (statement, module): ``from ..io._read import a, b`` is one reach-in."""
    seen, out = set(), []
    for e in edges:
        if e.private and (e.src, e.line, e.dst) not in seen:
            seen.add((e.src, e.line, e.dst))
            out.append(e)
    return out


def upward_imports(edges: list[Edge]) -> list[Edge]:
    """Imports from a unit to one it may not depend on (:data:`ALLOWED`)."""
    seen, out = set(), []
    for e in edges:
        a, b = unit(e.src), unit(e.dst)
        allowed = ALLOWED.get(a, set())
        if a == b or b in LEAF or allowed is None or b in allowed or (e.dst, e.name) == (PACKAGE, "__version__"):
            continue
        if (e.src, e.line, e.dst) not in seen:
            seen.add((e.src, e.line, e.dst))
            out.append(e)
    return out


def lines_of_source(src: Path = SRC) -> int:
    return sum(len(p.read_text().splitlines()) for p in (src / PACKAGE).rglob("*.py"))


def public_modules(src: Path = SRC) -> list[str]:
    """Dotted names of public modules: no ``_`` component, not under ``cli``."""
    return [m for m in _modules(src) if not _is_private(m) and unit(m) != "cli"]


def public_names(src: Path = SRC) -> dict[str, tuple[str, object]]:
    """``home.name`` -> (facade module, object): the union of the public modules' ``__all__``, one entry per
    object (its first facade in sorted order names it). A public module without ``__all__`` contributes the
    classes and functions it defines (what ``docs/gen_api.py`` documents for it)."""
    seen: dict[int, str] = {}
    out: dict[str, tuple[str, object]] = {}
    for mod in sorted(public_modules(src), key=lambda m: (m.count("."), m)):
        try:
            module = importlib.import_module(mod)
        except ImportError:
            continue
        names = getattr(module, "__all__", None)
        if names is None:
            names = [
                n
                for n, v in vars(module).items()
                if not n.startswith("_") and getattr(v, "__module__", None) == module.__name__
            ]
        for attr in names:
            if attr.startswith("__"):
                continue
            obj = getattr(module, attr)
            key = id(obj) if (inspect.isclass(obj) or inspect.isroutine(obj)) else (mod, attr)
            if key in seen:
                continue
            seen[key] = f"{mod}.{attr}"
            out[f"{mod}.{attr}"] = (mod, obj)
    return out


def _examples(obj, name: str, globs: dict) -> list:
    """The object's own doctests that have at least one example not marked ``+SKIP``."""
    finder = doctest.DocTestFinder(recurse=False)
    tests = finder.find(obj, name, globs=dict(globs))
    return [t for t in tests if any(not e.options.get(doctest.SKIP) for e in t.examples)]


def _has_example(obj, name: str, globs: dict) -> bool:
    return bool(_examples(obj, name, globs))


def _runs(obj, name: str, globs: dict) -> bool | None:
    """True: the object's own doctest runs clean; False: it fails; None: it has none."""
    flags = doctest.ELLIPSIS | doctest.NORMALIZE_WHITESPACE
    tests = _examples(obj, name, globs)
    if not tests:  # no example, or every example skipped
        return None
    runner = doctest.DocTestRunner(optionflags=flags, verbose=False)
    for t in tests:
        runner.run(t, out=lambda _s: None)
    return runner.failures == 0


def doctest_coverage(names: dict[str, tuple[str, object]], *, run: bool = True) -> dict[str, bool | None]:
    """``home.name`` -> True (a running example), False (an example that fails, or none when not ``run``),
    None (no example)."""
    out: dict[str, bool | None] = {}
    module_ok: dict[str, bool | None] = {}
    for full, (mod, obj) in names.items():
        attr = full.rsplit(".", 1)[1]
        module = importlib.import_module(mod)
        if inspect.isclass(obj) or inspect.isroutine(obj):
            doc = inspect.getdoc(obj) or ""
            globs = vars(inspect.getmodule(obj) or module)
            out[full] = _runs(obj, full, globs) if run else (_has_example(obj, full, globs) or None)
            continue
        doc = module.__doc__ or ""
        examples = "\n".join(line for line in doc.splitlines() if line.strip().startswith((">>>", "...")))
        if attr not in examples:
            out[full] = None
            continue
        if mod not in module_ok:
            module_ok[mod] = _runs(module, mod, vars(module)) if run else True
        out[full] = module_ok[mod]
    return out


def measure(*, run: bool = True) -> dict:
    edges = import_edges()
    names = public_names()
    cov = doctest_coverage(names, run=run)
    return {
        "lines": lines_of_source(),
        "module_cycles": module_cycles(edges),
        "unit_cycles": unit_cycles(edges),
        "lazy_third_party": sorted(lazy_third_party()),
        "private_reach_ins": [f"{e.src}:{e.line} -> {e.dst}" for e in private_reach_ins(edges)],
        "upward_imports": [f"{e.src}:{e.line} -> {e.dst}" for e in upward_imports(edges)],
        "public_names": sorted(names),
        "doctested": sorted(k for k, v in cov.items() if v),
        "doctest_failing": sorted(k for k, v in cov.items() if v is False),
    }


def main(argv: list[str]) -> None:
    sys.path.insert(0, str(SRC))
    m = measure(run="--no-run" not in argv)
    if "--json" in argv:
        print(json.dumps(m, indent=1))
        return
    print(f"lines of src:            {m['lines']}")
    print(f"module import cycles:    {len(m['module_cycles'])}  {m['module_cycles']}")
    print(f"unit cycles (all imps):  {len(m['unit_cycles'])}  {m['unit_cycles']}")
    print(f"lazy third-party:        {len(m['lazy_third_party'])}  {m['lazy_third_party']}")
    print(f"private reach-ins:       {len(m['private_reach_ins'])}")
    for r in m["private_reach_ins"]:
        print(f"    {r}")
    print(f"upward-layer imports:    {len(m['upward_imports'])}")
    for r in m["upward_imports"]:
        print(f"    {r}")
    print(f"public names:            {len(m['public_names'])}")
    print(f"doctested (runs):        {len(m['doctested'])} of {len(m['public_names'])}")
    if m["doctest_failing"]:
        print(f"doctest failing:         {m['doctest_failing']}")
    if "-v" in argv:
        for n in m["public_names"]:
            print(f"    {'x' if n in m['doctested'] else ' '} {n}")


if __name__ == "__main__":
    main(sys.argv[1:])
