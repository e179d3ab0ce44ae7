"""CLI benchmark: ``packwise pack`` on the default data, report on and off, vs a bare ``encode_batch``, one run.

    python benchmarks/bench_cli.py [--json] [--quick] [--repeat 3] [--base-src DIR]

Two commands, each a fresh process (start-up, imports, tokenizer load, reading, rendering, tokenizing,
planning, writing), timed interleaved with each other and with their floor measured in this process:

* ``packwise pack -o TMP`` — the documented default: ``report.json``, ``report.md`` and the 4 PNG plots;
* ``packwise pack -o TMP --no-report`` — the packs and ``metadata.json`` only.

The floor: the 4,018 chitchat conversations rendered with the tokenizer's chat template (the same jinja
rendering packwise uses) and encoded with ``tokenizers``' ``encode_batch`` (its own thread pool). Targets: the
default command ≤ 1.5× the floor; the report's cost, default / ``--no-report`` of the same repeat, ≤ 1.15
(median of the per-pair ratios; issue 29). CPU seconds (user + sys of the child) are reported beside wall
time: a busy machine moves them less. ``--quick`` packs the first 500 conversations (a JSONL file) instead.

Every ``packwise pack`` process runs with its byte code cached (``PYTHONPYCACHEPREFIX`` in a temp folder, one
untimed warm-up run each on 20 conversations), as an installed package has it, whatever
``PYTHONDONTWRITEBYTECODE`` says in this environment.

``--base-src DIR`` (``src/`` of another revision, e.g. ``git archive main src | tar -x -C /tmp/main``) times
that revision's two commands too, interleaved with this one's and the same floor (before/after in one run),
and checks that both write the same ``packs-00000-of-00001.parquet`` (SHA-256) in every run.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from _harness import Report, add_common, interleaved

PNGS = ["report-fill.png", "report-lengths.png", "report-speedup.png", "report-tokens.png"]

#: The timed commands: (name, revision, extra flags); "base" ones run --base-src's src/.
COMMANDS = {
    "cli": ("this", []),
    "cli --no-report": ("this", ["--no-report"]),
    "base cli": ("base", []),
    "base cli --no-report": ("base", ["--no-report"]),
}
#: CPU seconds (user + system, all threads) per repeat: a figure a busy machine moves less than wall time.
CPU: dict[str, list[float]] = {"encode_batch": [], **{k: [] for k in COMMANDS}}
LOAD: list[float] = []  # 1-minute load average before each repeat


def _child_cpu() -> float:
    use = resource.getrusage(resource.RUSAGE_CHILDREN)
    return use.ru_utime + use.ru_stime


def floor_fn(chats):
    from packwise.text import load_tokenizer
    from packwise.text._chat import _render, _template_kwargs

    tok = load_tokenizer("qwen2.5")
    template, kwargs = tok.chat_template, _template_kwargs(tok)

    def render_and_encode() -> int:
        texts = _render(chats, template, kwargs, spans=False)
        return sum(len(e.ids) for e in tok.backend_tokenizer.encode_batch(texts, add_special_tokens=False))

    def encode_only(texts=_render(chats, template, kwargs, spans=False)) -> int:
        t = time.process_time()  # every thread of this process: the tokenizer's pool included
        n = sum(len(e.ids) for e in tok.backend_tokenizer.encode_batch(texts, add_special_tokens=False))
        CPU["encode_batch"].append(time.process_time() - t)
        return n

    return render_and_encode, encode_only


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    add_common(ap)
    ap.add_argument("--quick-rows", type=int, default=500, help="--quick: pack this many conversations")
    ap.add_argument("--base-src", help="src/ of another revision: its packwise pack is timed too (before/after)")
    args = ap.parse_args()
    from packwise.pipeline._demo import chitchat_conversations

    rep = Report("cli", args)
    chats = [list(c) for c in chitchat_conversations()]
    exe = [sys.executable, "-c", "from packwise.cli import run; run()"]
    with tempfile.TemporaryDirectory() as tmp:
        data = []
        if args.quick:  # the first 500 conversations as a JSONL file, for the CLI and the floor alike
            chats = chats[: args.quick_rows]
            path = Path(tmp) / "chats.jsonl"
            path.write_text("".join(json.dumps({"messages": c}) + "\n" for c in chats))
            data = [str(path)]
        render_and_encode, encode_only = floor_fn(chats)
        runs = iter(range(1_000))
        timings = {k: [] for k in COMMANDS}
        outputs: dict[str, list[str]] = {k: [] for k in COMMANDS}

        # Byte code cached as an installed package has it (pip compiles at install): without this, an environment
        # with PYTHONDONTWRITEBYTECODE=1 (this one) compiles every imported module in each run (~0.3 s).
        cached = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}
        cached["PYTHONPYCACHEPREFIX"] = str(Path(tmp) / "pycache")
        warm = Path(tmp) / "warm.jsonl"
        warm.write_text("".join(json.dumps({"messages": c}) + "\n" for c in chats[:20]))
        base_src = str(Path(args.base_src).resolve()) if args.base_src else None

        def cli(name: str, inputs=None):
            rev, flags = COMMANDS[name]
            out = Path(tmp) / f"out{next(runs)}"
            env = cached if rev == "this" else {**cached, "PYTHONPATH": base_src}
            cpu = _child_cpu()
            proc = subprocess.run([*exe, "pack", *(data if inputs is None else inputs), "-o", str(out), *flags,
                                   "--json"], capture_output=True, text=True, env=env, check=False)  # fmt: skip
            if proc.returncode:
                sys.exit(f"packwise pack ({name}) failed:\n{proc.stderr[-3000:]}")
            if inputs is not None:  # the warm-up: byte code and packwise's caches written, not timed
                return None
            CPU[name].append(_child_cpu() - cpu)
            result = json.loads(proc.stdout)
            want = [] if "--no-report" in flags else ["report.json", "report.md", *PNGS]
            got = sorted(Path(f).name for f in result.get("report_files", []))
            if got != sorted(want):
                sys.exit(f"packwise pack ({name}) wrote report files {got}, expected {sorted(want)}")
            timings[name].append(result["timings"])
            outputs[name].append(hashlib.sha256((out / "packs-00000-of-00001.parquet").read_bytes()).hexdigest()[:16])
            shutil.rmtree(out)
            return timings[name][-1]

        names = [k for k in COMMANDS if base_src or COMMANDS[k][0] == "this"]
        fns = {k: (lambda k=k: cli(k)) for k in names}
        fns |= {"render+encode": render_and_encode, "encode_batch": encode_only}
        for name in names:
            cli(name, inputs=[str(warm)])
        t0 = time.perf_counter()
        t = interleaved(fns, args.repeat, before=lambda: LOAD.append(round(os.getloadavg()[0], 2)))
        rep.say(f"medians of {args.repeat} interleaved repeats ({time.perf_counter() - t0:.0f} s in all)")
    load = f"load {min(LOAD):.1f}–{max(LOAD):.1f}"
    labels = {
        "base cli": "--base-src: packwise pack, default (report on), whole process",
        "base cli --no-report": "--base-src: packwise pack --no-report, whole process",
        "cli": "packwise pack, default (report on), whole process",
        "cli --no-report": "packwise pack --no-report, whole process",
        "render+encode": "render (chat template) + encode_batch, in process",
    }
    for name, label in labels.items():
        if name not in t:
            continue
        ratios = [a / b for a, b in zip(t[name]["runs"], t["encode_batch"]["runs"])]
        rep.figure(
            f"{label} ({load})",
            t[name]["median"],
            unit="s",
            baseline="bare encode_batch of the rendered texts s",
            baseline_value=t["encode_batch"]["median"],
            ratio=statistics.median(ratios),
            ratio_means="median of the per-repeat time / floor time (lower is better); spread: of those ratios",
            target="<= 1.5" if name == "cli" else None,
            spread=(min(ratios), max(ratios)),
        )
    for prefix in ("base ", ""):
        on, off = f"{prefix}cli", f"{prefix}cli --no-report"
        if on not in t:
            continue
        for what, a_runs, b_runs in (("wall", t[on]["runs"], t[off]["runs"]), ("CPU", CPU[on], CPU[off])):
            ratios = [a / b for a, b in zip(a_runs, b_runs)]
            rep.figure(
                f"{'--base-src: ' if prefix else ''}the report's cost, {what}: default / --no-report ({load})",
                statistics.median(a_runs),
                unit="s",
                baseline=f"--no-report {what} s",
                baseline_value=statistics.median(b_runs),
                ratio=statistics.median(ratios),
                ratio_means="median of the per-pair ratios (same repeat); spread: of those ratios",
                target="<= 1.15" if not prefix and what == "wall" else None,
                spread=(min(ratios), max(ratios)),
            )
    for name in names:
        ratios = [a / b for a, b in zip(CPU[name], CPU["encode_batch"])]
        rep.figure(
            f"{labels[name].replace('whole process', 'CPU s (user + sys)')}",
            statistics.median(CPU[name]),
            unit="s",
            baseline="bare encode_batch CPU s (all threads)",
            baseline_value=statistics.median(CPU["encode_batch"]),
            ratio=statistics.median(ratios),
            ratio_means="median of the per-repeat CPU / floor CPU (less moved by a busy machine than wall time)",
            spread=(min(ratios), max(ratios)),
        )
    shas = sorted({h for v in outputs.values() for h in v})
    rep.figure("the same packs-00000-of-00001.parquet in every run and command", float(len(shas) == 1), unit="",
               target=">= 1")  # fmt: skip
    rep.note(f"SHA-256 of packs-00000-of-00001.parquet over all runs: {', '.join(shas)}; 1-minute load before each "
             f"repeat: {LOAD}")  # fmt: skip
    for name in names:
        last = timings[name][-1]
        rep.note(f"{name} own timings (last run, s): " + ", ".join(f"{k} {v:.2f}" for k, v in last.items()))
    rep.finish()


if __name__ == "__main__":
    main()
