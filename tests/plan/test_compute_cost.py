"""distribute by compute: ComputeCost arithmetic, model_cost from real Transformers configs, LPT on FLOPs."""

import numpy as np
import pytest

from packwise.plan import ComputeCost, causal_pairs, distribute, plan_packs


def test_causal_pairs_full_and_window_by_hand():
    # l=5: 1+2+3+4+5 = 15; window 2: 1+2+2+2+2 = 9; l <= window: the full count
    assert causal_pairs([5, 2]).tolist() == [15.0, 3.0]
    assert causal_pairs([5, 2], window=2).tolist() == [9.0, 3.0]


def test_compute_cost_adds_tokens_and_pairs():
    c = ComputeCost(per_token=2.0, per_pair=3.0, full_layers=2, window_layers=1, window=2)
    # tokens 2·(5+1) = 12; full 3·2·(15+1) = 96; window 3·1·(9+1) = 30
    assert c([5, 1]) == 138.0


@pytest.mark.parametrize(
    "kwargs, name",
    [({"per_token": -1.0}, "per_token"), ({"per_token": 1.0, "full_layers": 1.5}, "full_layers"),
     ({"per_token": 1.0, "window_layers": 1}, "window"), ({"per_token": 1.0, "window": 0}, "window")],
)  # fmt: skip
def test_compute_cost_refuses_bad_numbers_by_name(kwargs, name):
    with pytest.raises(ValueError, match=name):
        ComputeCost(**kwargs)


def test_distribute_balances_flops_where_token_counts_tie():
    # four packs of 8 tokens: [8], [4, 4], [2, 2, 2, 2], [1 × 8] cost 36, 20, 12, 8 attended pairs; by tokens
    # they tie, and LPT on tokens (ties by index) pairs 36+12 against 20+8; on FLOPs 36+8 against 20+12 (optimal)
    plan = plan_packs([8, 2, 2, 2, 2, 4, 4, 1, 1, 1, 1, 1, 1, 1, 1], capacity=8)
    packs = plan.packs()
    assert [plan.lengths[p].tolist() for p in packs] == [[8], [4, 4], [2, 2, 2, 2], [1] * 8]
    c = ComputeCost(per_token=0.0, per_pair=1.0, full_layers=1)
    a = distribute(plan, num_ranks=2, cost=c)
    assert (list(a), a.costs, a.imbalance) == ([[0, 3], [1, 2]], [44.0, 32.0], 44.0 / 38.0)
    by_tokens = distribute(plan, num_ranks=2, cost="tokens")
    assert [sum(c(plan.lengths[packs[i]]) for i in r) for r in by_tokens] == [48.0, 28.0]


def test_model_cost_dense_llama_by_hand():
    from transformers import LlamaConfig

    from packwise.hf import model_cost

    cfg = LlamaConfig(vocab_size=10, hidden_size=8, intermediate_size=16, num_hidden_layers=2,
                      num_attention_heads=2, num_key_value_heads=1)  # fmt: skip
    c = model_cost(cfg)
    # per layer q 64 + k 32 + v 32 + o 64 + mlp 3·128 + 2 norms 16 = 592; ×2 + final norm 8 + lm_head 80 = 1272
    assert (c.per_token, c.per_pair, c.full_layers, c.window_layers, c.window) == (6 * 1272.0, 12.0 * 8, 2, 0, None)
    tied = model_cost(LlamaConfig(**{**cfg.to_dict(), "tie_word_embeddings": True}))
    assert tied.per_token == c.per_token  # a tied lm_head is still a matmul


def test_model_cost_moe_counts_active_experts_only():
    from transformers import Qwen3MoeConfig

    from packwise.hf import model_cost

    kw = dict(vocab_size=10, hidden_size=8, intermediate_size=16, moe_intermediate_size=4, num_hidden_layers=1,
              num_attention_heads=2, num_key_value_heads=1, head_dim=4, num_experts=4)  # fmt: skip
    k1, k2 = (
        model_cost(Qwen3MoeConfig(**kw, num_experts_per_tok=1)),
        model_cost(Qwen3MoeConfig(**kw, num_experts_per_tok=2)),
    )
    # one expert: gate+up 8·8 + down 4·8 = 96 weights; each extra active expert adds 6·96 FLOPs per token
    assert k2.per_token - k1.per_token == 6 * 96.0


