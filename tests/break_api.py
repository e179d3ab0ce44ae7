"""Break test of the library-API half of issue 15 (not collected by pytest: run it as a script).

    PYTHONPATH=src python tests/break_api.py

Every case is a hostile or careless call with the outcome a user should get: a clean error whose message
contains the given text, or a correct result (checked). Prints one line per case that is not clean and the
table clean / unclear message / traceback / hang / silent wrong / refused valid input."""

from __future__ import annotations

import json
import shutil
import signal
import sys
import tempfile
import traceback
from collections import Counter
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import torch

from packwise.assemble import assemble_pack, collate_packs
from packwise.cli import main
from packwise.data import PackedParquetDataset
from packwise.files._write import load_packed
from packwise.hf import PackedDataCollator
from packwise.pipeline import pack_dataset
from packwise.stream import PackingLoader, PackingStream

CASES = []


def case(name, call, expect, check=None):
    CASES.append((name, call, expect, check))


def err(text):
    return ("error", text)


OK = ("ok", None)
A = assemble_pack
ids = [1, 2, 3]

# --- assemble_pack -------------------------------------------------------------------------------------
for v in (2, -1, 3, 255):
    case(f"assemble loss_mask {v}", lambda v=v: A([{"input_ids": ids, "loss_mask": [1, v, 0]}]), err("loss_mask has"))
for v in (0.5, 1.5, -0.0001):
    case(f"assemble loss_mask float {v}", lambda v=v: A([{"input_ids": ids, "loss_mask": [1.0, v, 0.0]}]),
         err("loss_mask has"))  # fmt: skip
case("assemble loss_mask bool ok", lambda: A([{"input_ids": ids, "loss_mask": [True, False, True]}]), OK,
     lambda p: p.labels.tolist() == [-100, -100, 3])  # fmt: skip
case("assemble loss_mask int8 ok", lambda: A([{"input_ids": ids, "loss_mask": np.array([0, 1, 1], np.int8)}]), OK,
     lambda p: p.labels.tolist() == [-100, 2, 3])  # fmt: skip
for v in (-1, -100, -(2**40)):
    case(f"assemble negative id {v}", lambda v=v: A([{"input_ids": [1, v]}]), err("outside token ids >= 0"))
for v in (100, 10**9):
    case(
        f"assemble id {v} >= vocab",
        lambda v=v: A([{"input_ids": [1, v]}], vocab_size=100),
        err("outside the vocabulary"),
    )
case("assemble id = vocab-1 ok", lambda: A([{"input_ids": [1, 99]}], vocab_size=100), OK)
# labels + loss_mask declare a Megatron row (labels = text[1:]); HF-looking labels with a loss_mask are refused
case("assemble labels+loss_mask", lambda: A([{"input_ids": ids, "labels": ids, "loss_mask": [1, 1, 1]}]),
     err("declares a Megatron row"))  # fmt: skip
# a Megatron row whose loss_mask is all 0 has no target: every label of it is -100 in the HF pack
case("assemble labels+loss_mask 2nd seq", lambda: A([{"input_ids": ids}, {"input_ids": ids, "labels": ids,
     "loss_mask": [0, 0, 0]}]), OK, lambda p: p.labels.tolist() == [-100, 2, 3, -100, -100, -100])  # fmt: skip
for v in (-5, -101, -1):
    case(f"assemble label {v}", lambda v=v: A([{"input_ids": ids, "labels": [1, v, 3]}]), err("neither -100"))
case(
    "assemble label >= vocab",
    lambda: A([{"input_ids": ids, "labels": [1, 500, 3]}], vocab_size=100),
    err("labels has 500"),
)
case("assemble label pad -1 ok", lambda: A([{"input_ids": ids, "labels": [-1, 2, -1]}], label_pad_id=-1), OK)
BASE = {"input_ids": ids}
for col in ("input_ids", "labels", "loss_mask", "position_ids", "w"):
    case(f"assemble ragged {col}", lambda col=col: A([{**BASE, col: [[1, 2], [3]]}]), err("ragged"))
    if col == "w":  # a list of strings in an unknown column is per-sequence metadata, kept whole
        case("assemble strings in w", lambda: A([{**BASE, "w": ["a", "b", "c"]}]), OK,
             lambda p: p.metadata["w"] == [["a", "b", "c"]])  # fmt: skip
    else:
        case(f"assemble strings in {col}", lambda col=col: A([{**BASE, col: ["a", "b", "c"]}]), err("holds 'a'"))
    case(f"assemble None in {col}", lambda col=col: A([{**BASE, col: [1, None, 3]}]), err("cannot become a tensor"))
