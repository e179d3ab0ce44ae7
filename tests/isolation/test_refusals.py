"""Silent-wrong paths found by break-testing, each now loud: boundaries the attention cannot see, Trainer
pruning on datasets packwise cannot inspect, models that cannot switch attention, stateful mixers whatever
``allow`` says, heads that pool one prediction per row, truncated packs and negative token ids.
"""

from __future__ import annotations

import pytest
import torch

from packwise import pack_dataset
from packwise.assemble import assemble_batch
from packwise.hf import PackedDataCollator, PackingRefused, use_packed_attention
from packwise.verify import tiny_config

transformers = pytest.importorskip("transformers")
pytestmark = pytest.mark.filterwarnings("ignore")
V = 97


def _llama(cls=None, **kw):
    torch.manual_seed(0)
    cfg = tiny_config("tiny-llama", V)
    for k, v in kw.items():
        setattr(cfg, k, v)
    return transformers.AutoModelForCausalLM.from_config(cfg, dtype=torch.float32) if cls is None else cls(cfg)


def _packed_row():
    """3 documents (5, 3, 4 tokens) in one row with restarting positions."""
    ids = torch.arange(1, 13).view(1, 12)
    pos = torch.tensor([[0, 1, 2, 3, 4, 0, 1, 2, 0, 1, 2, 3]])
    return ids, pos


def test_mask_of_ones_does_not_hide_restarting_positions():
    model = use_packed_attention(_llama(), backend="sdpa")
    ids, pos = _packed_row()
    with pytest.raises(ValueError, match="position_ids restart at token 5 but no cu_seq_lens_q/k"):
        model(input_ids=ids, position_ids=pos, attention_mask=torch.ones_like(ids), use_cache=False)
    # HF left padding: positions restart after the pads (mask 0 before the first real token) — allowed
    mask = torch.tensor([[0, 0, 0, 1, 1, 1, 1, 1, 1, 1, 1, 1]])
    left = (mask.cumsum(-1) - 1).masked_fill(mask == 0, 1)
    assert model(input_ids=ids, position_ids=left, attention_mask=mask).logits.shape == (1, 12, V)


def test_cu_seq_lens_that_merge_documents_are_refused():
    model = use_packed_attention(_llama(), backend="sdpa")
    ids, pos = _packed_row()
    one = torch.tensor([0, 12], dtype=torch.int32)
    with pytest.raises(
        ValueError, match=r"position_ids restart at token 5 inside a segment of cu_seq_lens_q \[0, 12\]"
    ):
        model(input_ids=ids, position_ids=pos, cu_seq_lens_q=one, cu_seq_lens_k=one, max_length_q=12,
              max_length_k=12, use_cache=False)  # fmt: skip
    # the collator's own boundaries (padded segments included) pass
    batch = PackedDataCollator(alignment=4, pad_to_multiple_of=16)([{"input_ids": [1, 2, 3]}, {"input_ids": [4, 5]}])
    assert model(**{k: v for k, v in batch.items() if k != "labels"}).logits.shape == (1, 16, V)


def _packs():
    rows = [{"input_ids": list(range(1 + 10 * i, 11 + 10 * i))} for i in range(6)]
    packs = pack_dataset(rows, capacity=30)[0].to_pylist()
    assert packs[0]["seq_lengths"] == [10, 10, 10]
    return packs


class _Iterable(torch.utils.data.IterableDataset):
    def __init__(self, rows):
        self.rows = rows

    def __iter__(self):
        return iter(self.rows)


def _trainer(model, dataset, tmp_path, **kw):
    args = transformers.TrainingArguments(
        output_dir=str(tmp_path), max_steps=1, per_device_train_batch_size=1, report_to=[], use_cpu=True, **kw
    )
    return transformers.Trainer(model=model, args=args, train_dataset=dataset, data_collator=PackedDataCollator())


@pytest.mark.parametrize("kind", ["torch", "datasets"])
def test_trainer_defaults_unpatched_iterable_dataset_raises(kind, tmp_path):
    datasets = pytest.importorskip("datasets")
    packs = _packs()
    dataset = _Iterable(packs) if kind == "torch" else datasets.IterableDataset.from_generator(lambda: iter(packs))
    model = _llama()
    before = [p.detach().clone() for p in model.parameters()]
    with pytest.raises(ValueError, match="cannot be inspected") as info:
        _trainer(model, dataset, tmp_path, accelerator_config={"dispatch_batches": False}).train()
    assert "use_packed_attention(model)" in str(info.value) and "remove_unused_columns=False" in str(info.value)
    assert all(torch.equal(a, b) for a, b in zip(before, model.parameters()))


