"""Packed vs alone through the real megatron-core 0.16 ``GPTModel`` on CPU (Megatron's conventions).

megatron-core's local ``DotProductAttention`` refuses packed input and Transformer Engine needs a GPU, so
the core attention here is a small THD module on packwise's ``varlen_attention`` (everything else — RoPE
with ``cu_seqlens``, the MLP, MoE router and experts, the output layer, the per-token loss — is
megatron-core's own code). CPU shims: ``torch.cuda.current_device`` returns ``"cpu"`` (RoPE moves its
frequencies there), ``moe_utils.te_general_gemm = None`` (a NameError without TE in 0.16.1), and model
parallelism runs on a single-process gloo group.

What a GPU run with Transformer Engine would add: TE's ``thd`` kernels read the real ``cu_seqlens_q/kv``
*and* the padded twins (this THD module attends within the padded segments, which gives real tokens the
same result), fused RoPE, bf16 tolerances, and context parallelism > 1 through TE's partitioner.
"""

from __future__ import annotations

import socket

import pytest
import torch

pytest.importorskip("megatron.core")
pytestmark = pytest.mark.slow  # importing megatron-core takes ~10 s on 2 cores

from packwise import PackingConfig  # noqa: E402
from packwise.attention import varlen_attention  # noqa: E402

VOCAB = 64
LENGTHS = (5, 9, 3)


class THDCoreAttention(torch.nn.Module):
    """megatron-core core-attention interface on packwise's ``varlen_attention`` (``thd`` and ``sbhd``)."""

    def __init__(self, config, layer_number, attn_mask_type, attention_type, softmax_scale=None, **_):
        super().__init__()
        self.scale = softmax_scale

    def forward(
        self, query, key, value, attention_mask, attn_mask_type=None, attention_bias=None, packed_seq_params=None
    ):
        if packed_seq_params is None:  # [s, b, h, d], one causal document per row
            s, b = query.shape[:2]
            cu = torch.tensor([0, s], dtype=torch.int32)
            rows = [
                varlen_attention(query[:, i], key[:, i], value[:, i], cu_seqlens_q=cu, cu_seqlens_k=cu,
                                 max_seqlen_q=s, max_seqlen_k=s, scale=self.scale)
                for i in range(b)
            ]  # fmt: skip
            return torch.stack(rows, 1).reshape(s, b, -1)
        p = packed_seq_params
        cu = p.cu_seqlens_q_padded if p.cu_seqlens_q_padded is not None else p.cu_seqlens_q
        return varlen_attention(
            query, key, value, cu_seqlens_q=cu, cu_seqlens_k=cu, max_seqlen_q=int(p.max_seqlen_q),
            max_seqlen_k=int(p.max_seqlen_kv), scale=self.scale,
        )  # fmt: skip


@pytest.fixture(scope="module")
def megatron():
    import torch.distributed as dist
    from megatron.core import parallel_state
    from megatron.core.transformer.moe import moe_utils

    mp = pytest.MonkeyPatch()
    mp.setattr(torch.cuda, "current_device", lambda: "cpu")
    # megatron-core 0.16.1 names te_general_gemm only when Transformer Engine imports: the router's gating
    # GEMM raises NameError without TE; None selects its own torch.mm fallback
    mp.setattr(moe_utils, "te_general_gemm", None, raising=False)
    started = not dist.is_initialized()
    if started:
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            port = s.getsockname()[1]
        dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=0, world_size=1)
    parallel_state.initialize_model_parallel()
    yield
    parallel_state.destroy_model_parallel()
    if started:
        dist.destroy_process_group()
    mp.undo()


