"""One pack of a packed dataset, for people: documents, boundaries, loss tokens and padding."""

from __future__ import annotations

from pathlib import Path

from ..constants import IGNORE_INDEX

LOSS_STYLES = ("bold black on green3", "bold black on pale_green3")  # alternate so token boundaries show
CONTEXT_STYLES = ("", "grey62")
VISIBLE = {"\n": "↵\n", "\t": "→", "\r": "␍"}


def read_pack_row(path, pack: int) -> tuple[dict, dict]:
    """``(metadata, row)`` for pack ``pack`` (0-based) of a ``packwise pack`` output directory.

    Reads only the row group that holds the pack.

    Raises:
        ValueError: ``path`` is not a packed dataset, or ``pack`` is out of range.
        TypeError: ``pack`` is not an integer.
    """
    import pyarrow.parquet as pq

    from ..files import read_metadata

    path = Path(path)
    if isinstance(pack, bool) or not isinstance(pack, int):
        raise TypeError(f"pack must be an integer (0-based pack index), got {pack!r}")
    if not path.is_dir():
        raise ValueError(f"{path} is not a directory; pass the output directory of `packwise pack`")
    meta = read_metadata(path)
    total = sum(int(s["packs"]) for s in meta["shards"])
    if not total:
        raise ValueError(f"--pack {pack}: {path} holds 0 packs (every sample was dropped; see its report); re-pack it")
    if not 0 <= pack < total:
        raise ValueError(
            f"--pack {pack} is out of range: {path} holds {total} packs (0 to {total - 1}); "
            f"pass --pack between 0 and {total - 1}"
        )
    start = 0
    for shard in meta["shards"]:
        if pack < start + int(shard["packs"]):
            break
        start += int(shard["packs"])
    pf = pq.ParquetFile(path / shard["file"])
    local = pack - start
    for g in range(pf.metadata.num_row_groups):
        rows = pf.metadata.row_group(g).num_rows
        if local < rows:
            break
        local -= rows
    table = pf.read_row_group(g).slice(local, 1)
    return meta, {name: table.column(name)[0].as_py() for name in table.column_names}


def _spans(flags: list[bool]) -> list[list[int]]:
    spans: list[list[int]] = []
    for i, f in enumerate(flags):
        if f and spans and spans[-1][1] == i:
            spans[-1][1] = i + 1
        elif f:
            spans.append([i, i + 1])
    return spans


def pack_view(
    path, pack: int = 0, *, tokenizer: str | None = None, ids: bool = False, max_tokens: int | None = None
) -> dict:
    """A JSON-ready description of one pack: its documents, their tokens, loss tokens and the padding.

    A token carries loss (is a target) when its label is not -100. Positions and ``loss_spans``
    (``[start, stop)``) count tokens from the start of each document.

    Args:
        path: output directory of ``packwise pack``.
        pack: 0-based pack index.
        tokenizer: decode with this tokenizer (``qwen2.5``, ``smollm2``, a path) instead of the dataset's
            (``metadata.json``'s ``tokenizer``). Pre-tokenized data without one shows token ids.
        ids: show token ids even when a tokenizer is known.
        max_tokens: list at most this many tokens of each document (counts still cover all of it).

    Returns:
        ``{"path", "pack", "num_packs", "capacity", "tokenizer", "tokens", "loss_tokens", "padding",
        "documents", "stored_padding", "columns"}``; each document has ``document``, ``source_index``,
        ``start`` (offset in the pack), ``length``, ``loss_tokens``, ``loss_spans``, ``tokens`` (``id``,
        ``text`` (None without a tokenizer), ``label``, ``loss``) and ``hidden_tokens``. ``padding`` is
        ``capacity - tokens``: added when a batch is built, not stored.

    Raises:
        ValueError: bad path, ``pack`` out of range, ``max_tokens`` < 1, or the tokenizer cannot be loaded.
    """
    if max_tokens is not None and (isinstance(max_tokens, bool) or not isinstance(max_tokens, int) or max_tokens < 1):
        raise ValueError(f"--max-tokens must be an integer >= 1 (tokens per document), got {max_tokens!r}")
    meta, row = read_pack_row(path, pack)
    name = None if ids else (tokenizer if tokenizer is not None else meta.get("tokenizer"))
    tok = None
    if name is not None:
        from ..text import load_tokenizer

        try:
            tok = load_tokenizer(name)
        except ValueError as e:
            raise ValueError(
                f"cannot load tokenizer {name!r} to decode {path}: {e}; pass --tokenizer NAME|PATH, or --ids"
            ) from e
    input_ids, labels = row["input_ids"], row["labels"]
    capacity = int(meta["capacity"])
    docs, start = [], 0
    for i, (n, src) in enumerate(zip(row["seq_lengths"], row["source_index"])):
        docs.append(_document(i, src, start, input_ids[start : start + n], labels[start : start + n], tok, max_tokens))
        start += n
    stored = _document(-1, None, start, input_ids[start:], labels[start:], tok, max_tokens)["tokens"]
    used = len(input_ids)
    return {
        "path": str(path),
        "pack": pack,
        "num_packs": sum(int(s["packs"]) for s in meta["shards"]),
        "capacity": capacity,
        "tokenizer": name,
        "tokens": used,
        "loss_tokens": sum(d["loss_tokens"] for d in docs),
        "padding": max(0, capacity - used),
        "documents": docs,
        "stored_padding": stored,
        "columns": [c for c in row if c not in ("input_ids", "labels", "seq_lengths", "source_index")],
    }


