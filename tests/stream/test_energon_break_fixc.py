"""Break-test findings in the Energon mixin: per-token fields reach the packs or are refused by name, and
every refusal names the value, the limit and the fix."""

from __future__ import annotations

from dataclasses import dataclass

import pytest
import torch

energon = pytest.importorskip("megatron.energon")

from megatron.energon import Sample, TaskEncoder  # noqa: E402
from megatron.energon.errors import FatalSampleError  # noqa: E402

from packwise.integrations.energon import PackwiseTaskEncoderMixin  # noqa: E402


@dataclass
class Weighted(Sample):
    input_ids: torch.Tensor
    weight: torch.Tensor


def _buffer(lengths=(3, 5)):
    return [Weighted(__key__=str(i), __restore_key__=(), __subflavors__={}, input_ids=torch.arange(n),
                     weight=torch.full((n,), float(i + 1))) for i, n in enumerate(lengths)]  # fmt: skip


def _encoder(**attrs):
    return type("E", (PackwiseTaskEncoderMixin, TaskEncoder), {"packing_capacity": 8, **attrs})()


def _run(enc, buffer):
    groups = enc.select_samples_to_pack(buffer)
    return enc.batch([p for g in groups for p in enc.pack_selected_samples(g)])


def test_undeclared_per_token_field_is_refused_by_name():
    with pytest.raises(
        FatalSampleError,
        match=r"sample '1' \(Weighted\) carries a per-token field 'weight' of shape \(5,\).*packing_columns=\('weight',\)",
    ):
        _run(_encoder(), _buffer())


def test_declared_per_token_field_reaches_the_batch():
    batch = _run(_encoder(packing_columns=("weight",)), _buffer())
    assert batch["weight"].tolist() == [[2.0] * 5 + [1.0] * 3]  # best fit decreasing: 5 + 3


def test_packing_column_no_sample_carries_is_refused():
    with pytest.raises(FatalSampleError, match=r"packing_columns names 'wieght' but none of the 2 samples"):
        _run(_encoder(packing_columns=("weight", "wieght")), _buffer())