for col in ("input_ids", "labels", "position_ids"):
    case(
        f"assemble float {col}", lambda col=col: A([{"input_ids": ids, col: [1.0, 2.0, 3.0]}]), err("dtype torch.float")
    )
case("assemble bool ids", lambda: A([{"input_ids": [True, False]}]), err("dtype torch.bool"))
case("assemble 2-D ids", lambda: A([{"input_ids": [[1, 2], [3, 4]]}]), err("expected (L,)"))
case("assemble empty seq", lambda: A([{"input_ids": []}]), err("empty"))
case("assemble no seqs", lambda: A([]), err("at least one"))
case("assemble seq is list", lambda: A([[1, 2, 3]]), err("pass a mapping"))
case("assemble seq is str", lambda: A(["abc"]), err("pass a mapping"))
case("assemble dict ids", lambda: A([{"input_ids": {"a": 1}}]), err("expected a tensor or array"))
case("assemble str ids", lambda: A([{"input_ids": "1 2 3"}]), err("expected a tensor or array"))
case("assemble labels length", lambda: A([{"input_ids": ids, "labels": [1, 2]}]), err("has 2 tokens"))
case("assemble mask length", lambda: A([{"input_ids": ids, "loss_mask": [1, 1]}]), err("has 2 tokens"))
case("assemble extra col length", lambda: A([{"input_ids": ids, "w": [1, 2]}]), err("has 2 tokens"))
case("assemble positions shape", lambda: A([{"input_ids": ids, "position_ids": [[0, 1, 2]] * 2}]), err("MRoPE"))
case("assemble pad_to small", lambda: A([{"input_ids": ids}], pad_to=2), err("pad_to=2"))
for a in (0, -1, 1.5, True):
    case(f"assemble alignment {a!r}", lambda a=a: A([{"input_ids": ids}], alignment=a), err("alignment must be"))
case("assemble attention_mask zeros", lambda: A([{"input_ids": ids, "attention_mask": [1, 1, 0]}]),
     err("padded sequences would be packed"))  # fmt: skip
case("assemble attention_mask ones ok", lambda: A([{"input_ids": ids, "attention_mask": [1, 1, 1]}]), OK)
case("assemble produced name", lambda: A([{"input_ids": ids, "cu_seqlens": [1, 2, 3]}]), err("name packwise produces"))
case("assemble columns differ", lambda: A([{"input_ids": ids, "w": [1, 2, 3]}, {"input_ids": ids}]), err("differ"))
case("assemble ids in some", lambda: A([{"input_ids": ids}, {"labels": ids}]), err("present in some"))
case("assemble mixed devices", lambda: A([{"input_ids": torch.tensor(ids)}, {"input_ids": torch.tensor(ids, device="meta")}]),
     err("are on meta but sequence 0's are on cpu"))  # fmt: skip
case("assemble uint64 huge id", lambda: A([{"input_ids": np.array([1, 2**63 + 5], dtype=np.uint64)}]),
     err("cannot become a tensor"))  # fmt: skip
case("assemble object array", lambda: A([{"input_ids": np.array([1, object()], dtype=object)}]), err("cannot become"))
case("assemble int32 ok", lambda: A([{"input_ids": np.array(ids, np.int32), "labels": np.array([-100, 2, 3], np.int32)}]),
     OK, lambda p: p.input_ids.dtype == torch.int64 and p.labels.tolist() == [-100, 2, 3])  # fmt: skip
case("assemble collate mixed devices", lambda: collate_packs([A([{"input_ids": torch.tensor(ids)}]),
     A([{"input_ids": torch.tensor(ids, device="meta")}])]), err("pack 1 is on meta"))  # fmt: skip

