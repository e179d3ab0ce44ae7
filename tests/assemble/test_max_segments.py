"""max_segments: one boundary shape per batch (issue 29 item 3) — exact padding, refusals, the planner and
stream caps, the config thread, a real HF model unchanged, and torch.compile recompiles 0 times with it."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from packwise import PackingConfig
from packwise.assemble import PackCollator, assemble_batch, assemble_pack, collate_packs, pad_segments
from packwise.hf import PackedDataCollator, use_packed_attention
from packwise.stream import PackingStream

A = [{"input_ids": [1, 2, 3]}, {"input_ids": [4]}]  # 2 documents, 4 tokens
B = [{"input_ids": [5, 6]}]  # 1 document; with pad_to=4 a tail segment of 2


def test_thd_boundaries_repeat_the_last_one():
    b = collate_packs([assemble_pack(A), assemble_pack(B, pad_to=4)], max_segments=5)  # 4 segments -> 5
    assert b["cu_seqlens"].tolist() == [0, 3, 4, 6, 6, 6]  # the tail's real length 0, then one empty segment
    assert b["cu_seqlens_padded"].tolist() == [0, 3, 4, 6, 8, 8]
    assert b["cu_seq_lens_q"].tolist() == b["cu_seq_lens_k"].tolist() == [0, 3, 4, 6, 8, 8]
    assert b["cu_seqlens"].dtype == torch.int32 and b["input_ids"].shape == (1, 8)  # tokens untouched


def test_padded_rows_and_flat_boundaries():
    b = collate_packs([assemble_pack(A), assemble_pack(B, pad_to=4)], layout="padded", max_segments=3)
    assert b["cu_seqlens"].tolist() == [[0, 3, 4, 4], [0, 2, 2, 2]]
    assert b["cu_seqlens_padded"].tolist() == [[0, 3, 4, 4], [0, 2, 4, 4]]
    assert b["cu_seq_lens_q"].tolist() == [0, 3, 4, 6, 8, 8, 8]  # P·max_segments + 1 = 7 entries


def test_over_full_batch_refused_by_name():
    with pytest.raises(ValueError, match=r"the batch has 4 segments .* > max_segments=3"):
        collate_packs([assemble_pack(A), assemble_pack(B, pad_to=4)], max_segments=3)
    with pytest.raises(ValueError, match=r"row 0 of the batch has 2 segments .* > max_segments=1"):
        collate_packs([assemble_pack(A), assemble_pack(B)], layout="padded", max_segments=1)
    for bad in (0, True, 2.0):
        with pytest.raises(ValueError, match="max_segments must be an integer >= 1"):
            collate_packs([assemble_pack(A)], max_segments=bad)


def test_every_collator_pads_alike():
    rows = [[{"input_ids": torch.tensor([1, 2, 3])}], [{"input_ids": torch.tensor([4, 5])}]]
    fused = assemble_batch(rows, max_segments=4)  # the fused fast path
    two_step = collate_packs([assemble_pack(r) for r in rows], max_segments=4)
    assert fused["cu_seqlens"].tolist() == two_step["cu_seqlens"].tolist() == [0, 3, 5, 5, 5]
    assert PackCollator(max_segments=4)([assemble_pack(r) for r in rows])["cu_seqlens"].tolist() == [0, 3, 5, 5, 5]
    hf = PackedDataCollator(max_segments=4)([{"input_ids": [1, 2, 3]}, {"input_ids": [4, 5]}])
    assert hf["cu_seq_lens_q"].tolist() == [0, 3, 5, 5, 5] and hf["max_length_q"] == 3
    assert pad_segments(dict(fused), None) == fused  # None: unchanged


def test_stream_never_builds_an_over_full_pack():
    samples = [{"input_ids": list(range(1, n + 1))} for n in [1] * 12 + [3, 5]]
    free = [p.num_sequences for p in PackingStream(samples, capacity=16, buffer_size=20, shuffle=False)]
    assert free == [4, 10]  # without the limit one pack holds 10 documents
    capped = [
        p.num_sequences for p in PackingStream(samples, capacity=16, buffer_size=20, shuffle=False, max_segments=4)
    ]
    assert sorted(capped) == [2, 4, 4, 4] and sum(capped) == 14  # nothing dropped
    fixed = list(PackingStream(samples, capacity=16, buffer_size=20, shuffle=False, max_segments=4, pad_to=16))
    assert max(len(p.segments()[0]) for p in fixed) == 4 and sum(p.num_sequences for p in fixed) == 14  # tail counts


def test_config_threads_one_name_to_planner_stream_and_collators():
    cfg = PackingConfig(capacity=16, max_segments=4)
    assert cfg.plan_kwargs()["max_sequences_per_pack"] == 4 and cfg.collate_kwargs()["max_segments"] == 4
    assert PackingConfig(capacity=16, max_segments=4, fixed_width=True).plan_kwargs()["max_sequences_per_pack"] == 3
    assert PackingConfig(capacity=16, max_segments=4, max_sequences_per_pack=2).pipeline_kwargs()[
        "max_sequences_per_pack"
    ] == 2  # fmt: skip
    assert cfg.data_collator().max_segments == 4
    assert PackingConfig(capacity=16, max_segments=4, buffer_size=8).stream([]).max_segments == 4
    with pytest.raises(ValueError, match="max_segments=1 with fixed_width=True"):
        PackingConfig(capacity=16, max_segments=1, fixed_width=True)
    with pytest.raises(ValueError, match="max_segments"):
        PackingConfig(max_segments=0)


def test_cli_flag_is_a_config_field():
    from packwise.cli._pack import CONFIG_FLAGS

    assert "max_segments" in CONFIG_FLAGS


def test_real_hf_model_logits_unchanged_by_empty_segments():
    from transformers import AutoModelForCausalLM

    from packwise.verify import tiny_config

    torch.manual_seed(0)
    model = AutoModelForCausalLM.from_config(tiny_config("tiny-llama", 97), dtype=torch.float32).eval()
    use_packed_attention(model, backend="sdpa")
    rows = [{"input_ids": [5, 7, 11, 13]}, {"input_ids": [17, 19]}, {"input_ids": [23, 29, 31]}]
    plain, static = PackedDataCollator()(rows), PackedDataCollator(max_segments=8)(rows)
    assert static["cu_seq_lens_q"].shape == (9,) and plain["cu_seq_lens_q"].shape == (4,)
    with torch.no_grad():
        assert torch.equal(model(**plain).logits, model(**static).logits)


class _Tiny(torch.nn.Module):
    """Embedding, one causal attention layer masked by the boundaries, a head (what a varlen kernel reads)."""

    def __init__(self) -> None:
        super().__init__()
        torch.manual_seed(0)
        self.emb, self.qkv, self.head = torch.nn.Embedding(64, 16), torch.nn.Linear(16, 48), torch.nn.Linear(16, 64)

    def forward(self, input_ids, cu_seqlens):
        x = self.emb(input_ids[0])
        pos = torch.arange(x.shape[0])
        doc = torch.searchsorted(cu_seqlens[1:].contiguous(), pos, right=True)  # repeated ends hold no token
        allowed = (doc[:, None] == doc[None, :]) & (pos[:, None] >= pos[None, :])
        q, k, v = self.qkv(x).chunk(3, dim=-1)
        return self.head((q @ k.T / 4.0).masked_fill(~allowed, float("-inf")).softmax(-1) @ v)


def _batches(n: int = 50) -> list:
    """``n`` fixed-width (32-token) packs of 1..7 documents: the token shape never changes, the segment count does."""
    rng = np.random.default_rng(0)
    packs = []
    for _ in range(n):
        k = int(rng.integers(1, 8))
        cuts = np.sort(rng.choice(np.arange(1, 28), k - 1, replace=False))
        lengths = np.diff(np.concatenate([[0], cuts, [28]]))
        packs.append(assemble_pack([{"input_ids": rng.integers(1, 64, int(n)).tolist()} for n in lengths], pad_to=32))
    return packs


def _compiled_run(packs, max_segments, dynamic):
    from torch._dynamo.utils import counters

    torch._dynamo.reset()
    counters.clear()
    model = _Tiny()
    compiled = torch.compile(model, backend="eager", dynamic=dynamic)
    outs = [
        compiled(b["input_ids"], b["cu_seqlens_padded"])
        for b in (collate_packs([p], max_segments=max_segments) for p in packs)
    ]
    return counters["stats"]["unique_graphs"] - 1, outs, model


@pytest.mark.slow
def test_torch_compile_recompiles_zero_times_with_max_segments():
    packs = _batches()
    segments = {len(p.segments()[0]) for p in packs}
    assert segments == {2, 3, 4, 5, 6, 7, 8}  # 1..7 documents + the tail: seven distinct cu_seqlens sizes
    static_recompiles, static, model = _compiled_run(packs, 8, dynamic=False)
    plain_recompiles, plain, _ = _compiled_run(packs, None, dynamic=False)
    assert (static_recompiles, plain_recompiles) == (0, 6)  # specialised shapes: one graph per size without
    auto_static, _, _ = _compiled_run(packs, 8, dynamic=None)
    auto_plain, _, _ = _compiled_run(packs, None, dynamic=None)
    assert (auto_static, auto_plain) == (0, 1)  # default: the second size recompiles once with a dynamic dim
    with torch.no_grad():
        eager = [model(b["input_ids"], b["cu_seqlens_padded"]) for b in (collate_packs([p]) for p in packs)]
    assert all(torch.equal(a, b) for a, b in zip(static, plain))  # identical logits with and without
    assert all(torch.equal(a, b) for a, b in zip(static, eager))


def test_loader_batches_have_one_boundary_shape():
    from packwise.stream import PackingLoader

    samples = [{"input_ids": list(range(1, n + 1))} for n in [1] * 12 + [3, 5]]
    stream = PackingStream(samples, capacity=16, buffer_size=20, shuffle=False, max_segments=4)
    sizes = {tuple(b["cu_seqlens"].shape) for b in PackingLoader(stream)}
    assert sizes == {(5,)}
    with pytest.raises(ValueError, match=r"batch_size=2.*up to 8 segments"):
        PackingLoader(stream, batch_size=2)
    cfg = PackingConfig(capacity=16, max_segments=4, buffer_size=20)
    assert {tuple(b["cu_seqlens"].shape) for b in cfg.loader(samples)} == {(5,)}
    with pytest.raises(ValueError, match="layout='padded'"):
        cfg.loader(samples, batch_size=2)
    padded = PackingConfig(capacity=16, max_segments=4, buffer_size=20, layout="padded").loader(samples, batch_size=2)
    assert {tuple(b["cu_seqlens"].shape) for b in padded} == {(2, 5)}


def test_cli_pack_never_writes_more_documents_than_max_segments(write_jsonl, tmp_path, capsys):
    import json

    from packwise.cli import main
    from packwise.files._write import load_packed

    data = write_jsonl([{"input_ids": list(range(1, n + 1))} for n in (1, 1, 1, 1, 1, 1, 2)])  # 8 tokens
    out = tmp_path / "out"
    assert main(["pack", str(data), "-o", str(out), "--capacity", "8", "--max-segments", "3", "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["tokens_packed"] == 8  # nothing dropped
    docs = [len(s) for s in load_packed(out).column("seq_lengths").to_pylist()]
    assert max(docs) == 3 and sum(docs) == 7  # one pack of 7 without the limit