def gpt(num_experts: int | None = None):
    from megatron.core.models.gpt.gpt_layer_specs import get_gpt_layer_local_spec
    from megatron.core.models.gpt.gpt_model import GPTModel
    from megatron.core.transformer.transformer_config import TransformerConfig

    torch.manual_seed(0)
    moe = {}
    if num_experts:  # aux-loss load balancing: its statistics are what the padding mask must keep clean
        moe = {
            "num_moe_experts": num_experts,
            "moe_router_topk": 2,
            "moe_aux_loss_coeff": 1.0,
            "add_bias_linear": False,
        }  # fmt: skip  (expert bias: an in-place add on a view under autograd)
    cfg = TransformerConfig(
        num_layers=2, hidden_size=32, num_attention_heads=4, use_cpu_initialization=True,
        hidden_dropout=0.0, attention_dropout=0.0, **moe,
    )  # fmt: skip
    spec = get_gpt_layer_local_spec(num_experts=num_experts)
    spec.submodules.self_attention.submodules.core_attention = THDCoreAttention
    return GPTModel(cfg, spec, vocab_size=VOCAB, max_sequence_length=64, position_embedding_type="rope")


def documents():
    g = torch.Generator().manual_seed(1)
    return [torch.randint(1, VOCAB, (n,), generator=g) for n in LENGTHS]


def packed(cfg: PackingConfig, docs):
    batch = cfg.collator()([cfg.assemble([{"input_ids": d} for d in docs])])
    return batch, cfg.packed_seq_params(batch)


@pytest.mark.slow
def test_gpt_forward_packed_equals_each_document_alone(megatron):
    """Aligned (4), fixed-width (32) pack in Megatron's convention: logits and loss equal each document alone."""
    model = gpt().eval()
    cfg = PackingConfig(capacity=32, alignment=4, fixed_width=True, labels="shifted")
    docs = documents()
    batch, params = packed(cfg, docs)
    assert batch["tokens"].shape == (1, 32) and batch["labels_shifted"]
    with torch.no_grad():
        logits = model(batch["tokens"], batch["position_ids"], None, packed_seq_params=params)
        # megatron-core's own per-token loss on packwise's labels (-100 -> any id; loss_mask removes it)
        token_loss = model(batch["tokens"], batch["position_ids"], None, packed_seq_params=params,
                           labels=batch["labels"].clamp(min=0))  # fmt: skip
        packed_sum = float((token_loss * batch["loss_mask"]).sum())
        alone_sum, worst = 0.0, 0.0
        for d, start in zip(docs, batch["cu_seqlens_padded"][:-1].tolist()):
            alone = model(d[None], torch.arange(len(d))[None], None)
            worst = max(worst, float((alone[0] - logits[0, start : start + len(d)]).abs().max()))
            alone_loss = model(d[None], torch.arange(len(d))[None], None, labels=torch.roll(d, -1)[None])
            alone_sum += float(alone_loss[0, :-1].sum())  # Megatron alone: the last token has no target
        ours = float(cfg.loss()(logits, batch))  # packwise's loss on Megatron's logits
    n_targets = sum(n - 1 for n in LENGTHS)
    assert int(batch["loss_mask"].sum()) == n_targets
    print(f"max |dlogit| {worst:.3g}; loss sum packed {packed_sum:.6f} alone {alone_sum:.6f}")
    assert worst < 1e-5
    assert packed_sum == pytest.approx(alone_sum, rel=1e-6)
    assert ours == pytest.approx(alone_sum / n_targets, rel=1e-6)


