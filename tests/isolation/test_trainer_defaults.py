"""Real ``transformers.Trainer`` and ``trl.SFTTrainer`` with DEFAULT arguments (remove_unused_columns=True).

A packwise pack must either stay isolated (the step-1 training loss equals the per-document reference) or
raise before the first optimizer step — never merge silently (Trainer prunes ``seq_lengths``).
"""

from __future__ import annotations

import pytest
import torch

from packwise import pack_dataset
from packwise.hf import PackedDataCollator, use_packed_attention
from packwise.verify import tiny_config

datasets = pytest.importorskip("datasets")
transformers = pytest.importorskip("transformers")
pytestmark = pytest.mark.filterwarnings("ignore")

LENGTHS = (30, 17, 41)


def _model(vocab: int, seed: int = 0):
    torch.manual_seed(seed)
    return transformers.AutoModelForCausalLM.from_config(tiny_config("tiny-llama", vocab), dtype=torch.float32)


def _docs(vocab: int) -> list[list[int]]:
    g = torch.Generator().manual_seed(3)
    return [torch.randint(0, vocab, (n,), generator=g).tolist() for n in LENGTHS]


def _one_pack(vocab: int):
    table, _ = pack_dataset([{"input_ids": d} for d in _docs(vocab)], capacity=128)
    assert table.num_rows == 1 and sorted(table.column("seq_lengths")[0].as_py()) == sorted(LENGTHS)
    return datasets.Dataset(table)


def _reference_loss(model, vocab: int) -> float:
    """Token-mean loss of the documents run ALONE (first label of each document ignored, as packed)."""
    total, count = 0.0, 0
    with torch.no_grad():
        for d in _docs(vocab):
            ids = torch.tensor([d])
            logits = model(input_ids=ids).logits[0, :-1]
            total += float(torch.nn.functional.cross_entropy(logits, ids[0, 1:], reduction="sum"))
            count += len(d) - 1
    return total / count


class Spy(PackedDataCollator):
    def __init__(self):
        super().__init__()
        self.batches = []

    def __call__(self, features):
        out = super().__call__(features)
        self.batches.append(out)
        return out


def _args(cls, tmp_path, **kw):
    return cls(output_dir=str(tmp_path), max_steps=1, per_device_train_batch_size=1, report_to=[], **kw)


@pytest.mark.slow
def test_trainer_defaults_keep_documents_isolated(tmp_path):
    vocab = 97
    model = use_packed_attention(_model(vocab), backend="sdpa")
    reference = _reference_loss(model, vocab)
    spy = Spy()
    args = _args(transformers.TrainingArguments, tmp_path)
    assert args.remove_unused_columns is True  # the default under test
    result = transformers.Trainer(model=model, args=args, train_dataset=_one_pack(vocab), data_collator=spy).train()
    (batch,) = spy.batches
    cu = batch["cu_seq_lens_q"].tolist()
    assert len(cu) == 4 and sorted(b - a for a, b in zip(cu, cu[1:])) == sorted(LENGTHS)  # 3 documents, not 1
    assert result.training_loss == pytest.approx(reference, abs=1e-5)


def test_trainer_defaults_unpatched_model_raises_before_training(tmp_path):
    vocab = 97
    model = _model(vocab)
    before = [p.detach().clone() for p in model.parameters()]
    trainer = transformers.Trainer(
        model=model, args=_args(transformers.TrainingArguments, tmp_path), train_dataset=_one_pack(vocab),
        data_collator=PackedDataCollator(),
    )  # fmt: skip
    with pytest.raises(ValueError, match="removed the 'seq_lengths' column") as info:
        trainer.train()
    assert "use_packed_attention(model)" in str(info.value) and "remove_unused_columns=False" in str(info.value)
    assert all(torch.equal(a, b) for a, b in zip(before, model.parameters()))  # no optimizer step happened