def test_trainer_defaults_to_iterable_dataset_keeps_its_message(tmp_path):
    datasets = pytest.importorskip("datasets")
    dataset = datasets.Dataset.from_list(_packs()).to_iterable_dataset()
    with pytest.raises(ValueError, match="removed the 'seq_lengths' column"):
        _trainer(_llama(), dataset, tmp_path, accelerator_config={"dispatch_batches": False}).train()


def test_trainer_iterable_dataset_patched_model(tmp_path):
    """accelerate dispatches an iterable dataset's batches and slices cu_seq_lens_q to [0]: named up front."""
    model = use_packed_attention(_llama(), backend="sdpa")
    with pytest.raises(ValueError, match=r"accelerator_config=\{'dispatch_batches': False\}"):
        _trainer(model, _Iterable(_packs()), tmp_path).train()
    off = {"dispatch_batches": False}
    assert _trainer(model, _Iterable(_packs()), tmp_path, accelerator_config=off).train().global_step == 1


def test_model_that_cannot_switch_attention_is_refused():
    cfg = transformers.FalconConfig(vocab_size=V, hidden_size=32, num_hidden_layers=1, num_attention_heads=4)
    model = transformers.FalconForCausalLM(cfg)
    with pytest.raises(ValueError, match=r"FalconForCausalLM did not switch .*config._attn_implementation='sdpa'"):
        use_packed_attention(model, allow=["FalconAttention", "FalconDecoderLayer"])


@pytest.mark.parametrize(
    ("config", "mixer"),
    [
        (lambda: transformers.RwkvConfig(vocab_size=V, hidden_size=64, num_hidden_layers=2, attention_hidden_size=64,
                                         intermediate_size=128), "Rwkv"),
        (lambda: transformers.RecurrentGemmaConfig(vocab_size=V, hidden_size=32, intermediate_size=64,
                                                   num_hidden_layers=2, num_attention_heads=4, lru_width=32,
                                                   block_types=["recurrent", "attention"]),
         "RecurrentGemma"),
        (lambda: transformers.KimiLinearConfig(vocab_size=V, hidden_size=32, intermediate_size=64, num_hidden_layers=2,
                                               num_attention_heads=4, num_key_value_heads=2, pad_token_id=0),
         "KimiLinearDeltaAttention"),
    ],
)  # fmt: skip
def test_stateful_mixers_are_refused_whatever_allow_says(config, mixer):
    model = transformers.AutoModelForCausalLM.from_config(config())
    allow = sorted({type(m).__name__ for m in model.modules()})
    with pytest.raises(PackingRefused, match=rf"{mixer}\w* in model type .* carries state along the sequence"):
        use_packed_attention(model, allow=allow)


@pytest.mark.parametrize(
    "head", ["LlamaForSequenceClassification", "LlamaForQuestionAnswering", "BertForNextSentencePrediction"]
)
def test_heads_that_pool_one_prediction_per_row_are_refused(head):
    if head.startswith("Bert"):
        cfg = transformers.BertConfig(vocab_size=V, hidden_size=32, num_hidden_layers=1, num_attention_heads=4,
                                      intermediate_size=64)  # fmt: skip
        model = getattr(transformers, head)(cfg)
    else:
        model = _llama(getattr(transformers, head), pad_token_id=0)
    with pytest.raises(PackingRefused, match=f"{head} pools one prediction per row"):
        use_packed_attention(model)


def test_truncated_pack_names_the_truncating_trainer():
    with pytest.raises(ValueError, match=r"documents hold 1800 tokens but only 1024 arrived .*max_length=None"):
        PackedDataCollator()([{"input_ids": [5] * 1024, "seq_lengths": [700, 600, 500]}])


def test_negative_token_ids_are_refused_on_the_fused_path():
    with pytest.raises(ValueError, match="input_ids has -2 at position 1"):
        PackedDataCollator()([{"input_ids": [1, -2, 3]}])
    with pytest.raises(ValueError, match="input_ids has -2 at position 1"):
        assemble_batch([[{"input_ids": torch.tensor([1, -2, 3])}]])