@pytest.mark.slow
def test_moe_router_statistics_from_real_tokens_only_with_padding_mask(megatron):
    """A real MoE GPTModel (4 experts, top-2, aux-loss balancing): with packwise's ``padding_mask`` an aligned,
    fixed-width pack (17 real + 15 padding tokens) gives the tight pack's load-balancing loss in every layer
    and the tight pack's logits; without the mask the padding tokens enter the router statistics."""
    from megatron.core.transformer.moe.moe_utils import clear_aux_losses_tracker, get_moe_layer_wise_logging_tracker

    docs = documents()

    def run(cfg, mask: bool):
        model = gpt(num_experts=4).train()
        batch, params = packed(cfg, docs)
        clear_aux_losses_tracker()
        pad = batch["padding_mask"] if mask else None
        with torch.no_grad(), torch.enable_grad():
            logits = model(batch["tokens"], batch["position_ids"], None, packed_seq_params=params, padding_mask=pad)
        real = ~batch["padding_mask"][0]
        aux = get_moe_layer_wise_logging_tracker()["load_balancing_loss"]["values"].clone()
        return aux, logits[0, real].detach()

    tight_aux, tight_logits = run(PackingConfig(capacity=32, labels="shifted"), mask=False)
    aligned = PackingConfig(capacity=32, alignment=4, fixed_width=True, labels="shifted")
    mask_aux, mask_logits = run(aligned, mask=True)
    raw_aux, _ = run(aligned, mask=False)
    print(f"aux loss per layer: tight {tight_aux.tolist()} masked {mask_aux.tolist()} unmasked {raw_aux.tolist()}")
    assert torch.allclose(mask_aux, tight_aux, rtol=1e-5, atol=0)
    assert (mask_logits - tight_logits).abs().max() < 1e-5
    assert not torch.allclose(raw_aux, tight_aux, rtol=1e-3, atol=0)  # the failure the mask prevents


def test_mtp_roll_tensor_on_packwise_layout(megatron):
    """Megatron's MTP ``roll_tensor`` slices by ``cu_seqlens_q``: right on a tight pack; on an aligned pack the real
    boundaries mix documents, the physical ones (``PackingConfig.packed_seq_params`` with MTP) do not."""
    from megatron.core.transformer.multi_token_prediction import roll_tensor

    from packwise.assemble import to_packed_seq_params

    docs = [torch.tensor([11, 12, 13]), torch.tensor([21, 22])]
    tight = PackingConfig(capacity=8, labels="shifted", consumer={"multi_token_prediction": True})
    batch, params = packed(tight, docs)
    rolled, _ = roll_tensor(batch["tokens"], shifts=-1, dims=-1, packed_seq_params=params)
    assert rolled.tolist() == [[12, 13, 0, 22, 0]]  # each document rolled alone, its last slot zeroed
    rolled_labels, _ = roll_tensor(batch["labels"], shifts=-1, dims=-1, packed_seq_params=params)
    assert rolled_labels.tolist() == [[13, -100, 0, -100, 0]]  # depth-2 targets stay in their document

    aligned = PackingConfig(capacity=8, alignment=4, labels="shifted", consumer={"multi_token_prediction": True})
    batch, params = packed(aligned, docs)  # 11 12 13 . | 21 22 . .
    assert params.cu_seqlens_q.tolist() == [0, 4, 8]  # the physical boundaries
    rolled, _ = roll_tensor(batch["tokens"], shifts=-1, dims=-1, packed_seq_params=params)
    assert rolled.tolist() == [[12, 13, 0, 0, 22, 0, 0, 0]]  # what each document alone gives
    mask, count = roll_tensor(batch["loss_mask"], shifts=-1, dims=-1, packed_seq_params=params)
    assert mask.tolist() == [[1, 0, 0, 0, 0, 0, 0, 0]] and int(count) == 1  # 11 -> 13 is the one depth-2 target
    # the real boundaries [0, 3, 5] over tokens laid out at [0, 4, 8]: doc 0's padding slot receives doc 1's
    # first token, doc 1's 21 gets 0 and 22 is never rolled
    unmarked = {k: v for k, v in batch.items() if k != "multi_token_prediction"}  # as a non-MTP batch
    rolled, _ = roll_tensor(batch["tokens"], shifts=-1, dims=-1, packed_seq_params=to_packed_seq_params(unmarked))
    assert rolled.tolist() == [[12, 13, 0, 21, 0, 22, 0, 0]]
    rolled, _ = roll_tensor(batch["tokens"], shifts=-1, dims=-1, packed_seq_params=to_packed_seq_params(batch))
    assert rolled.tolist() == [[12, 13, 0, 0, 22, 0, 0, 0]]  # the plain call reads the batch's MTP mark


