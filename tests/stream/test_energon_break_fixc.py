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


@pytest.mark.parametrize(("capacity", "shown"), [(0, r"0 \(int\)"), ("8", r"'8' \(str\)"), (8.0, r"8\.0 \(float\)")])
def test_capacity_must_be_an_integer_at_least_one(capacity, shown):
    with pytest.raises(FatalSampleError, match=rf"packing_capacity={shown}: must be an integer >= 1"):
        _encoder(packing_capacity=capacity).select_samples_to_pack(_buffer())


def test_sample_without_input_ids_is_named():
    @dataclass
    class Text(Sample):
        text: str

    with pytest.raises(FatalSampleError, match=r"sample '0' \(Text\) has no field 'input_ids'"):
        _encoder().select_samples_to_pack([Text(__key__="0", __restore_key__=(), __subflavors__={}, text="hi")])


def test_buffer_dropped_whole_names_the_policy_and_capacity():
    enc = _encoder(packing_capacity=4, packing_overflow="drop", packing_columns=("weight",))
    with pytest.warns(UserWarning, match="every one of 2 samples"):
        groups = enc.select_samples_to_pack(_buffer((5, 6)))
    packs = [p for g in groups for p in enc.pack_selected_samples(g)]
    with pytest.raises(ValueError, match=r"every sample of it was dropped by packing_overflow='drop' at "
                                         r"packing_capacity 4 \(2 dropped so far"):  # fmt: skip
        enc.batch(packs)
