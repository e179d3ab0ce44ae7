"""Hybrid models packed and proven: stateful mixers reset at every document boundary (issue 27 items 1-2).

Fast tier: four families (Mamba2, Mamba with a layer that passes no kwargs, gated DeltaNet, short conv) are
ISOLATED and their control (the same model with the mixers run over the whole row) LEAKs; gradient
checkpointing replays the per-document path; the inner base model isolates too; an unseen mixer is refused.
"""

from __future__ import annotations

import pytest
import torch
import transformers

from packwise.hf import PackedDataCollator, PackingRefused, use_packed_attention
from packwise.verify._families import family_model
from packwise.verify._matrix import HYBRID, run_matrix

FAST = ["nemotron_h", "jamba", "qwen3_next", "lfm2"]


def _docs(vocab: int = 1024, lengths=(40, 13, 57)):
    g = torch.Generator().manual_seed(1)
    return [torch.randint(1, vocab, (n,), generator=g) for n in lengths]


@pytest.mark.parametrize("family", FAST)
def test_fast_tier_hybrid_isolated_and_control_leaks(family):
    (row,) = run_matrix([family])
    assert row.verdict == "ISOLATED", row
    assert row.max_abs_diff <= 1e-6 and row.loss_abs_diff <= 1e-5 and row.grad_max_rel_diff <= 1e-5
    assert row.generate is True  # generate after patching == generate unpatched, token for token
    (control,) = run_matrix([family], control=True)
    assert control.verdict == "LEAK" and control.max_abs_diff > 1e-4, control


@pytest.mark.slow
def test_every_hybrid_control_leaks():
    """The ISOLATED rows are tests/isolation/test_conformance.py::test_full_matrix; here their controls."""
    controls = run_matrix(HYBRID, control=True)
    assert [r.verdict for r in controls] == ["LEAK"] * len(HYBRID), [(r.family, r.max_abs_diff) for r in controls]


def _packed_grads(model, docs):
    batch = PackedDataCollator()([{"input_ids": d.tolist()} for d in docs])
    model.zero_grad()
    out = model(**batch, use_cache=False)
    out.loss.backward()
    return out.loss.detach(), {n: p.grad.clone() for n, p in model.named_parameters() if p.grad is not None}


@pytest.mark.parametrize(("family", "reentrant"), [("nemotron_h", False), ("jamba", True)])
def test_gradient_checkpointing_replays_per_document(family, reentrant):
    """The backward replay of a checkpointed layer runs outside the row scope: it must still go per document
    (non-reentrant: torch raises on a different recompute; reentrant: the gradients would silently differ)."""
    torch.manual_seed(0)
    model = use_packed_attention(family_model(family, 1024)).train()
    docs = _docs()
    loss, grads = _packed_grads(model, docs)
    model.activation_checkpointing_enable(activation_checkpointing_kwargs={"use_reentrant": reentrant})
    assert any(getattr(m, "gradient_checkpointing", False) for m in model.modules())
    loss_ckpt, grads_ckpt = _packed_grads(model, docs)
    assert torch.equal(loss, loss_ckpt)
    assert grads.keys() == grads_ckpt.keys() and len(grads) > 10
    worst = max(float((grads[n] - grads_ckpt[n]).abs().max() / grads[n].abs().max().clamp(min=1e-12)) for n in grads)
    assert worst <= 1e-5, worst


def test_deep_copy_of_a_patched_model_isolates_on_its_own():
    import copy

    torch.manual_seed(0)
    model = use_packed_attention(family_model("jamba", 1024))
    twin = copy.deepcopy(model)
    mixers = [m for m in twin.modules() if type(m).__name__ == "JambaMambaMixer"]
    assert mixers and all(m.forward.__self__ is m for m in mixers)
    assert all(m._packwise_layer in set(twin.modules()) for m in mixers)  # the copy's own layers
    docs = _docs()
    batch = PackedDataCollator()([{"input_ids": d.tolist()} for d in docs])
    with torch.no_grad():
        assert torch.equal(twin(**batch).logits, model(**batch).logits)
        alone = torch.cat([twin(input_ids=d[None]).logits[0] for d in docs])
    assert float((twin(**batch).logits[0] - alone).abs().max()) <= 1e-6


