"""``packwise pack``: the main job."""

from __future__ import annotations

import inspect
import json
import time
from contextlib import nullcontext
from pathlib import Path
from typing import Annotated

import typer
from rich.markup import escape

from ._console import err, out, progress_bars, report_table

EXAMPLES = """
Examples:

  packwise pack                        # the 4,018 chitchat chats -> ./packed

  packwise pack data.jsonl -o out --capacity 8192 --overflow split

  packwise pack data.parquet -o out --tokenizer ./tok --algorithm mffd

  packwise pack data.jsonl -o out --engine ray --num-cpus 8   # same packs and files, on Ray workers

  packwise pack "s3://bkt/data.jsonl" -o "s3://bkt/packed/" --engine ray --ray-address auto \\
      --runtime-env '{"pip": ["packwise\\[hf]"]}'
"""


def pack(
    ctx: typer.Context,
    input_path: Annotated[
        str | None,
        typer.Argument(
            metavar="INPUT",
            help="JSONL, Parquet, or saved HF dataset dir (--engine ray: or a URI, s3://...); default: chitchat",
        ),
    ] = None,
    output: Annotated[
        str,
        typer.Option(
            "--output",
            "-o",
            help="Output directory (must be empty unless --overwrite; written in place, locked). --engine ray: or "
            "an empty or new URI prefix (s3://bucket/out/).",
        ),
    ] = "packed",
    capacity: Annotated[int, typer.Option(help="Tokens per pack.")] = 4096,
    algorithm: Annotated[
        str, typer.Option(help="Packing algorithm or alias (bfd, ffd, mffd, ffs, ...).")
    ] = "best_fit_decreasing",
    seed: Annotated[int | None, typer.Option(help="Seed for randomised algorithms (ffs).")] = None,
    overflow: Annotated[str, typer.Option(help="Samples over capacity: truncate | split | drop | error.")] = "truncate",
    tokenizer: Annotated[
        str | None, typer.Option(help="qwen2.5 (default for text) | smollm2 | local dir | .gguf")
    ] = None,
    chat_template: Annotated[str | None, typer.Option(help="chatml | a .jinja file | default: the tokenizer's")] = None,
    loss_on: Annotated[str, typer.Option(help="assistant (default) | all.")] = "assistant",
    input_format: Annotated[
        str | None, typer.Option("--format", help="jsonl | parquet | hf (default: from the path).")
    ] = None,
    skip_bad_rows: Annotated[bool, typer.Option(help="Skip and count malformed rows instead of failing.")] = False,
    drop_fields: Annotated[
        list[str] | None,
        typer.Option("--drop-field", help="Drop this top-level field from every row (repeatable; counted)."),
    ] = None,
    max_sequences_per_pack: Annotated[int | None, typer.Option(help="At most this many sequences per pack.")] = None,
    min_packs: Annotated[int | None, typer.Option(help="At least this many packs (split the fullest).")] = None,
    pack_count_multiple: Annotated[int | None, typer.Option(help="Pack count a multiple of this (DP ranks).")] = None,
    alignment: Annotated[int | None, typer.Option(help="Plan each sequence at a multiple of this (CP/TP/FP8).")] = None,
    config: Annotated[
        Path | None, typer.Option(help="A PackingConfig file (.yaml/.toml/.json); flags override it.")
    ] = None,
    min_pixels: Annotated[int, typer.Option(help="Images: smallest area after resizing (Qwen2-VL).")] = 56 * 56,
    max_pixels: Annotated[int, typer.Option(help="Images: largest area after resizing (Qwen2-VL).")] = 28 * 28 * 16384,
    media_root: Annotated[
        str | None,
        typer.Option(
            help="Images must be inside this folder; relative paths are relative to it (default: INPUT's folder)."
        ),
    ] = None,
    packs_per_shard: Annotated[int, typer.Option(help="Packs per Parquet shard.")] = 10_000,
    write_report_files: Annotated[
        bool,
        typer.Option("--report/--no-report", help="Write report.json, report.md and report-*.png next to the data."),
    ] = True,
    overwrite: Annotated[
        bool, typer.Option(help="Replace the files an earlier packwise run wrote there (refuses if others exist).")
    ] = False,
    engine: Annotated[
        str,
        typer.Option(
            help="local (this process) | ray (Ray Data + Ray tasks, local or on a cluster; same packs and files; needs packwise\\[ray])."
        ),
    ] = "local",
    ray_address: Annotated[
        str | None,
        typer.Option(
            help="--engine ray: connect to this cluster (auto, ray://HEAD:10001); default: start a local Ray."
        ),
    ] = None,
    num_cpus: Annotated[
        int | None, typer.Option(help="--engine ray: CPUs of the local Ray instance (default: all).")
    ] = None,
    num_proc: Annotated[
        int | None,
        typer.Option(help="Tokenizer threads (the Rust tokenizer's own pool; default: every core)."),
    ] = None,
    runtime_env: Annotated[
        str | None,
        typer.Option(
            help="--engine ray: Ray runtime_env as JSON text or a .json file, e.g. "
            '\'{"py_modules": ["/path/to/packwise"], "pip": ["transformers"]}\' so nodes need only Ray.'
        ),
    ] = None,
    json_out: Annotated[bool, typer.Option("--json", help="Print the report as JSON on stdout.")] = False,
    quiet: Annotated[bool, typer.Option("--quiet", "-q", help="No progress bars or table.")] = False,
) -> None:
    """Tokenize, plan and write packed, training-ready Parquet with exact token accounting."""
    from ..config import PackingConfig
    from ..files import OutputDir, check_input_path
    from ..pipeline import chitchat_input, pack_columns, write_packs
    from ..report import plot_dependency_error, write_report

    if num_proc is not None:
        _tokenizer_threads(num_proc)
    if packs_per_shard < 1:
        raise ValueError(f"--packs-per-shard must be >= 1, got {packs_per_shard}")
    if engine not in ("local", "ray"):
        raise ValueError(f"--engine {engine!r}: use local or ray")
    if engine == "local" and (ray_address is not None or num_cpus is not None or runtime_env is not None):
        raise ValueError(
            "--ray-address, --num-cpus and --runtime-env apply to --engine ray; add --engine ray or drop them"
        )
    remote_in, remote_out = _is_uri(input_path), _is_uri(output)
    if engine == "local" and (remote_in or remote_out):
        where = input_path if remote_in else output
        raise ValueError(f"{where}: URIs (s3://... or any pyarrow filesystem) need --engine ray; add it")
    env = _runtime_env(runtime_env)
    given = {k: v for k, v in ctx.params.items() if _from_command_line(ctx, k)}
    options = {k: given[k] for k in CONFIG_FLAGS if k in given} if config else {k: ctx.params[k] for k in CONFIG_FLAGS}
    for key in ("min_pixels", "max_pixels", "media_root"):
        if key in options:
            options.setdefault("multimodal", {})[key] = options.pop(key)
    if config:
        cfg = PackingConfig.from_file(config, **options)
    else:
        cfg = PackingConfig(**{k: v for k, v in options.items() if v is not None or k in ("seed",)})
    if config and (unapplied := cfg.pack_unapplied()):  # every key pack reads is applied or refused
        raise ValueError(
            f"--config {config}: {', '.join(unapplied)} configure(s) the loaders and collators that read the packs, "
            "not packwise pack (it writes unshifted HF packs of at most --capacity tokens); remove them from the "
            "file you pass to pack, and give them to the loader (PackingConfig(...).collator() / .loader())"
        )
    if input_path is not None and not remote_in:
        check_input_path(input_path)  # before the output is created: a refused input leaves nothing behind
    if remote_out:  # pack_ray checks the prefix is empty and commits it marker-last (integrations/_ray_fs.py)
        dest = nullcontext()
    else:
        inputs = () if input_path is None or remote_in else (input_path,)
        dest = OutputDir(output, overwrite=overwrite, inputs=inputs)
    data = chitchat_input if input_path is None else input_path
    with dest, progress_bars(quiet or json_out) as progress:  # locked and checked before the work
        for note in [] if remote_out else dest.notes:
            err.print(f"[yellow]note:[/] {escape(note)}", highlight=False, soft_wrap=True)
        if engine == "ray":
            from ..integrations.ray import pack_ray

            report = pack_ray(
                chitchat_input() if input_path is None else input_path, output if remote_out else dest,
                **cfg.pipeline_kwargs(), format=input_format, packs_per_shard=packs_per_shard, overwrite=overwrite,
                num_cpus=num_cpus, ray_address=ray_address, runtime_env=env,
            )  # fmt: skip
        else:
            packed, report = pack_columns(data, **cfg.pipeline_kwargs(), format=input_format, progress=progress)
            write_packs(packed, report, dest, packs_per_shard=packs_per_shard, overwrite=overwrite, progress=progress)
        report_files = []
        if write_report_files and remote_out:
            err.print(f"[yellow]note:[/] report files are written to a local -o only; {escape(output)}/metadata.json "
                      "holds the report", highlight=False, soft_wrap=True)  # fmt: skip
        elif write_report_files:
            t = time.perf_counter()
            advance = progress("report", 1) if progress else None  # plots take a second or more
            report_files = write_report(dest.staging(), report)
            if advance:
                advance(1)
            report.timings["report"] = time.perf_counter() - t
        if not remote_out:
            dest.commit()
        report_files = [Path(output) / f.name for f in report_files]
    if json_out:
        files = [str(f) for f in report_files]
        out.print_json(json.dumps({**report.to_dict(), "output": str(output), "report_files": files}))
    elif not quiet:
        out.print(report_table(report, str(output)))
        if report_files:
            n_plots = len(report_files) - 2
            out.print(f"[bold cyan]report[/]           {report_files[1]} ({n_plots} plots)", highlight=False)
    if report_files and not (quiet or json_out) and (why := plot_dependency_error()):
        err.print(f"[yellow]plots skipped:[/] {escape(why)}", highlight=False, soft_wrap=True)
    for msg in report.skipped_examples:
        err.print(f"[yellow]skipped:[/] {escape(msg)}", highlight=False, soft_wrap=True)