# --- PackedDataCollator --------------------------------------------------------------------------------
C = PackedDataCollator()
case("collator string ids", lambda: C([{"input_ids": ["hi", "yo"]}]), err("holds 'hi'"))
case("collator text ids", lambda: C([{"input_ids": "hello"}]), err("input_ids holds"))
case("collator ragged ids", lambda: C([{"input_ids": [[1], [2, 3]]}]), err("ragged"))
case("collator float ids", lambda: C([{"input_ids": [1.5]}]), err("token ids are integers"))
case("collator None ids", lambda: C([{"input_ids": None}]), err("input_ids"))
case("collator no ids", lambda: C([{"labels": [1]}]), err("has no 'input_ids'"))
case("collator list feature", lambda: C([[1, 2, 3]]), err("feature 0 is a list"))
case("collator empty batch", lambda: C([]), err("empty batch"))
case("collator right pad", lambda: C([{"input_ids": [5, 6, 0], "attention_mask": [1, 1, 0]}]), OK,
     lambda b: b["input_ids"].tolist() == [[5, 6]])  # fmt: skip
case("collator left pad", lambda: C([{"input_ids": [0, 5, 6], "attention_mask": [0, 1, 1], "labels": [0, 5, 6]}]), OK,
     lambda b: b["input_ids"].tolist() == [[5, 6]] and b["labels"].tolist() == [[-100, 6]])  # fmt: skip
case("collator both-side pad", lambda: C([{"input_ids": [0, 5, 6, 0], "attention_mask": [0, 1, 1, 0]}]), OK,
     lambda b: b["input_ids"].tolist() == [[5, 6]])  # fmt: skip
case("collator tensor pad", lambda: C([{"input_ids": torch.tensor([5, 6, 0]), "attention_mask": torch.tensor([1, 1, 0])}]),
     OK, lambda b: b["input_ids"].tolist() == [[5, 6]])  # fmt: skip
case(
    "collator mid zero", lambda: C([{"input_ids": [5, 6, 7], "attention_mask": [1, 0, 1]}]), err("between real tokens")
)
case("collator all zero", lambda: C([{"input_ids": [5, 6], "attention_mask": [0, 0]}]), err("all zeros"))
case("collator mask 2", lambda: C([{"input_ids": [5, 6], "attention_mask": [1, 2]}]), err("only 0/1"))
case(
    "collator mask length",
    lambda: C([{"input_ids": [5, 6], "attention_mask": [1]}]),
    err("attention_mask has 1 values"),
)
case(
    "collator mask strings",
    lambda: C([{"input_ids": [5, 6], "attention_mask": ["1", "1"]}]),
    err("attention_mask holds"),
)
case("collator packed row padded", lambda: C([{"input_ids": [5, 6, 0], "attention_mask": [1, 1, 0], "seq_lengths": [1, 2]}]),
     err("packed row"))  # fmt: skip
case(
    "collator bad seq_lengths", lambda: C([{"input_ids": [5, 6], "seq_lengths": [3]}]), err("must be positive and sum")
)
case("collator loss_mask 2", lambda: C([{"input_ids": [5, 6], "loss_mask": [1, 2]}]), err("loss_mask has 2"))
case("collator labels+mask", lambda: C([{"input_ids": [5, 6], "labels": [5, 6], "loss_mask": [1, 1]}]),
     err("declares a Megatron row"))  # fmt: skip
case("collator negative id", lambda: C([{"input_ids": [5, -6]}]), err("outside token ids"))
case("collator string labels", lambda: C([{"input_ids": [5, 6], "labels": ["a", "b"]}]), err("labels holds"))

# --- PackingStream ---------------------------------------------------------------------------------------
S = [{"input_ids": list(range(1, n + 1))} for n in (3, 5, 2, 6, 4)]


def stream(**kw):
    return PackingStream(S, capacity=8, buffer_size=2, **kw)


def restored(state, source=None):
    s = PackingStream(source or S, capacity=8, buffer_size=2)
    s.load_state_dict(state)
    return list(s)


for w, p in ((4, 0), (3, 1), (100, 0), (10**9, 5)):
    case(f"stream state window {w} pack {p}", lambda w=w, p=p: restored({"epoch": 0, "window": w, "pack": p}),
         err("but the source has 5 samples"))  # fmt: skip