def test_trainer_defaults_unpatched_model_torch_dataset_raises(tmp_path):
    """A plain list (map-style torch dataset) of packed rows: the Trainer prunes keys per batch, still loud."""
    vocab = 97
    model = _model(vocab)
    rows = [{k: v for k, v in row.items()} for row in _one_pack(vocab).to_list()]
    assert "seq_lengths" in rows[0]
    trainer = transformers.Trainer(
        model=model, args=_args(transformers.TrainingArguments, tmp_path), train_dataset=rows,
        data_collator=PackedDataCollator(),
    )  # fmt: skip
    with pytest.raises(ValueError, match="removed the 'seq_lengths' column"):
        trainer.train()


@pytest.mark.slow
def test_sft_trainer_defaults_keep_documents_isolated(tmp_path):
    trl = pytest.importorskip("trl")
    from packwise.text import load_tokenizer

    tok = load_tokenizer("qwen2.5")
    vocab = len(tok)
    model = use_packed_attention(_model(vocab), backend="sdpa")
    reference = _reference_loss(model, vocab)
    spy = Spy()
    # SFTConfig defaults to bf16 (GPU); this CPU fp32 run changes only precision, not the data path under test
    trainer = trl.SFTTrainer(
        model=model, args=_args(trl.SFTConfig, tmp_path, use_cpu=True, bf16=False), train_dataset=_one_pack(vocab), data_collator=spy,
        processing_class=tok,
    )  # fmt: skip
    result = trainer.train()
    (batch,) = spy.batches
    cu = batch["cu_seq_lens_q"].tolist()
    assert sorted(b - a for a, b in zip(cu, cu[1:])) == sorted(LENGTHS)
    assert result.training_loss == pytest.approx(reference, abs=1e-5)


def test_patched_model_refuses_packed_row_without_boundaries():
    model = use_packed_attention(_model(97), backend="sdpa")
    ids = torch.randint(0, 97, (1, 8))
    pos = torch.tensor([[0, 1, 2, 3, 0, 1, 2, 3]])
    for use_cache in (True, False):
        with pytest.raises(ValueError, match="position_ids restart at token 4 but no cu_seq_lens_q/k"):
            model(input_ids=ids, position_ids=pos, use_cache=use_cache)
    with pytest.raises(ValueError, match="seq_lengths reached the model"):
        model(input_ids=ids, seq_lengths=torch.tensor([[4, 4]]))
    # an unpacked row, a padded batch and generation still work
    assert model(input_ids=ids).logits.shape == (1, 8, 97)
    mask = torch.tensor([[0, 0, 1, 1, 1, 1, 1, 1]])
    out = model.generate(input_ids=ids, attention_mask=mask, max_new_tokens=3, do_sample=False, pad_token_id=0)
    assert out.shape == (1, 11)


@pytest.mark.slow
def test_sft_trainer_padding_free_reads_seq_lengths(tmp_path):
    """TRL's own padding_free collator (no PackedDataCollator) turns seq_lengths into cu_seq_lens_q/k: isolated."""
    trl = pytest.importorskip("trl")
    from packwise.text import load_tokenizer

    tok = load_tokenizer("qwen2.5")
    vocab = len(tok)
    model = use_packed_attention(_model(vocab), backend="sdpa")
    reference = _reference_loss(model, vocab)
    seen = []
    model.register_forward_pre_hook(lambda m, a, k: seen.append(k["cu_seq_lens_q"].tolist()), with_kwargs=True)
    args = _args(trl.SFTConfig, tmp_path, use_cpu=True, bf16=False, padding_free=True, max_length=None)
    result = trl.SFTTrainer(model=model, args=args, train_dataset=_one_pack(vocab), processing_class=tok).train()
    cu = seen[0]
    assert sorted(b - a for a, b in zip(cu, cu[1:])) == sorted(LENGTHS)
    assert result.training_loss == pytest.approx(reference, abs=1e-5)