def test_mtp_gpt_loss_packed_equals_alone_and_aligned_layout_differs(megatron):
    """A real GPTModel with one MTP layer: the MTP loss megatron-core logs on packwise's tight and aligned
    Megatron-convention packs (PackedSeqParams from the config) equals the token-weighted MTP loss of each
    document alone; the aligned pack with the real cu_seqlens as boundaries gives another value."""
    from megatron.core.models.gpt.gpt_layer_specs import get_gpt_layer_local_spec, get_gpt_mtp_block_spec
    from megatron.core.models.gpt.gpt_model import GPTModel
    from megatron.core.transformer.multi_token_prediction import MTPLossLoggingHelper
    from megatron.core.transformer.transformer_config import TransformerConfig

    from packwise.assemble import to_packed_seq_params

    torch.manual_seed(0)
    tc = TransformerConfig(
        num_layers=2, hidden_size=32, num_attention_heads=4, use_cpu_initialization=True, hidden_dropout=0.0,
        attention_dropout=0.0, mtp_num_layers=1,
    )  # fmt: skip
    spec = get_gpt_layer_local_spec()
    spec.submodules.self_attention.submodules.core_attention = THDCoreAttention
    model = GPTModel(
        tc, spec, vocab_size=VOCAB, max_sequence_length=64, position_embedding_type="rope",
        mtp_block_spec=get_gpt_mtp_block_spec(tc, spec, use_transformer_engine=False),
    ).train()  # fmt: skip

    def mtp_loss(tokens, labels, loss_mask, params=None, positions=None):
        """The MTP loss megatron-core logs: sum over rolled targets / their count."""
        MTPLossLoggingHelper.tracker.clear()
        positions = torch.arange(tokens.shape[1])[None] if positions is None else positions
        model(tokens, positions, None, packed_seq_params=params, labels=labels.clamp(min=0), loss_mask=loss_mask)
        return float(MTPLossLoggingHelper.tracker["values"][0])

    docs = documents()
    cfg = PackingConfig(capacity=32, labels="shifted", consumer={"multi_token_prediction": True})
    batch, params = packed(cfg, docs)
    packed_loss = mtp_loss(batch["tokens"], batch["labels"], batch["loss_mask"], params, batch["position_ids"])
    weighted = 0.0  # alone: Megatron labels tokens[1:], the last position masked; MTP rolls one more
    for d in docs:
        mask = torch.ones(1, len(d))
        mask[0, -1] = 0
        weighted += mtp_loss(d[None], torch.roll(d, -1)[None], mask) * (len(d) - 2)
    alone = weighted / sum(len(d) - 2 for d in docs)
    cfg = PackingConfig(capacity=32, alignment=4, labels="shifted", consumer={"multi_token_prediction": True})
    b2, p2 = packed(cfg, docs)
    aligned = mtp_loss(b2["tokens"], b2["labels"], b2["loss_mask"], p2, b2["position_ids"])
    unmarked = {k: v for k, v in b2.items() if k != "multi_token_prediction"}  # the real cu_seqlens
    real_cu = mtp_loss(b2["tokens"], b2["labels"], b2["loss_mask"], to_packed_seq_params(unmarked), b2["position_ids"])
    plain = mtp_loss(b2["tokens"], b2["labels"], b2["loss_mask"], to_packed_seq_params(b2), b2["position_ids"])
    print(f"MTP loss tight {packed_loss:.6f} aligned {aligned:.6f} alone {alone:.6f} real cu {real_cu:.6f}")
    print(f"MTP loss aligned, plain to_packed_seq_params(batch) {plain:.6f}")
    assert packed_loss == pytest.approx(alone, rel=1e-5)
    assert aligned == pytest.approx(alone, rel=1e-5)
    assert abs(real_cu - alone) > 1e-3
    assert plain == pytest.approx(alone, rel=1e-5)  # the plain call on the MTP batch: its mark is read