#: CLI flags that are PackingConfig fields (flags given on the command line override a --config file).
CONFIG_FLAGS = (
    "capacity", "algorithm", "seed", "overflow", "tokenizer", "chat_template", "loss_on", "skip_bad_rows",
    "max_sequences_per_pack", "min_packs", "pack_count_multiple", "alignment", "min_pixels", "max_pixels",
    "media_root", "drop_fields",
)  # fmt: skip


def _tokenizer_threads(n: int) -> None:
    """Size the tokenizer's thread pool (Rayon reads ``RAYON_NUM_THREADS`` when it first starts)."""
    import os

    limit = max(64, 4 * (os.cpu_count() or 1))
    if not 1 <= n <= limit:  # thousands of threads only thrash (a break tester's 100000 never finished)
        raise ValueError(
            f"--num-proc must be in [1, {limit}] (tokenizer threads; this machine has {os.cpu_count()} cores), got {n}"
        )
    if os.environ.get("TOKENIZERS_PARALLELISM", "").lower() in ("0", "false", "no", "off"):
        raise ValueError("--num-proc needs the tokenizer's threads, but TOKENIZERS_PARALLELISM disables them; unset it")
    os.environ["RAYON_NUM_THREADS"] = str(n)


def _is_uri(path: str | None) -> bool:
    """``scheme://...`` other than ``file://``: read and written through pyarrow's filesystems (Ray engine)."""
    return path is not None and "://" in path and not path.startswith("file://")


def _runtime_env(text: str | None) -> dict | None:
    """``--runtime-env``: JSON text or a JSON file holding one object (text starting with ``{`` or ``[`` is JSON
    text; other text names a file when one exists, else is read as JSON text if it parses)."""
    if text is None:
        return None
    from ..files import loads_unique

    source = "--runtime-env"
    if not text.lstrip().startswith(("{", "[")) and Path(text).is_file():
        source, text = f"--runtime-env {text}", Path(text).read_text()
    elif not text.lstrip().startswith(("{", "[")):
        try:
            json.loads(text)
        except ValueError:
            raise ValueError(f"--runtime-env {text}: neither JSON text (starting with '{{') nor a JSON file") from None
    try:
        env = loads_unique(text)
    except ValueError as e:
        raise ValueError(f"{source}: not valid JSON ({e})") from None
    if not isinstance(env, dict):
        raise ValueError(f"{source}: must be a JSON object (Ray's runtime_env), got {type(env).__name__}")
    return env


def _from_command_line(ctx: typer.Context, name: str) -> bool:
    source = ctx.get_parameter_source(name)
    return source is not None and source.name == "COMMANDLINE"


pack.__doc__ = inspect.cleandoc(pack.__doc__ or "") + "\n" + EXAMPLES
