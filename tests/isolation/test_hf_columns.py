"""Every column a row carries reaches PackedDataCollator's batch or is refused by name (#28 item 1): a scalar or
string column (``{"id": "row-7"}``) is refused unless dropped by name (counted); Trainer's default
``remove_unused_columns=True`` removes it before the collator. An unpatched MoE model under a Trainer would swallow
the collator's ``padding_mask`` in ``**kwargs`` (its load-balancing loss then counts padding): refused."""

from __future__ import annotations

import pytest
import torch

from packwise.hf import PackedDataCollator, use_packed_attention
from tests.isolation.test_trainer_defaults import LENGTHS, Spy, _docs, _model, _reference_loss

datasets = pytest.importorskip("datasets")
transformers = pytest.importorskip("transformers")
pytestmark = pytest.mark.filterwarnings("ignore")

ROWS = [{"input_ids": [1, 2, 3], "id": "row-7"}, {"input_ids": [4, 5]}, {"input_ids": [6, 7, 8, 9], "id": "row-9"}]


def test_string_and_scalar_columns_are_refused_by_name_with_the_fix():
    with pytest.raises(ValueError, match=r"feature 0: column 'id' holds str 'row-7', not one value per token") as e:
        PackedDataCollator()(ROWS)
    assert "dataset.remove_columns(['id'])" in str(e.value) and "drop_columns=('id',)" in str(e.value)
    with pytest.raises(ValueError, match=r"feature 1: column 'length' holds int 2"):
        PackedDataCollator()([{"input_ids": [1, 2, 3]}, {"input_ids": [4, 5], "length": 2}])


def test_dropped_columns_are_counted_and_the_batch_is_the_rows_without_them():
    collate = PackedDataCollator(drop_columns=("id",))
    batch = collate(ROWS)
    assert collate.dropped_columns == {"id": 2}  # rows 0 and 2 carried it
    collate(ROWS[:1])
    assert collate.dropped_columns == {"id": 3}
    plain = PackedDataCollator()([{"input_ids": r["input_ids"]} for r in ROWS])
    assert sorted(batch) == sorted(plain) and "id" not in batch
    assert batch["input_ids"].tolist() == [[1, 2, 3, 4, 5, 6, 7, 8, 9]]
    assert all(torch.equal(batch[k], plain[k]) for k in ("input_ids", "labels", "position_ids", "cu_seq_lens_q"))


def test_drop_columns_must_be_column_names_and_not_the_tokens():
    with pytest.raises(TypeError, match=r"drop_columns='id': pass a tuple of column names"):
        PackedDataCollator(drop_columns="id")
    with pytest.raises(TypeError, match="drop_columns names 'input_ids'"):
        PackedDataCollator(drop_columns=("input_ids",))


def _with_ids(vocab: int):
    docs = _docs(vocab)
    return datasets.Dataset.from_dict({"input_ids": docs, "id": [f"row-{i}" for i in range(len(docs))]})


def _args(tmp_path, **kw):
    return transformers.TrainingArguments(
        output_dir=str(tmp_path), max_steps=1, per_device_train_batch_size=3, report_to=[], **kw
    )


@pytest.mark.slow
def test_trainer_defaults_train_on_a_dataset_with_an_id_column(tmp_path):
    vocab = 97
    model = use_packed_attention(_model(vocab), backend="sdpa")
    reference = _reference_loss(model, vocab)
    spy = Spy()
    args = _args(tmp_path)
    assert args.remove_unused_columns is True  # the default: the Trainer removes 'id' before the collator
    result = transformers.Trainer(model=model, args=args, train_dataset=_with_ids(vocab), data_collator=spy).train()
    (batch,) = spy.batches
    cu = batch["cu_seq_lens_q"].tolist()
    assert sorted(b - a for a, b in zip(cu, cu[1:])) == sorted(LENGTHS) and "id" not in batch
    assert result.training_loss == pytest.approx(reference, abs=1e-5)  # the three documents alone


def test_trainer_keeping_the_id_column_is_refused_before_a_step(tmp_path):
    vocab = 97
    model = use_packed_attention(_model(vocab), backend="sdpa")
    before = [p.detach().clone() for p in model.parameters()]
    trainer = transformers.Trainer(
        model=model, args=_args(tmp_path, remove_unused_columns=False), train_dataset=_with_ids(vocab),
        data_collator=PackedDataCollator(),
    )  # fmt: skip
    with pytest.raises(ValueError, match=r"column 'id' holds str 'row-\d'"):
        trainer.train()
    assert all(torch.equal(a, b) for a, b in zip(before, model.parameters()))


def _moe(vocab: int):
    from packwise.verify._families import _base

    torch.manual_seed(0)
    cfg = transformers.Qwen3MoeConfig(**_base(vocab), num_experts=4, num_experts_per_tok=2, moe_intermediate_size=32)
    return transformers.Qwen3MoeForCausalLM(cfg)


def test_unpatched_moe_model_swallows_padding_mask_and_a_trainer_refuses_it(tmp_path):
    vocab = 97
    rows = [{"input_ids": list(range(3, 14))}, {"input_ids": list(range(20, 27))}, {"input_ids": list(range(40, 45))}]
    model = _moe(vocab).eval()
    with torch.no_grad():  # what the refusal prevents: the unpatched forward ignores padding_mask
        tight = model(**PackedDataCollator()(rows), output_router_logits=True).aux_loss
        padded = model(**PackedDataCollator(alignment=8)(rows), output_router_logits=True).aux_loss
    assert round(float(tight), 4) == 2.0400 and round(float(padded), 4) == 2.0163  # padding counted
    data = datasets.Dataset.from_dict({"input_ids": [r["input_ids"] for r in rows]})
    before = [p.detach().clone() for p in model.parameters()]
    trainer = transformers.Trainer(
        model=model.train(), args=_args(tmp_path), train_dataset=data, data_collator=PackedDataCollator(alignment=8)
    )
    with pytest.raises(ValueError, match=r"has 9 padding tokens \(alignment=8.*Qwen3MoeForCausalLM computes MoE"):
        trainer.train()
    assert all(torch.equal(a, b) for a, b in zip(before, model.parameters()))


def test_packed_row_per_document_column_is_refused_by_name_and_dropped_counted():
    import packwise

    table, _ = packwise.pack_dataset([{"input_ids": [1, 2, 3]}, {"input_ids": [4, 5]}], capacity=8)
    rows = table.to_pylist()
    assert rows[0]["source_index"] == [0, 1]  # pack_dataset's per-document provenance
    with pytest.raises(ValueError, match=r"column 'source_index' of a packed row has 2 values \(one per document\)"):
        PackedDataCollator()(rows)
    collate = PackedDataCollator(drop_columns=("source_index",))
    batch = collate(rows)
    assert batch["cu_seq_lens_q"].tolist() == [0, 3, 5] and collate.dropped_columns == {"source_index": 1}
