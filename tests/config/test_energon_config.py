"""The Energon mixin takes a PackingConfig: planning, assembly and batch follow its settings and convention."""

from __future__ import annotations

from dataclasses import dataclass

import pytest
import torch

pytest.importorskip("megatron.energon")
pytestmark = pytest.mark.slow  # importing megatron-energon takes ~6 s

from packwise import PackingConfig  # noqa: E402

X = -100


def test_mixin_with_packing_config_emits_megatron_convention():
    from megatron.energon import Sample, TaskEncoder, TextSample

    from packwise.integrations.energon import PackwiseTaskEncoderMixin

    @dataclass
    class TokenSample(Sample):
        input_ids: torch.Tensor

    class Encoder(PackwiseTaskEncoderMixin, TaskEncoder[TextSample, TokenSample, dict, dict]):
        packing_config = PackingConfig(
            capacity=8, labels="shifted", fixed_width=True, alignment=2, buffer_size=16, overflow="error"
        )

    enc = Encoder()
    buffer = [
        TokenSample(__key__=str(i), __restore_key__=(), __subflavors__={}, input_ids=torch.arange(n) + 10 * i)
        for i, n in enumerate((3, 5, 2))
    ]
    groups = enc.select_samples_to_pack(buffer)
    assert sorted(sorted(s.__key__ for s in g) for g in groups) == [["0"], ["1", "2"]]  # aligned 4, 6, 2: 6+2 | 4
    batch = enc.batch([p for g in groups for p in enc.pack_selected_samples(g)])
    assert batch["tokens"].shape == (1, 16) and batch["labels_shifted"]  # two fixed-width packs of 8
    by_key = {tuple(k): i for i, k in enumerate(batch["keys"])}
    start = 8 * by_key[("0",)]
    assert batch["tokens"][0, start : start + 8].tolist() == [0, 1, 2, 0, 0, 0, 0, 0]
    assert batch["labels"][0, start : start + 8].tolist() == [1, 2, X, X, X, X, X, X]
    assert Encoder.packing_config.energon_settings()["dataset"] == {"packing_buffer_size": 16}


def test_mixin_keeps_the_loss_mask_of_megatron_samples():
    """Break-test bug 1: a sample with labels and loss_mask (Megatron GPTDataset/SFT) lost its loss_mask."""
    from megatron.energon import Sample, TaskEncoder, TextSample

    from packwise.integrations.energon import PackwiseTaskEncoderMixin

    @dataclass
    class MegatronSample(Sample):
        input_ids: torch.Tensor
        labels: torch.Tensor
        loss_mask: torch.Tensor

    class Encoder(PackwiseTaskEncoderMixin, TaskEncoder[TextSample, MegatronSample, dict, dict]):
        packing_config = PackingConfig(capacity=8, labels="shifted", buffer_size=4, overflow="error")

    enc = Encoder()
    sample = MegatronSample(
        __key__="0", __restore_key__=(), __subflavors__={}, input_ids=torch.tensor([1, 2, 3, 4]),
        labels=torch.tensor([2, 3, 4, 5]), loss_mask=torch.tensor([0, 0, 1, 1]),
    )  # fmt: skip
    batch = enc.batch(list(enc.pack_selected_samples([sample])))
    assert batch["labels"].tolist() == [[X, X, 4, 5]] and batch["loss_mask"].tolist() == [[0, 0, 1, 1]]
    with pytest.raises(ValueError, match=r"buffer_size=None"):
        PackingConfig(labels="shifted", overflow="error").energon_settings()


def test_mixin_applies_the_configs_overflow_policy():
    """PackingConfig.overflow drives the mixin's media-safe overflow (truncate keeps the head, counted)."""
    from megatron.energon import Sample, TaskEncoder, TextSample

    from packwise.integrations.energon import PackwiseTaskEncoderMixin

    @dataclass
    class TokenSample(Sample):
        input_ids: torch.Tensor

    class Encoder(PackwiseTaskEncoderMixin, TaskEncoder[TextSample, TokenSample, dict, dict]):
        packing_config = PackingConfig(capacity=8, buffer_size=4, overflow="truncate")
        packing_capacity = 1000  # not read: the config supplies every setting

    enc = Encoder()
    buffer = [
        TokenSample(__key__=str(i), __restore_key__=(), __subflavors__={}, input_ids=torch.arange(n) + 10 * i)
        for i, n in enumerate((11, 3))
    ]
    groups = enc.select_samples_to_pack(buffer)
    packs = [p for g in groups for p in enc.pack_selected_samples(g)]
    assert sorted(p.pack.lengths.tolist() for p in packs) == [[3], [8]]  # 11 tokens truncated to capacity 8
    assert enc.packing_counts["tokens_truncated"] == 3 and enc.packing_counts["samples_truncated"] == 1
    Encoder.packing_config = PackingConfig(capacity=8, buffer_size=4, overflow="error")
    with pytest.raises(Exception, match=r"has 11 tokens > packing_capacity 8"):
        enc.select_samples_to_pack(buffer)
