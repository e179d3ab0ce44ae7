"""Break-test findings (HF / assemble / loss): each was silent or a crash; each is now right or loud."""

from __future__ import annotations

import pytest
import torch

from packwise.hf import PackedDataCollator


@pytest.mark.parametrize("lengths", [[[3, 2]], torch.tensor([[3, 2]])])
def test_nested_seq_lengths_refused_not_truncated(lengths):
    with pytest.raises(ValueError, match=r"seq_lengths has shape \(1, 2\); it must be 1-D"):
        PackedDataCollator()([{"input_ids": [1, 2, 3, 4, 5], "seq_lengths": lengths}])


def test_flat_seq_lengths_keep_every_token():
    batch = PackedDataCollator()([{"input_ids": [1, 2, 3, 4, 5], "seq_lengths": [3, 2]}])
    assert batch["input_ids"].tolist() == [[1, 2, 3, 4, 5]]
    assert batch["cu_seq_lens_q"].tolist() == [0, 3, 5]


def test_cu_seq_lens_k_differing_from_q_refused_by_the_patched_forward():
    from packwise.hf import use_packed_attention
    from packwise.verify import family_model

    model = use_packed_attention(family_model("llama", 97), backend="sdpa")
    ids, pos = torch.tensor([[5, 6, 7, 8]]), torch.tensor([[0, 1, 0, 1]])
    q, k = torch.tensor([0, 2, 4], dtype=torch.int32), torch.tensor([0, 1, 4], dtype=torch.int32)
    with pytest.raises(ValueError, match=r"cu_seq_lens_k \[0, 1, 4\] differs from cu_seq_lens_q \[0, 2, 4\]"):
        model(input_ids=ids, position_ids=pos, cu_seq_lens_q=q, cu_seq_lens_k=k, use_cache=False)
    with pytest.raises(ValueError, match=r"cu_seq_lens_k \[0, 1, 4\] differs from cu_seq_lens_q None"):
        model(input_ids=ids, position_ids=pos, cu_seq_lens_k=k, use_cache=False)
    with torch.no_grad():  # the same boundaries run
        out = model(input_ids=ids, position_ids=pos, cu_seq_lens_q=q, cu_seq_lens_k=q, max_length_q=2, max_length_k=2)
    assert tuple(out.logits.shape) == (1, 4, 97)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64, torch.bool])
def test_packed_cross_entropy_refuses_non_integer_labels(dtype):
    from packwise.loss import packed_cross_entropy

    logits = torch.zeros(1, 3, 4)
    labels = torch.tensor([[0.0, 2.7, 1.0]]).to(dtype)
    with pytest.raises(TypeError, match=f"labels has dtype {dtype}; labels are token ids or -100"):
        packed_cross_entropy(logits, labels)
    # integer labels of the same values: log(4) per target, 2 targets
    loss = packed_cross_entropy(logits, torch.tensor([[0, 2, 1]]), reduction="sum")
    assert round(float(loss), 4) == round(2 * float(torch.log(torch.tensor(4.0))), 4)


def test_pad_token_id_outside_the_vocabulary_refused_everywhere():
    from packwise.assemble import assemble_batch, assemble_pack, collate_packs

    seq = {"input_ids": [1, 2]}
    with pytest.raises(ValueError, match=r"pad_token_id=500 is outside the vocabulary \[0, 100\)"):
        assemble_pack([seq], pad_to=4, pad_token_id=500, vocab_size=100)
    negative = r"pad_token_id=-1 is negative; padding is a token id >= 0"
    with pytest.raises(ValueError, match=negative):
        assemble_pack([seq], pad_to=4, pad_token_id=-1)
    with pytest.raises(ValueError, match=negative):
        collate_packs([assemble_pack([seq])], pad_token_id=-1)
    with pytest.raises(ValueError, match=negative):
        assemble_batch([[seq]], pad_token_id=-1)
    with pytest.raises(ValueError, match=negative):
        PackedDataCollator(pad_token_id=-1)([seq])
    assert assemble_pack([seq], pad_to=4, pad_token_id=99, vocab_size=100).input_ids.tolist() == [1, 2, 99, 99]


def test_pad_values_naming_no_column_refused_everywhere():
    from packwise.assemble import PackCollator, assemble_batch, assemble_pack, collate_packs

    seqs = [{"input_ids": [1, 2], "weight": [0.5, 0.5]}, {"input_ids": [3], "weight": [2.0]}]
    typo = r"pad_values names 'wieght', which no sequence carries \(columns: \['weight'\]\)"
    with pytest.raises(ValueError, match=typo):
        assemble_pack(seqs, pad_to=4, pad_values={"wieght": 1.0})
    with pytest.raises(ValueError, match=typo):
        collate_packs([assemble_pack(seqs)], pad_to_multiple_of=4, pad_values={"wieght": 1.0})
    with pytest.raises(ValueError, match=typo):
        assemble_batch([seqs], pad_to_multiple_of=4, pad_values={"wieght": 1.0})
    with pytest.raises(ValueError, match=typo):
        PackCollator(pad_to_multiple_of=4, pad_values={"wieght": 1.0})([assemble_pack(seqs)])
    # the right name pads the column; a column only one pack of the batch carries may be named
    assert assemble_pack(seqs, pad_to=4, pad_values={"weight": 1.0}).columns["weight"].tolist() == [0.5, 0.5, 2.0, 1.0]
    b = assemble_batch([seqs, [{"input_ids": [4]}]], pad_values={"weight": 7.0})
    assert b["weight"].tolist() == [[0.5, 0.5, 2.0, 7.0]]


def test_use_packed_attention_refuses_a_str_allow_an_unknown_allow_name_and_a_non_hf_model():
    from packwise.hf import use_packed_attention
    from packwise.verify import family_model

    with pytest.raises(TypeError, match=r"allow='LlamaAttention': pass a list of module class names"):
        use_packed_attention(family_model("llama", 97), allow="LlamaAttention")
    with pytest.raises(ValueError, match=r"allow names 'NotAClass', which is no module class of this LlamaForCausalLM"):
        use_packed_attention(family_model("llama", 97), allow=["NotAClass"])
    with pytest.raises(TypeError, match=r"got a Linear, not a transformers PreTrainedModel"):
        use_packed_attention(torch.nn.Linear(2, 2))
    model = use_packed_attention(family_model("llama", 97), allow=["LlamaAttention"], backend="sdpa")
    assert model.config._attn_implementation == "packwise_sdpa"


def test_assemble_pack_reads_a_generator_like_a_list():
    from packwise.assemble import assemble_pack

    rows = [{"input_ids": [1, 2, 3]}, {"input_ids": [4, 5]}]
    p = assemble_pack(r for r in rows)
    assert p.input_ids.tolist() == [1, 2, 3, 4, 5] and p.cu_seqlens.tolist() == [0, 3, 5]
    with pytest.raises(ValueError, match="assemble_pack needs at least one sequence"):
        assemble_pack(r for r in [])
    with pytest.raises(TypeError, match="sequences is a int; pass a list of sequence mappings"):
        assemble_pack(5)