def test_inner_base_model_isolates_too():
    torch.manual_seed(0)
    model = use_packed_attention(family_model("jamba", 1024))
    docs = _docs()
    batch = PackedDataCollator()([{"input_ids": d.tolist()} for d in docs])
    batch.pop("labels")
    with torch.no_grad():
        packed = model.model(**batch, use_cache=False).last_hidden_state[0]
        alone = [model.model(input_ids=d[None], use_cache=False).last_hidden_state[0] for d in docs]
    assert torch.allclose(packed, torch.cat(alone), atol=1e-6, rtol=0)
    assert "seq_lengths" in __import__("inspect").signature(model.model.forward).parameters


def test_unseen_mixer_subclass_is_refused_by_name():
    from transformers.models.lfm2.modeling_lfm2 import Lfm2ShortConv

    class MyShortConv(Lfm2ShortConv):
        pass

    model = family_model("lfm2", 64)
    layer = next(m for m in model.modules() if hasattr(m, "conv") and isinstance(m.conv, Lfm2ShortConv))
    old = layer.conv
    layer.conv = MyShortConv(model.config, old.layer_idx)
    with pytest.raises(
        PackingRefused, match="MyShortConv subclasses Lfm2ShortConv, a mixer packwise runs per document"
    ):
        use_packed_attention(model, allow=["MyShortConv"])


def test_exact_mixers_stay_refused():
    cfg = transformers.RwkvConfig(vocab_size=64, hidden_size=32, num_hidden_layers=2, attention_hidden_size=32,
                                  intermediate_size=64)  # fmt: skip
    with pytest.raises(PackingRefused, match=r"Rwkv\w+ in model type 'rwkv' carries state"):
        use_packed_attention(transformers.RwkvForCausalLM(cfg))
    with pytest.raises(PackingRefused, match=r"KimiLinearDeltaAttention in model type 'kimi_linear' .* MLA"):
        use_packed_attention(family_model("kimi_linear", 64))


def test_packed_row_with_a_filled_cache_is_refused():
    torch.manual_seed(0)
    model = use_packed_attention(family_model("mamba", 1024))  # no attention layer: only the mixer can refuse
    docs = _docs(lengths=(5, 4))
    with torch.no_grad():
        cache = model(input_ids=docs[0][None], use_cache=True).cache_params
        batch = PackedDataCollator()([{"input_ids": d.tolist()} for d in docs])
        batch.pop("labels")
        with pytest.raises(ValueError, match="MambaMixer got a cache that already holds state"):
            model(**batch, cache_params=cache, use_cache=True)


