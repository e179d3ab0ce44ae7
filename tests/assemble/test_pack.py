"""assemble_pack goldens a human can check, and validation messages."""

from __future__ import annotations

import pytest
import torch

from packwise.assemble import assemble_pack

X = -100


def test_positions_restart_and_first_label_masked():
    p = assemble_pack([{"input_ids": [1, 2, 3]}, {"input_ids": [4, 5, 6]}])
    assert p.position_ids.tolist() == [0, 1, 2, 0, 1, 2]
    assert p.labels.tolist() == [X, 2, 3, X, 5, 6]
    assert p.cu_seqlens.tolist() == [0, 3, 6] and p.cu_seqlens.dtype == torch.int32
    assert (p.max_seqlen, p.total_tokens, p.num_sequences) == (3, 6, 2)
    assert p.seq_idx.tolist() == [0, 0, 0, 1, 1, 1] and not p.padding_mask.any()


def test_shifted_labels_mask_the_last_target():
    # Megatron convention: labels[t] is the target of position t (the next token); the last one of each
    # sequence would predict the next document's first token.
    p = assemble_pack([{"input_ids": [1, 2, 3]}, {"input_ids": [4, 5, 6]}], labels_shifted=True)
    assert p.labels.tolist() == [2, 3, X, 5, 6, X]
    # a Megatron row (labels = text[1:] with its loss_mask) keeps every given target, the last one too
    q = assemble_pack([{"input_ids": [1, 2, 3], "labels": [2, 3, 9], "loss_mask": [1, 1, 1]}], labels_shifted=True)
    assert q.labels.tolist() == [2, 3, 9]


def test_loss_mask_becomes_labels():
    p = assemble_pack([{"input_ids": [1, 2, 3], "loss_mask": [0, 1, 1]}, {"input_ids": [4, 5], "loss_mask": [1, 0]}])
    assert p.labels.tolist() == [X, 2, 3, X, X]


def test_alignment_golden():
    p = assemble_pack([{"input_ids": [1] * 5}, {"input_ids": [2] * 7}], alignment=4, pad_token_id=0)
    assert p.cu_seqlens.tolist() == [0, 5, 12]
    assert p.cu_seqlens_padded.tolist() == [0, 8, 16]
    assert p.input_ids.tolist() == [1] * 5 + [0] * 3 + [2] * 7 + [0]
    # alignment padding keeps counting: the padded segment is one arange
    assert p.position_ids.tolist() == list(range(8)) + list(range(8))
    assert p.padding_mask.nonzero().flatten().tolist() == [5, 6, 7, 15]
    assert p.labels.tolist() == [X, 1, 1, 1, 1, X, X, X, X, 2, 2, 2, 2, 2, 2, X]
    assert (p.max_seqlen, p.max_seqlen_padded) == (7, 8)


def test_tail_padding_is_one_segment():
    p = assemble_pack([{"input_ids": list(range(1, 101))}], pad_to=10_000)
    assert p.total_tokens == 10_000 and p.tail == 9_900
    assert p.seq_idx.unique().tolist() == [0, 1]  # exactly one padding segment
    assert p.position_ids[100:].tolist() == list(range(9_900))  # an arange, never zeros
    starts = (p.position_ids == 0).nonzero().flatten().tolist()
    assert starts == [0, 100]  # position-based detection sees 2 documents, not 9,901
    assert p.padding_mask.sum() == 9_900 and (p.labels[100:] == X).all()


def test_mrope_positions_and_padding():
    pos = torch.tensor([[0, 1, 1, 2], [0, 1, 2, 2], [0, 1, 1, 3]])
    p = assemble_pack([{"input_ids": [7, 8, 9, 10], "position_ids": pos}, {"input_ids": [1, 2]}], pad_to=8)
    assert p.position_ids.shape == (3, 8)
    assert p.position_ids[:, :4].tolist() == pos.tolist()
    assert p.position_ids[:, 4:6].tolist() == [[0, 1]] * 3  # text-only sequence: identical rows
    assert p.position_ids[:, 6:].tolist() == [[0, 1]] * 3  # tail arange


def test_extra_columns_keep_dtype_shape_and_pad_value():
    seqs = [
        {"input_ids": [1, 2], "emb": torch.ones(2, 3), "flag": [True, False], "mm_token_type_ids": [0, 1]},
        {"input_ids": [3], "emb": torch.zeros(1, 3), "flag": [True], "mm_token_type_ids": [2]},
    ]
    p = assemble_pack(seqs, alignment=2, pad_values={"mm_token_type_ids": -1})
    assert p.columns["emb"].shape == (4, 3) and p.columns["emb"].dtype == torch.float32
    assert p.columns["flag"].tolist() == [True, False, True, False]
    assert p.columns["mm_token_type_ids"].tolist() == [0, 1, 2, -1]


def test_metadata_stays_a_list():
    p = assemble_pack([{"input_ids": [1], "key": "a"}, {"input_ids": [2], "key": "b"}])
    assert p.metadata == {"key": ["a", "b"]}
    assert p.to_dict()["metadata"] == {"key": ["a", "b"]}


@pytest.mark.parametrize(
    ("seqs", "kwargs", "message"),
    [
        ([{"input_ids": [1, 2], "labels": [1]}], {}, "sequence 0: column 'labels' has 1 tokens but input_ids has 2"),
        ([{"input_ids": [1]}, {"input_ids": [1, 2], "x": [1]}], {}, "sequence 1: per-token columns"),
        ([{"input_ids": [1, 2], "x": [1, 2, 3]}], {}, "sequence 0: column 'x' has 3 tokens but input_ids has 2"),
        ([{"input_ids": []}], {}, "sequence 0 is empty (0 tokens)"),
        (
            [{"input_ids": [1] * 5}, {"input_ids": [2] * 7}],
            {"alignment": 4, "pad_to": 12},
            "pack holds 16 tokens (12 real + 4 alignment) > pad_to=12",
        ),
        ([{"input_ids": [1, 2], "position_ids": [[0, 1]] * 2}], {}, "sequence 0: position_ids has shape (2, 2)"),
        ([{"input_ids": [1]}], {"alignment": 0}, "alignment must be an integer >= 1"),
        ([], {}, "at least one sequence"),
    ],
)
def test_validation(seqs, kwargs, message):
    with pytest.raises(ValueError) as info:
        assemble_pack(seqs, **kwargs)
    assert message in str(info.value)


def test_labels_only_stage():
    p = assemble_pack([{"labels": [5, 6, 7]}, {"labels": [8, 9]}])
    assert p.input_ids is None and p.labels.tolist() == [X, 6, 7, X, 9]