def _document(i, src, start, ids, labels, tok, max_tokens) -> dict:
    flags = [lab != IGNORE_INDEX for lab in labels]
    shown = len(ids) if max_tokens is None else min(len(ids), max_tokens)
    texts = [None] * shown
    if tok is not None and shown:
        texts = tok.batch_decode(
            [[t] for t in ids[:shown]], skip_special_tokens=False, clean_up_tokenization_spaces=False
        )
    tokens = [
        {"id": ids[j], "text": texts[j], "label": labels[j], "loss": flags[j]} for j in range(shown)
    ]  # fmt: skip
    return {
        "document": i,
        "source_index": src,
        "start": start,
        "length": len(ids),
        "loss_tokens": sum(flags),
        "loss_spans": _spans(flags),
        "tokens": tokens,
        "hidden_tokens": len(ids) - shown,
    }


def _tokens_text(tokens: list[dict]):
    from rich.text import Text

    text = Text()
    for j, t in enumerate(tokens):
        style = (LOSS_STYLES if t["loss"] else CONTEXT_STYLES)[j % 2]
        if t["text"] is None:
            if j:
                text.append(" ")
            text.append(str(t["id"]), style="bold green" if t["loss"] else "dim")
        else:
            piece = "".join(VISIBLE.get(ch, ch) for ch in t["text"]) or "∅"
            text.append(piece, style=style)
    if text.plain.endswith("\n"):  # the ↵ stays visible; no blank line before the next rule
        text.right_crop(1)
    return text


def _positions(spans: list[list[int]]) -> str:
    return ", ".join(f"{a}" if b - a == 1 else f"{a}–{b - 1}" for a, b in spans) or "none"


def render_pack(view: dict):
    """The :func:`pack_view` of a pack as a rich renderable (print it with a rich ``Console``).

    Each document starts with a rule naming its number, ``source_index`` and length; loss tokens are
    highlighted (green) and their positions listed; the padding to capacity ends the pack.
    """
    from rich.console import Group, RenderableType
    from rich.rule import Rule
    from rich.text import Text

    v = view
    fill = 100.0 * v["tokens"] / v["capacity"]
    shows = f"decoded with {v['tokenizer']}" if v["tokenizer"] else "token ids"
    parts: list[RenderableType] = [
        Text(
            f"pack {v['pack']} of {v['num_packs']} · {v['tokens']:,} of {v['capacity']:,} tokens ({fill:.1f} % full)"
            f" · {len(v['documents'])} document{'' if len(v['documents']) == 1 else 's'} · {v['loss_tokens']:,} loss "
            f"token{'' if v['loss_tokens'] == 1 else 's'}",
            style="bold",
        ),
        Text(f"{v['path']} · {shows} · highlighted: loss tokens (label != -100)", style="dim"),
    ]
    for d in v["documents"]:
        title = (
            f"document {d['document']} · source_index {d['source_index']} · {d['length']:,} tokens "
            f"· {d['loss_tokens']:,} loss"
        )
        parts.append(Rule(Text(title), align="left", style="cyan"))
        parts.append(_tokens_text(d["tokens"]))
        if d["hidden_tokens"]:
            parts.append(Text(f"… {d['hidden_tokens']:,} more tokens (--max-tokens)", style="dim italic"))
        parts.append(Text(f"loss on positions {_positions(d['loss_spans'])}", style="dim"))
    if v["stored_padding"]:
        n = len(v["stored_padding"])
        parts.append(Rule(Text(f"stored padding · {n:,} tokens outside any document"), align="left", style="red"))
        parts.append(_tokens_text(v["stored_padding"]))
    pad = f"padding · {v['padding']:,} tokens to capacity {v['capacity']:,} (added when batched, not stored)"
    parts.append(Rule(Text(pad), align="left", style="yellow"))
    return Group(*parts)
