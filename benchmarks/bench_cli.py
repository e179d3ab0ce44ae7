"""CLI benchmark: ``packwise pack`` on the default data vs a bare ``encode_batch`` of the same texts, one run.

    python benchmarks/bench_cli.py [--json] [--quick] [--repeat 3] [--base-src DIR]

``packwise pack -o TMP --no-report`` (a fresh process each time: start-up, imports, tokenizer load, reading,
rendering, tokenizing, planning, writing) is timed interleaved with its floor measured in this process: the
4,018 chitchat conversations rendered with the tokenizer's chat template (the same jinja rendering packwise
uses) and encoded with ``tokenizers``' ``encode_batch`` (the tokenizer's own thread pool). Target: the CLI
≤ 1.5× the floor. ``--quick`` packs the first 500 conversations (a JSONL file) instead.

Every ``packwise pack`` process runs with its byte code cached (``PYTHONPYCACHEPREFIX`` in a temp folder, one
untimed warm-up run each on 20 conversations), as an installed package has it, whatever
``PYTHONDONTWRITEBYTECODE`` says in this environment.

``--base-src DIR`` (``src/`` of another revision, e.g. ``git archive main src | tar -x -C /tmp/main``) times
that revision's ``packwise pack`` too, interleaved with this one and the same floor (before/after in one
run), and checks that both write the same ``packs-00000-of-00001.parquet`` (SHA-256) in every run.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from _harness import Report, add_common, interleaved

#: CPU seconds (user + system, all threads) per repeat: a figure a busy machine moves less than wall time.
CPU: dict[str, list[float]] = {"encode_batch": [], "cli": [], "base cli": []}


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
    ap.add_argument("--base-src", help="src/ of another revision: its packwise pack is timed too (before/after)")
    args = ap.parse_args()
    from packwise.pipeline._demo import chitchat_conversations

    rep = Report("cli", args)
    chats = [list(c) for c in chitchat_conversations()]
    exe = [sys.executable, "-c", "from packwise.cli import run; run()"]
    with tempfile.TemporaryDirectory() as tmp:
        data = []
        if args.quick:  # the first 500 conversations as a JSONL file, for the CLI and the floor alike
            chats = chats[:500]
            path = Path(tmp) / "chats.jsonl"
            path.write_text("".join(json.dumps({"messages": c}) + "\n" for c in chats))
            data = [str(path)]
        render_and_encode, encode_only = floor_fn(chats)
        runs = iter(range(1_000))
        timings, outputs = {"cli": [], "base cli": []}, {"cli": [], "base cli": []}

        # Byte code cached as an installed package has it (pip compiles at install): without this, an environment
        # with PYTHONDONTWRITEBYTECODE=1 (this one) compiles every imported module in each run (~0.3 s).
        cached = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}
        cached["PYTHONPYCACHEPREFIX"] = str(Path(tmp) / "pycache")
        warm = Path(tmp) / "warm.jsonl"
        warm.write_text("".join(json.dumps({"messages": c}) + "\n" for c in chats[:20]))

        def cli(name="cli", src=None, inputs=None):
            out = Path(tmp) / f"out{next(runs)}"
            env = cached if src is None else {**cached, "PYTHONPATH": src}
            cpu = _child_cpu()
            proc = subprocess.run([*exe, "pack", *(data if inputs is None else inputs), "-o", str(out), "--no-report",
                                   "--json"], capture_output=True, text=True, env=env, check=False)  # fmt: skip
            if inputs is not None:  # the warm-up: byte code and packwise's caches written, not timed
                if proc.returncode:
                    sys.exit(f"packwise pack ({name}, warm-up) failed:\n{proc.stderr[-3000:]}")
                return None
            CPU[name].append(_child_cpu() - cpu)
            if proc.returncode:
                sys.exit(f"packwise pack ({name}) failed:\n{proc.stderr[-3000:]}")
            timings[name].append(json.loads(proc.stdout)["timings"])
            outputs[name].append(hashlib.sha256((out / "packs-00000-of-00001.parquet").read_bytes()).hexdigest()[:16])
            return timings[name][-1]

        fns = {"cli": cli, "render+encode": render_and_encode, "encode_batch": encode_only}
        if args.base_src:
            fns = {"base cli": lambda: cli("base cli", str(Path(args.base_src).resolve())), **fns}
        cli(inputs=[str(warm)])
        if args.base_src:
            cli("base cli", str(Path(args.base_src).resolve()), inputs=[str(warm)])
        t0 = time.perf_counter()
        t = interleaved(fns, args.repeat)
        rep.say(f"medians of {args.repeat} interleaved repeats ({time.perf_counter() - t0:.0f} s in all)")
    floor = t["encode_batch"]["median"]
    names = {
        "base cli": "packwise pack of --base-src (whole process)",
        "cli": "packwise pack (whole process)",
        "render+encode": "render (chat template) + encode_batch, in process",
    }
    for name, label in names.items():
        if name not in t:
            continue
        ratios = [a / b for a, b in zip(t[name]["runs"], t["encode_batch"]["runs"])]
        rep.figure(
            label,
            t[name]["median"],
            unit="s",
            baseline="bare encode_batch of the rendered texts s",
            baseline_value=floor,
            ratio=statistics.median(ratios),
            ratio_means="median of the per-repeat time / floor time (lower is better); spread: of those ratios",
            target="<= 1.5" if name == "cli" else None,
            spread=(min(ratios), max(ratios)),
        )
    for name in ("base cli", "cli"):
        if CPU[name]:
            ratios = [a / b for a, b in zip(CPU[name], CPU["encode_batch"])]
            rep.figure(
                f"{names[name].replace('(whole process)', 'CPU s (user + sys)')}",
                statistics.median(CPU[name]),
                unit="s",
                baseline="bare encode_batch CPU s (all threads)",
                baseline_value=statistics.median(CPU["encode_batch"]),
                ratio=statistics.median(ratios),
                ratio_means="median of the per-repeat CPU / floor CPU (less moved by a busy machine than wall time)",
                spread=(min(ratios), max(ratios)),
            )
    shas = sorted(set(outputs["cli"] + outputs["base cli"]))
    if args.base_src:
        rep.figure("same packs-00000-of-00001.parquet as --base-src in every run", float(len(shas) == 1), unit="",
                   target=">= 1")  # fmt: skip
    rep.note(f"SHA-256 of packs-00000-of-00001.parquet over all runs: {', '.join(shas)}")
    for name in ("base cli", "cli"):
        if timings[name]:
            last = timings[name][-1]
            rep.note(f"{name} own timings (last run, s): " + ", ".join(f"{k} {v:.2f}" for k, v in last.items()))
    rep.finish()


if __name__ == "__main__":
    main()
