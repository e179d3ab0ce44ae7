"""``PackedSeqParams`` for megatron-core's hybrid (Mamba) layers: the state resets at document boundaries.

megatron-core 0.16.1's ``MambaMixer`` builds its ``seq_idx`` from ``cu_seqlens_q_padded`` and the row length
(``_create_packed_seq_idx``); importing ``mamba_mixer`` needs triton and mamba-ssm (GPU packages), so the
method is taken from the installed source file and run on CPU — megatron-core's own code, not a copy.
Later megatron-core adds ``PackedSeqParams.total_tokens``; packwise fills it where the class defines it.
"""

from __future__ import annotations

import ast
import dataclasses
from pathlib import Path

import pytest
import torch

pytest.importorskip("megatron.core")
pytestmark = pytest.mark.slow  # importing megatron-core takes ~10 s on 2 cores

from megatron.core.packed_seq_params import PackedSeqParams  # noqa: E402

from packwise.assemble import assemble_pack, collate_packs, to_packed_seq_params  # noqa: E402
from packwise.assemble._megatron import hybrid_fields  # noqa: E402


def _mamba_seq_idx():
    """``MambaMixer._create_packed_seq_idx`` from the installed megatron-core source."""
    import megatron.core

    path = Path(megatron.core.__file__).parent / "ssm" / "mamba_mixer.py"
    tree = ast.parse(path.read_text())
    cls = next(n for n in tree.body if isinstance(n, ast.ClassDef) and n.name == "MambaMixer")
    fn = next(n for n in cls.body if isinstance(n, ast.FunctionDef) and n.name == "_create_packed_seq_idx")
    fn.args.args[2].annotation = None  # total_tokens: int; drop annotations naming unimported types
    fn.args.args[1].annotation = None
    scope = {"torch": torch}
    exec(compile(ast.Module(body=[fn], type_ignores=[]), str(path), "exec"), scope)
    return scope["_create_packed_seq_idx"]


@pytest.mark.parametrize(("pad_to", "tail"), [(None, []), (24, [3] * 4)])
def test_mamba_resets_state_at_every_document_boundary(pad_to, tail):
    # documents of 5, 7 and 2 tokens aligned to 4: segments [0,8) [8,16) [16,20); pad_to 24 adds a tail [20,24)
    pack = assemble_pack([{"input_ids": [1] * 5}, {"input_ids": [2] * 7}, {"input_ids": [3] * 2}], alignment=4,
                         pad_to=pad_to)  # fmt: skip
    batch = collate_packs([pack])
    params = to_packed_seq_params(batch)
    total = batch["input_ids"].shape[1]
    seq_idx = _mamba_seq_idx()(None, params, total)
    assert seq_idx.tolist() == [[0] * 8 + [1] * 8 + [2] * 4 + tail]
    assert torch.equal(seq_idx.long(), batch["seq_idx"])  # the batch's own segment index, token for token
    names = {f.name for f in dataclasses.fields(PackedSeqParams)}
    if "total_tokens" in names:  # later megatron-core
        assert params.total_tokens == total
    else:  # 0.16.1: Mamba reads the row length from the tensor; nothing more to carry
        assert not hasattr(params, "total_tokens")


def test_hybrid_fields_fill_only_the_fields_the_class_defines():
    @dataclasses.dataclass
    class Later(PackedSeqParams):  # megatron-core after 0.16: total_tokens
        total_tokens: int = None

    cu = torch.tensor([0, 8, 16, 20], dtype=torch.int32)
    assert hybrid_fields(Later, cu) == {"total_tokens": 20}
    assert hybrid_fields(PackedSeqParams, cu) == ({"total_tokens": 20} if "total_tokens" in
                                                  {f.name for f in dataclasses.fields(PackedSeqParams)} else {})  # fmt: skip