def test_model_cost_sliding_layers_and_unknown_layer_type():
    from transformers import Gemma3TextConfig, Qwen2Config

    from packwise.hf import model_cost

    g = model_cost(Gemma3TextConfig(vocab_size=10, hidden_size=8, intermediate_size=16, num_hidden_layers=6,
                                    num_attention_heads=2, num_key_value_heads=1, head_dim=4, sliding_window=16))  # fmt: skip
    assert (g.full_layers, g.window_layers, g.window) == (1, 5, 16)  # Gemma 3: five sliding, then one full
    cfg = Qwen2Config(vocab_size=10, hidden_size=8, intermediate_size=16, num_hidden_layers=2,
                      num_attention_heads=2, num_key_value_heads=1)  # fmt: skip
    object.__setattr__(cfg, "layer_types", ["full_attention", "chunked_attention"])
    with pytest.raises(ValueError, match="chunked_attention"):
        model_cost(cfg)


def test_model_cost_feeds_distribute():
    from transformers import LlamaConfig

    from packwise.hf import model_cost

    cost = model_cost(LlamaConfig(vocab_size=10, hidden_size=8, intermediate_size=16, num_hidden_layers=2,
                                  num_attention_heads=2, num_key_value_heads=1))  # fmt: skip
    plan = plan_packs(np.array([7, 1, 6, 2, 5, 3, 4, 4]), capacity=8, pack_count_multiple=2)
    a = distribute(plan, num_ranks=2, cost=cost)
    assert sorted(i for r in a for i in r) == list(range(plan.num_packs))
    for rank, members in enumerate(a):  # each rank's cost is the model's FLOPs of its packs
        assert a.costs[rank] == pytest.approx(sum(cost(plan.lengths[plan.packs()[i]]) for i in members))


def test_distributed_pack_sampler_takes_a_compute_cost():
    from packwise.integrations.pytorch import DistributedPackSampler

    # the packs of test_distribute_balances_flops_where_token_counts_tie: pairs 36, 20, 12, 8
    packs = [np.array([8]), np.array([4, 4]), np.array([2, 2, 2, 2]), np.array([1] * 8)]
    c = ComputeCost(per_token=0.0, per_pair=1.0, full_layers=1)
    s = DistributedPackSampler(packs, num_replicas=2, rank=0, shuffle=False, cost=c)
    assert (list(s), s.assignment().costs) == ([0, 3], [44.0, 32.0])  # the optimum: 36+8 against 20+12


def test_model_cost_mla_widths_and_a_multimodal_text_config():
    from transformers import AutoConfig

    from packwise.hf import model_cost
    from packwise.verify import tiny_config

    mla = AutoConfig.for_model("deepseek_v3", hidden_size=16, intermediate_size=32, num_hidden_layers=2,
                               num_attention_heads=2, num_key_value_heads=2, vocab_size=50)  # fmt: skip
    assert (mla.qk_nope_head_dim, mla.qk_rope_head_dim, mla.v_head_dim) == (128, 64, 128)
    assert model_cost(mla).per_pair == 6.0 * 2 * (128 + 64 + 128)  # QKᵀ over 192 dims, AV over 128
    # Qwen2.5-VL's text decoder has no causal-LM class of its own: the decoder plus its (tied) lm_head, the
    # same weights as the Qwen2 model of the same shape
    vl, text = model_cost(tiny_config("tiny-qwen2.5-vl", 97)), model_cost(tiny_config("tiny-qwen2", 97))
    assert (vl.per_token, vl.per_pair) == (text.per_token, text.per_pair)