@pytest.mark.slow
def test_real_trainer_with_gradient_checkpointing_matches_alone(tmp_path):
    """One ``transformers.Trainer`` step on a pack (default ``remove_unused_columns``), gradient checkpointing
    on: the training loss is the per-document reference and the updated weights equal a run without it."""
    datasets = pytest.importorskip("datasets")
    from packwise import pack_dataset

    docs = _docs(lengths=(30, 17, 41))
    table, _ = pack_dataset([{"input_ids": d.tolist()} for d in docs], capacity=128)
    assert table.num_rows == 1

    def train(checkpointing: bool):
        torch.manual_seed(0)
        model = use_packed_attention(family_model("nemotron_h", 1024))
        args = transformers.TrainingArguments(
            output_dir=str(tmp_path / str(checkpointing)), max_steps=1, per_device_train_batch_size=1, report_to=[],
            optim="sgd", learning_rate=0.1, gradient_checkpointing=checkpointing, use_cpu=True,
        )  # fmt: skip
        trainer = transformers.Trainer(
            model=model, args=args, train_dataset=datasets.Dataset(table), data_collator=PackedDataCollator()
        )
        return trainer.train().training_loss, model

    torch.manual_seed(0)
    ref_model = family_model("nemotron_h", 1024)
    with torch.no_grad():
        total = sum(
            float(
                torch.nn.functional.cross_entropy(ref_model(input_ids=d[None]).logits[0, :-1], d[1:], reduction="sum")
            )
            for d in docs
        )
    reference = total / sum(len(d) - 1 for d in docs)
    loss, plain = train(False)
    loss_ckpt, ckpt = train(True)
    assert loss == pytest.approx(reference, abs=1e-5) and loss_ckpt == pytest.approx(reference, abs=1e-5)
    moved = [(a, b, r) for (_, a), (_, b), r in zip(plain.named_parameters(), ckpt.named_parameters(),
                                                     ref_model.parameters())]  # fmt: skip
    assert any(not torch.equal(a, r) for a, _, r in moved)  # the step changed the weights
    assert max(float((a - b).abs().max()) for a, b, _ in moved) <= 1e-6


def test_unverified_vision_tower_of_a_hybrid_family_is_refused_by_name():
    """Qwen3.5's text model is ISOLATED; its VL model's vision tower is not verified: refused, with the opt-in."""
    from packwise.verify._families import _qwen3_5

    vision = dict(depth=1, hidden_size=32, num_heads=2, intermediate_size=64, out_hidden_size=64, patch_size=16,
                  temporal_patch_size=2, spatial_merge_size=2)  # fmt: skip
    cfg = transformers.Qwen3_5Config(text_config=_qwen3_5(transformers, 1024).to_dict(), vision_config=vision)
    with pytest.raises(PackingRefused, match=r"not verified: Qwen3_5VisionBlock .* --allow Qwen3_5VisionAttention,"):
        use_packed_attention(transformers.Qwen3_5ForConditionalGeneration(cfg))


def test_bad_input_is_refused_by_name():
    torch.manual_seed(0)
    model = use_packed_attention(family_model("mamba", 1024))  # no attention layer: the mixer itself must refuse
    ids = torch.randint(1, 1024, (1, 9))
    pos = torch.tensor([[0, 1, 2, 0, 1, 2, 3, 4, 5]])
    cu = torch.tensor([0, 3, 7], dtype=torch.int32)  # ends at 7, the row has 9 tokens
    with pytest.raises(ValueError, match=r"MambaMixer got hidden_states of shape \(1, 9, 64\) but the packed row's "):
        model(input_ids=ids, position_ids=pos, cu_seq_lens_q=cu, cu_seq_lens_k=cu, use_cache=False)
    two = torch.randint(1, 1024, (2, 9))  # a [2, T] batch with one set of boundaries
    cu = torch.tensor([0, 9, 18], dtype=torch.int32)
    with pytest.raises(ValueError, match=r"hidden_states of shape \(2, 9, 64\) .* packed rows are \[1, T\]"):
        model(input_ids=two, position_ids=torch.arange(9).repeat(2, 1), cu_seq_lens_q=cu, cu_seq_lens_k=cu,
              use_cache=False)  # fmt: skip


def test_checkpointed_replay_with_two_different_rows_pending_raises():
    torch.manual_seed(0)
    model = use_packed_attention(family_model("nemotron_h", 1024)).train()
    model.activation_checkpointing_enable(activation_checkpointing_kwargs={"use_reentrant": False})
    collate = PackedDataCollator()
    a = model(**collate([{"input_ids": d.tolist()} for d in _docs(lengths=(5, 7))]), use_cache=False).loss
    b = model(**collate([{"input_ids": d.tolist()} for d in _docs(lengths=(8, 4))]), use_cache=False).loss
    with pytest.raises(ValueError, match="2 packed rows of different boundaries pending"):
        (a + b).backward()
