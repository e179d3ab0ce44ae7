"""Integer options refuse bools (``True`` is not 1), strings and floats at every public entry point, naming
the option and the value; each case was accepted (or failed late, unnamed) before."""

from __future__ import annotations

import pytest
import torch
from pydantic import ValidationError

from packwise import PackingConfig
from packwise.assemble import assemble_pack
from packwise.attention import varlen_attention
from packwise.data import DistributedPackSampler
from packwise.loss import PackedLoss
from packwise.plan import segment_layout
from packwise.stream import PackingLoader, PackingStream

SAMPLES = [{"input_ids": list(range(n))} for n in (3, 5, 2)]


@pytest.mark.parametrize(
    ("option", "value", "message"),
    [
        ("alignment", True, "alignment must be an integer in [1, capacity=8], got True"),
        ("pad_to", True, "pad_to must be None or an integer >= 1 (tokens per pack), got True"),
        ("pad_to", "8", "pad_to must be None or an integer >= 1 (tokens per pack), got '8'"),
        ("pad_to", 0, "pad_to must be None or an integer >= 1 (tokens per pack), got 0"),
    ],
)
def test_packing_stream_refuses_a_bool_alignment_or_pad_to_when_built(option, value, message):
    with pytest.raises(ValueError) as e:
        PackingStream(SAMPLES, capacity=8, buffer_size=2, **{option: value})
    assert str(e.value) == message


def test_packing_loader_refuses_a_bool_num_workers():
    stream = PackingStream(SAMPLES, capacity=8, buffer_size=2)
    with pytest.raises(ValueError) as e:
        PackingLoader(stream, num_workers=True)
    assert str(e.value) == "num_workers must be an integer >= 0 (DataLoader worker processes), got True"


@pytest.mark.parametrize(("value", "kind"), [(True, "bool"), ("5", "str"), (5.5, "float")])
def test_pad_to_must_be_an_integer(value, kind):
    message = f"pad_to={value!r} is a {kind}; give an integer (tokens per pack) or None"
    with pytest.raises(TypeError) as e:
        segment_layout([3], pad_to=value)
    assert str(e.value) == message
    with pytest.raises(TypeError) as e:  # the public entry point that reaches it
        assemble_pack([{"input_ids": torch.arange(3)}], pad_to=value)
    assert str(e.value) == message


@pytest.mark.parametrize("option", ["num_replicas", "rank", "seed"])
def test_distributed_pack_sampler_refuses_bools(option):
    kwargs = {"num_replicas": 2, "rank": 0, "seed": 0} | {option: True}
    with pytest.raises(TypeError) as e:
        DistributedPackSampler([[4], [3]], **kwargs)
    assert str(e.value) == f"{option}=True is a bool; give an integer"


def test_packed_loss_refuses_a_bool_cp_size():
    with pytest.raises(ValueError) as e:
        PackedLoss(cp_size=True)
    assert str(e.value) == "cp_size must be an integer >= 1 (context-parallel ranks), got True"


def test_varlen_attention_refuses_a_bool_window():
    q = torch.randn(4, 1, 8)
    cu = torch.tensor([0, 4], dtype=torch.int32)
    with pytest.raises(TypeError) as e:
        varlen_attention(
            q, q, q, cu_seqlens_q=cu, cu_seqlens_k=cu, max_seqlen_q=4, max_seqlen_k=4, window=True, backend="sdpa"
        )
    assert str(e.value) == "window=True is a bool; give an integer (tokens) or None"


@pytest.mark.parametrize(
    ("update", "loc"),
    [
        ({"seed": True}, ("seed",)),
        ({"seed": "3"}, ("seed",)),
        ({"min_packs": True}, ("min_packs",)),
        ({"pack_count_multiple": 2.0}, ("pack_count_multiple",)),
        ({"multimodal": {"min_pixels": True}}, ("multimodal", "min_pixels")),
        ({"multimodal": {"max_pixels": "9999"}}, ("multimodal", "max_pixels")),
    ],
)
def test_packing_config_integers_are_strict(update, loc):
    with pytest.raises(ValidationError) as e:
        PackingConfig(**update)
    assert [err["loc"] for err in e.value.errors()] == [loc]
    assert e.value.errors()[0]["type"] in ("int_type", "int_parsing")
