"""``packwise pack``: the main job."""

from __future__ import annotations

import inspect
import json
import os
import time
from contextlib import nullcontext
from pathlib import Path
from typing import Annotated

import typer
from rich.markup import escape

from ..config import PackingConfig
from ..constants import MediaFamily
from ..files import Format, OutputDir, check_input_path, loads_unique
from ..pipeline import Overflow, PackReport, chitchat_input, pack_columns, write_packs
from ..report import plot_dependency_error, preload, write_report
from ..text import LossOn
from ._console import err, out, progress_bars, report_table
from ._options import ALGORITHM_HELP, DEFAULTS, MULTIMODAL_FLAGS, Engine

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
    capacity: Annotated[int, typer.Option(help="Tokens per pack.")] = DEFAULTS["capacity"],
    algorithm: Annotated[str, typer.Option(help=ALGORITHM_HELP)] = DEFAULTS["algorithm"],
    seed: Annotated[int | None, typer.Option(help="Seed for randomised algorithms (ffs).")] = DEFAULTS["seed"],
    overflow: Annotated[Overflow, typer.Option(help="Samples over capacity.")] = DEFAULTS["overflow"],
    tokenizer: Annotated[
        str | None, typer.Option(help="qwen2.5 (default for text) | smollm2 | local dir | .gguf")
    ] = DEFAULTS["tokenizer"],
    chat_template: Annotated[
        str | None, typer.Option(help="chatml | a .jinja file | default: the tokenizer's")
    ] = DEFAULTS["chat_template"],
    loss_on: Annotated[LossOn, typer.Option(help="Tokens that carry loss.")] = DEFAULTS["loss_on"],
    input_format: Annotated[
        Format | None, typer.Option("--format", help="Input format (default: from the path).")
    ] = None,
    skip_bad_rows: Annotated[bool, typer.Option(help="Skip and count malformed rows instead of failing.")] = DEFAULTS[
        "skip_bad_rows"
    ],
    drop_fields: Annotated[
        list[str] | None,
        typer.Option("--drop-field", help="Drop this top-level field from every row (repeatable; counted)."),
    ] = DEFAULTS["drop_fields"],
    max_sequences_per_pack: Annotated[
        int | None, typer.Option(help="At most this many sequences per pack.")
    ] = DEFAULTS["max_sequences_per_pack"],
    max_segments: Annotated[
        int | None, typer.Option(help="Static shapes (torch.compile): at most this many documents per pack.")
    ] = DEFAULTS["max_segments"],
    min_packs: Annotated[int | None, typer.Option(help="At least this many packs (split the fullest).")] = DEFAULTS[
        "min_packs"
    ],
    pack_count_multiple: Annotated[
        int | None, typer.Option(help="Pack count a multiple of this (DP ranks).")
    ] = DEFAULTS["pack_count_multiple"],
    alignment: Annotated[
        int | None, typer.Option(help="Plan each sequence at a multiple of this (CP/TP/FP8).")
    ] = DEFAULTS["alignment"],
    config: Annotated[
        Path | None, typer.Option(help="A PackingConfig file (.yaml/.toml/.json); flags override it.")
    ] = None,
    min_pixels: Annotated[int, typer.Option(help="Images: smallest area after resizing (Qwen2-VL).")] = DEFAULTS[
        "min_pixels"
    ],
    max_pixels: Annotated[int, typer.Option(help="Images: largest area after resizing (Qwen2-VL).")] = DEFAULTS[
        "max_pixels"
    ],
    media_root: Annotated[
        str | None,
        typer.Option(
            help="Images must be inside this folder; relative paths are relative to it (default: INPUT's folder)."
        ),
    ] = DEFAULTS["media_root"],
    media_family: Annotated[
        MediaFamily,
        typer.Option(help="Media encoding of the model family (Qwen2.5-VL/Omni or Nemotron-Omni images + audio)."),
    ] = DEFAULTS["media_family"],
    packs_per_shard: Annotated[int, typer.Option(help="Packs per Parquet shard.")] = 10_000,
    write_report_files: Annotated[
        bool,
        typer.Option("--report/--no-report", help="Write report.json, report.md and report-*.png next to the data."),
    ] = True,
    overwrite: Annotated[
        bool, typer.Option(help="Replace the files an earlier packwise run wrote there (refuses if others exist).")
    ] = False,
    engine: Annotated[
        Engine,
        typer.Option(
            help="local: this process; ray: Ray Data + Ray tasks, local or on a cluster (same packs and files; "
            "needs packwise\\[ray])."
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
    _check_options(input_path, output, engine=engine, packs_per_shard=packs_per_shard, num_proc=num_proc,
                   ray_address=ray_address, num_cpus=num_cpus, runtime_env=runtime_env)  # fmt: skip
    env = _runtime_env(runtime_env)
    cfg = _packing_config(ctx, config)
    dest = _destination(input_path, output, overwrite=overwrite)  # before the work: a refused input leaves nothing
    with dest if dest is not None else nullcontext(), progress_bars(quiet or json_out) as progress:
        for note in dest.notes if dest is not None else []:  # locked and checked before the work
            err.print(f"[yellow]note:[/] {escape(note)}", highlight=False, soft_wrap=True)
        if write_report_files and dest is not None:
            preload()  # matplotlib imports on a thread while the tokenizer runs (issue 29: the report's cost)
        if engine == "ray":
            report = _pack_on_ray(input_path, output if dest is None else dest, cfg, input_format=input_format,
                                  packs_per_shard=packs_per_shard, overwrite=overwrite, num_cpus=num_cpus,
                                  ray_address=ray_address, runtime_env=env)  # fmt: skip
        else:
            assert dest is not None, "step 1 refuses a URI -o without --engine ray"
            report = _pack_here(input_path, dest, cfg, input_format=input_format, packs_per_shard=packs_per_shard,
                                overwrite=overwrite, progress=progress)  # fmt: skip
        report_files = _report_files(dest, output, report, write=write_report_files, progress=progress)
        if dest is not None:
            dest.commit()
    _print_result(report, output, report_files, json_out=json_out, quiet=quiet)


def _check_options(
    input_path: str | None, output: str, *, engine: Engine, packs_per_shard: int, num_proc: int | None,
    ray_address: str | None, num_cpus: int | None, runtime_env: str | None,
) -> None:  # fmt: skip
    """Step 1: the options that no config checks, refused before anything is read or created."""
    if num_proc is not None:
        _tokenizer_threads(num_proc)
    if packs_per_shard < 1:
        raise ValueError(f"--packs-per-shard must be >= 1, got {packs_per_shard}")
    if engine == "local" and (ray_address is not None or num_cpus is not None or runtime_env is not None):
        raise ValueError(
            "--ray-address, --num-cpus and --runtime-env apply to --engine ray; add --engine ray or drop them"
        )
    remote_in, remote_out = _is_uri(input_path), _is_uri(output)
    if engine == "local" and (remote_in or remote_out):
        where = input_path if remote_in else output
        raise ValueError(f"{where}: URIs (s3://... or any pyarrow filesystem) need --engine ray; add it")


def _packing_config(ctx: typer.Context, config: Path | None) -> PackingConfig:
    """Step 2: the PackingConfig of the flags; with ``--config``, the file's with the flags given overriding it."""
    given = {k: v for k, v in ctx.params.items() if _from_command_line(ctx, k)}
    options = {k: given[k] for k in CONFIG_FLAGS if k in given} if config else {k: ctx.params[k] for k in CONFIG_FLAGS}
    for key in MULTIMODAL_FLAGS:
        if key in options:
            options.setdefault("multimodal", {})[key] = options.pop(key)
    if not config:
        return PackingConfig(**{k: v for k, v in options.items() if v is not None or k in ("seed",)})
    cfg = PackingConfig.from_file(config, **options)
    if unapplied := cfg.pack_unapplied():  # every key pack reads is applied or refused
        raise ValueError(
            f"--config {config}: {', '.join(unapplied)} configure(s) the loaders and collators that read the packs, "
            "not packwise pack (it writes unshifted HF packs of at most --capacity tokens); remove them from the "
            "file you pass to pack, and give them to the loader (PackingConfig(...).collator() / .loader())"
        )
    return cfg


def _destination(input_path: str | None, output: str, *, overwrite: bool) -> OutputDir | None:
    """Step 3: the locked output directory (None for a URI prefix: pack_ray checks it is empty and commits it
    marker-last, integrations/ray). The input is checked first: a refused input leaves no output behind."""
    remote_in = _is_uri(input_path)
    if input_path is not None and not remote_in:
        check_input_path(input_path)
    if _is_uri(output):
        return None
    inputs = () if input_path is None or remote_in else (input_path,)
    return OutputDir(output, overwrite=overwrite, inputs=inputs)


def _pack_here(input_path: str | None, dest: OutputDir, cfg: PackingConfig, *, input_format: Format | None,
               packs_per_shard: int, overwrite: bool, progress) -> PackReport:  # fmt: skip
    """Step 4 (``--engine local``): tokenize, plan and assemble in this process, then write the shards."""
    data = chitchat_input if input_path is None else input_path
    packed, report = pack_columns(data, **cfg.pipeline_kwargs(), format=input_format, progress=progress)
    write_packs(packed, report, dest, packs_per_shard=packs_per_shard, overwrite=overwrite, progress=progress)
    return report


def _pack_on_ray(
    input_path: str | None, dest, cfg: PackingConfig, *, input_format: Format | None, **ray_options
) -> PackReport:
    """Step 4 (``--engine ray``): the same packs and files from Ray workers (needs packwise[ray])."""
    from ..integrations.ray import pack_ray  # lazy: ray is an optional heavy dependency

    data = chitchat_input() if input_path is None else input_path
    return pack_ray(data, dest, **cfg.pipeline_kwargs(), format=input_format, **ray_options)


def _report_files(dest: OutputDir | None, output: str, report: PackReport, *, write: bool, progress) -> list[Path]:
    """Step 5: report.json, report.md and the plots in the staging directory; their final paths."""
    if write and dest is None:
        err.print(f"[yellow]note:[/] report files are written to a local -o only; {escape(output)}/metadata.json "
                  "holds the report", highlight=False, soft_wrap=True)  # fmt: skip
    if not write or dest is None:
        return []
    t = time.perf_counter()
    advance = progress("report", 1) if progress else None  # plots take a second or more
    files = write_report(dest.staging(), report)
    if advance:
        advance(1)
    report.timings["report"] = time.perf_counter() - t
    return [Path(output) / f.name for f in files]


def _print_result(report: PackReport, output: str, report_files: list[Path], *, json_out: bool, quiet: bool) -> None:
    """Step 6: the report as JSON or a table, the plots skipped and the rows skipped."""
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
    "max_sequences_per_pack", "max_segments", "min_packs", "pack_count_multiple", "alignment", "min_pixels",
    "max_pixels", "media_root", "drop_fields", "media_family",
)  # fmt: skip


def _tokenizer_threads(n: int) -> None:
    """Size the tokenizer's thread pool (Rayon reads ``RAYON_NUM_THREADS`` when it first starts)."""
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
