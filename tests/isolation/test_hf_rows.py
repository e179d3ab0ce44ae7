"""What a row carries reaches the packed batch (issue #28 items 4 and 7): BERT's ``token_type_ids`` per
document, one ``position_ids`` rule on every loader (the row's own positions), an empty row refused."""

from __future__ import annotations

import pytest
import torch

from packwise.assemble import assemble_pack, collate_packs
from packwise.hf import PackedDataCollator, use_packed_attention
from packwise.verify import family_model

VOCAB = 97


def test_token_type_ids_travel_per_document_and_bert_logits_equal_alone():
    torch.manual_seed(0)
    model = use_packed_attention(family_model("bert", VOCAB), backend="sdpa")
    rows = [
        {"input_ids": [5, 6, 7, 8, 9], "token_type_ids": [0, 0, 1, 1, 1]},
        {"input_ids": [10, 11, 12], "token_type_ids": [0, 1, 1]},
    ]
    batch = PackedDataCollator()(rows)
    assert batch["token_type_ids"].tolist() == [[0, 0, 1, 1, 1, 0, 1, 1]]
    with torch.no_grad():
        packed = model(**{k: v for k, v in batch.items() if k != "labels"}).logits[0]
        model.set_attn_implementation("sdpa")
        alone = [
            model(input_ids=torch.tensor([r["input_ids"]]), token_type_ids=torch.tensor([r["token_type_ids"]])).logits[
                0
            ]
            for r in rows
        ]
    assert (packed - torch.cat(alone)).abs().max().item() < 1e-5  # before: 0.56-0.66 (token types dropped)


def test_packed_row_token_type_ids_split_by_seq_lengths():
    row = {"input_ids": [1, 2, 3, 4, 5, 6], "seq_lengths": [4, 2], "token_type_ids": [0, 0, 1, 1, 0, 1]}
    batch = PackedDataCollator(alignment=4)([row])
    assert batch["token_type_ids"].tolist() == [[0, 0, 1, 1, 0, 1, 0, 0]]  # alignment padding: 0
    assert batch["cu_seq_lens_q"].tolist() == [0, 4, 8]


@pytest.mark.parametrize("packed", [False, True])
def test_position_ids_one_rule_on_every_loader(packed):
    # A row's own positions (a chunk that continues a longer document at 10) are kept, as collate_packs keeps them.
    docs = [{"input_ids": [1, 2, 3, 4], "position_ids": [10, 11, 12, 13]}, {"input_ids": [5, 6]}]
    reference = collate_packs([assemble_pack(docs)], labels="hf")["position_ids"].tolist()
    assert reference == [[10, 11, 12, 13, 0, 1]]
    if packed:  # one row of `packwise pack` output with its positions (before: restarted to [0..3, 0, 1])
        rows = [{"input_ids": [1, 2, 3, 4, 5, 6], "seq_lengths": [4, 2], "position_ids": [10, 11, 12, 13, 0, 1]}]
    else:
        rows = docs
    assert PackedDataCollator()(rows)["position_ids"].tolist() == reference


@pytest.mark.parametrize("rows", [[{"input_ids": []}], [{"input_ids": [1, 2]}, {"input_ids": torch.tensor([])}]])
def test_empty_row_is_refused_by_name(rows):
    index = len(rows) - 1
    with pytest.raises(ValueError, match=rf"feature {index} has no tokens \(input_ids is empty\)"):
        PackedDataCollator()(rows)