case("stream state iterable past end", lambda: restored({"epoch": 0, "window": 7, "pack": 0}, lambda: iter(S)),
     err("read this epoch"))  # fmt: skip
case("stream state end ok", lambda: restored({"epoch": 0, "window": 3, "pack": 0}), OK, lambda r: r == [])
case("stream state pack past window", lambda: restored({"epoch": 0, "window": 0, "pack": 9}), err("points at pack 9"))
for bad in ({}, {"epoch": "x", "window": 0, "pack": 0}, {"epoch": 0, "window": -1, "pack": 0}, None, [0, 0, 0]):
    case(f"stream state {bad!r}", lambda bad=bad: stream().load_state_dict(bad), err("not a PackingStream state"))
case("loader state past end", lambda: PackingLoader(stream()).load_state_dict({"epoch": 0, "window": 9, "pack": 0}),
     err("points at window 9"))  # fmt: skip
case("stream length_fn under", lambda: list(stream(length_fn=lambda s: 1)), err("length_fn says 1 tokens"))
case(
    "stream length_fn half",
    lambda: list(stream(length_fn=lambda s: len(s["input_ids"]) // 2 + 1)),
    err("length_fn says"),
)
case("stream length_fn over ok", lambda: list(stream(length_fn=lambda s: 8)), OK,
     lambda packs: all(p.total_tokens <= 8 for p in packs))  # fmt: skip
case(
    "stream length_fn raises",
    lambda: list(stream(length_fn=lambda s: 1 / 0)),
    err("length_fn raised ZeroDivisionError"),
)
case("stream length_fn str", lambda: list(stream(length_fn=lambda s: "x")), err("length_fn returned 'x' (str)"))
case("stream length_fn zero", lambda: list(stream(length_fn=lambda s: 0)), err("length_fn returned 0 (int)"))
case("stream no ids under", lambda: list(PackingStream([{"labels": [1] * 5}] * 2, capacity=8, buffer_size=2,
     length_fn=lambda s: 4)), err("> capacity 8"))  # fmt: skip
case("stream samples padded", lambda: list(PackingStream([{"input_ids": [1, 2, 0], "attention_mask": [1, 1, 0]}],
     capacity=8, buffer_size=1)), err("padded sequences"))  # fmt: skip
case("stream loss_mask 2", lambda: list(PackingStream([{"input_ids": [1, 2], "loss_mask": [1, 2]}], capacity=8,
     buffer_size=1)), err("loss_mask has 2"))  # fmt: skip

# --- pack_dataset ------------------------------------------------------------------------------------------
P = pack_dataset
U, AS = {"role": "user", "content": "hi"}, {"role": "assistant", "content": "yo"}
CALL = {"type": "function", "function": {"name": "f", "arguments": {"a": 1}}}
PADROWS = [{"input_ids": [0, 5, 6], "attention_mask": [0, 1, 1]}, {"input_ids": [7, 0], "attention_mask": [1, 0]}]
for kind, wrap in (("rows", lambda r: r), ("table", pa.Table.from_pylist)):
    case(f"pack padded {kind}", lambda wrap=wrap: P(wrap(PADROWS), capacity=8), OK,
         lambda r: r[0].column("input_ids").to_pylist() == [[5, 6, 7]] and r[1].pad_tokens_removed == 2)  # fmt: skip
    for mask, text in (([1, 0, 1], "between real tokens"), ([0, 0, 0], "all zeros"), ([1, 2, 1], "only 0/1"),
                       ([1, 1], "has 2 values")):  # fmt: skip
        case(f"pack mask {mask} {kind}", lambda wrap=wrap, mask=mask: P(wrap([{"input_ids": [1, 2, 3], "attention_mask":
             mask}]), capacity=8), err(text))  # fmt: skip
for v, text in ((2, "only 0/1"), (-1, "only 0/1"), (0.5, "only 0/1")):
    case(f"pack loss_mask {v}", lambda v=v: P([{"input_ids": [1, 2], "loss_mask": [1, v]}], capacity=8), err(text))
case("pack negative id", lambda: P([{"input_ids": [1, -2]}], capacity=8), err("outside"))
case("pack labels+mask", lambda: P([{"input_ids": [1, 2], "labels": [1, 2], "loss_mask": [1, 1]}], capacity=8),
     err("together with 'labels'"))  # fmt: skip
case("pack tool call rendered", lambda: P([{"messages": [U, {"role": "assistant", "content": "", "tool_calls": [CALL]}]}],
     capacity=128), OK, lambda r: r[1].loss_tokens_packed > 10)  # fmt: skip
case("pack tool call string args", lambda: P([{"messages": [U, {"role": "assistant", "content": None, "tool_calls": [
     {"function": {"name": "f", "arguments": '{"a": 1}'}}]}]}], capacity=128), OK)  # fmt: skip
case("pack tool call bad json", lambda: P([{"messages": [U, {"role": "assistant", "content": "", "tool_calls": [
     {"function": {"name": "f", "arguments": "{a"}}]}]}], capacity=128), err("not valid JSON"))  # fmt: skip
case("pack tool call list args", lambda: P([{"messages": [U, {"role": "assistant", "content": "", "tool_calls": [
     {"function": {"name": "f", "arguments": [1]}}]}]}], capacity=128), err("expected a JSON object"))  # fmt: skip
case("pack tool call no name", lambda: P([{"messages": [U, {"role": "assistant", "content": "", "tool_calls": [
     {"function": {"arguments": {}}}]}]}], capacity=128), err("is not {\"type\": \"function\""))  # fmt: skip
case("pack tool call not list", lambda: P([{"messages": [U, {"role": "assistant", "content": "", "tool_calls": CALL}]}],
     capacity=128), err("expected a list of tool calls"))  # fmt: skip
case("pack tool call on user", lambda: P([{"messages": [{**U, "tool_calls": [CALL]}, AS]}], capacity=128),
     err("on a 'user' message"))  # fmt: skip
case("pack function_call", lambda: P([{"messages": [U, {**AS, "function_call": {"name": "f"}}]}], capacity=128),
     err("legacy single-call"))  # fmt: skip
case(
    "pack tools field", lambda: P([{"messages": [U, AS], "tools": [{"name": "f"}]}], capacity=128), err("field 'tools'")
)
case("pack template w/o tool_calls", lambda: P([{"messages": [U, {**AS, "tool_calls": [CALL]}]}], capacity=128,
     chat_template="{% for m in messages %}{{ m.content }}{% endfor %}", loss_on="all"), err("never reads tool_calls"))  # fmt: skip
case("pack prompt/completion tool call", lambda: P([{"prompt": [U], "completion": [{**AS, "tool_calls": [CALL]}]}],
     capacity=128), OK)  # fmt: skip
for tok in ("<|image_pad|>", "<|vision_start|>", "<|vision_end|>", "<|video_pad|>", "<|vision_pad|>"):
    case(f"pack literal {tok} user", lambda tok=tok: P([{"messages": [{"role": "user", "content": f"a {tok} b"}, AS]}],
         capacity=128), err(f"literal vision token {tok}"))  # fmt: skip
    case(f"pack literal {tok} completion", lambda tok=tok: P([{"prompt": "a", "completion": tok}], capacity=128),
         err("field 'completion'"))  # fmt: skip
case("pack <image> text only ok", lambda: P([{"messages": [{"role": "user", "content": "an <image> tag"}, AS]}],
     capacity=128), OK)  # fmt: skip
case("pack tool_calls null everywhere ok", lambda: P([{"messages": [{**U, "tool_calls": None}, {**AS, "tool_calls": None}]}],
     capacity=128), OK)  # fmt: skip

# --- packed files ------------------------------------------------------------------------------------------
TMP = Path(tempfile.mkdtemp())
(TMP / "in.jsonl").write_text('{"input_ids": [1, 2, 3]}\n{"input_ids": [4, 5]}\n')
main(["pack", str(TMP / "in.jsonl"), "-o", str(TMP / "out"), "--capacity", "4", "-q", "--no-report"])


def damaged(how):
    out = TMP / f"d-{how}"
    if out.exists():
        shutil.rmtree(out)
    shutil.copytree(TMP / "out", out)
    shard = next(out.glob("packs-*.parquet"))
    data = shard.read_bytes()
    if how == "truncated":
        shard.write_bytes(data[: len(data) // 2])
    elif how == "empty":
        shard.write_bytes(b"")
    elif how == "garbage":
        shard.write_bytes(b"PAR1" + b"x" * 100)
    elif how.startswith("drop-"):
        pq.write_table(pq.read_table(shard).drop([how[5:]]), shard)
    elif how == "fewer-rows":
        pq.write_table(pq.read_table(shard).slice(0, 1), shard)
    elif how == "deleted":
        shard.unlink()
    return out


# every change to a shard is caught by its SHA-256 (metadata.json) before its columns are read
CHANGED = "the shard was changed after packwise wrote it"
for how, text in (("truncated", CHANGED), ("empty", CHANGED), ("garbage", CHANGED), ("drop-labels", CHANGED),
                  ("drop-seq_lengths", CHANGED), ("drop-input_ids", CHANGED), ("fewer-rows", CHANGED),
                  ("deleted", "is missing")):  # fmt: skip
    case(f"dataset {how}", lambda how=how: PackedParquetDataset(damaged(how)), err(text))
    case(f"load_packed {how}", lambda how=how: load_packed(damaged(how)), err(text))
# without the hash check (verify_checksums=False) the readers' own checks still name what is wrong
for how, text in (("truncated", "truncated or damaged"), ("empty", "truncated or damaged"), ("garbage", "truncated or damaged"),
                  ("drop-labels", "no 'labels' column"), ("drop-seq_lengths", "no 'seq_lengths' column"),
                  ("drop-input_ids", "no 'input_ids' column"), ("fewer-rows", "metadata.json says 2")):  # fmt: skip
    case(f"dataset unverified {how}", lambda how=how: PackedParquetDataset(damaged(how), verify_checksums=False),
         err(text))  # fmt: skip
    case(f"load_packed unverified {how}", lambda how=how: load_packed(damaged(how), verify_checksums=False), err(text))
case("dataset ok", lambda: PackedParquetDataset(TMP / "out"), OK, lambda d: [d[i].input_ids.tolist() for i in range(len(d))]
     == [[1, 2, 3], [4, 5]])  # fmt: skip


def image_case(change):
    from PIL import Image

    d = Path(tempfile.mkdtemp())
    Image.new("RGB", (56, 56), (200, 0, 0)).save(d / "a.png")
    row = {"messages": [{"role": "user", "content": [{"type": "image", "path": "a.png"}]}, AS]}
    (d / "in.jsonl").write_text(json.dumps(row) + "\n")
    main(["pack", str(d / "in.jsonl"), "-o", str(d / "out"), "--capacity", "64", "-q", "--no-report"])
    if change == "same-size":
        Image.new("RGB", (56, 56), (0, 200, 0)).save(d / "a.png")
    elif change == "deleted":
        (d / "a.png").unlink()
    elif change == "bigger":
        Image.new("RGB", (112, 112), (0, 200, 0)).save(d / "a.png")
    return PackedParquetDataset(d / "out")[0]


case("image replaced same size", lambda: image_case("same-size"), err("changed since packing"))
case("image deleted", lambda: image_case("deleted"), err("a.png"))
case("image replaced bigger", lambda: image_case("bigger"), err("changed since packing"))
case("image unchanged ok", lambda: image_case(None), OK)


class Hang(Exception):
    pass


def alarm(*_):
    raise Hang


def run():
    signal.signal(signal.SIGALRM, alarm)
    table = Counter()
    for name, call, (kind, text), check in CASES:
        signal.alarm(60)
        try:
            result = call()
            signal.alarm(0)
            if kind == "error":
                outcome = "silent wrong"
            else:
                outcome = "clean" if check is None or check(result) else "silent wrong"
        except Hang:
            outcome = "hang"
        except (ValueError, TypeError) as e:
            signal.alarm(0)
            if kind == "ok":
                outcome, text = "refused valid input", str(e)
            elif text in str(e):
                outcome = "clean"
            else:
                outcome, text = "unclear message", str(e)
        except Exception:
            signal.alarm(0)
            outcome, text = "traceback", traceback.format_exc(limit=2)
        table[outcome] += 1
        if outcome != "clean":
            print(f"[{outcome}] {name}: {text[:300]}")
    print(f"{len(CASES)} cases:", dict(table))
    return 0 if set(table) == {"clean"} else 1


if __name__ == "__main__":
    sys.exit(run())
