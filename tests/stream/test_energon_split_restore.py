"""Real megatron-energon: ``overflow="split"`` restores exactly after every batch (each piece is a group of its
own), per-token columns of any shape are cut on their token axis, and MTP x Energon is refused at setup."""

from __future__ import annotations

import io
import itertools
import subprocess
import sys
import tarfile
from dataclasses import dataclass, make_dataclass
from pathlib import Path

import pytest
import torch

pytest.importorskip("megatron.energon")

from megatron.energon import Sample
from megatron.energon.errors import FatalSampleError

from packwise import PackingConfig
from packwise.integrations.energon import PackwiseTaskEncoderMixin

LENGTHS = [5 + (i * 7) % 40 for i in range(24)]  # 5..44 tokens at capacity 16: most samples split


@pytest.fixture(scope="module")
def dataset_dir(tmp_path_factory):
    root = tmp_path_factory.mktemp("energon_split")
    (root / "shards").mkdir()
    with tarfile.open(root / "shards" / "shard_000.tar", "w") as tar:
        for i, n in enumerate(LENGTHS):
            info = tarfile.TarInfo(f"{i:06d}.txt")
            info.size = n
            tar.addfile(info, io.BytesIO(b"x" * n))
    subprocess.run(
        [str(Path(sys.executable).parent / "energon"), "prepare", "--non-interactive", "--split-parts",
         "train:shards/.*", "--sample-type", "TextSample", "--field-map", '{"text": "txt"}', str(root)],
        check=True, capture_output=True,
    )  # fmt: skip
    return root


def loader(root, state=None):
    from megatron.energon import TaskEncoder, TextSample, WorkerConfig, get_savable_loader, get_train_dataset, stateless

    @dataclass
    class Tokens(Sample):
        input_ids: torch.Tensor

    class Encoder(PackwiseTaskEncoderMixin, TaskEncoder[TextSample, Tokens, dict, dict]):
        packing_capacity = 16
        packing_overflow = "split"

        @stateless
        def preencode_sample(self, s):  # token t of sample i is 1000 i + t: every value names its origin
            return Tokens.derive_from(s, input_ids=torch.arange(len(s.text)) + 1000 * int(s.__key__[-6:]))

    ds = get_train_dataset(
        str(root), worker_config=WorkerConfig(rank=0, world_size=1, num_workers=0), batch_size=2,
        shuffle_buffer_size=None, max_samples_per_sequence=None, packing_buffer_size=8, task_encoder=Encoder(),
        repeat=True,
    )  # fmt: skip
    ld = get_savable_loader(ds)
    if state is not None:
        ld.restore_state_rank(state)
    return ld


def _fingerprint(batch) -> tuple:
    return tuple(map(tuple, batch["keys"])), tuple(batch["input_ids"].flatten().tolist())


@pytest.mark.slow  # 13 loaders (~1 s each on 2 cores)
def test_split_restores_exactly_after_every_batch(dataset_dir):
    n = 12
    full = [_fingerprint(b) for b in itertools.islice(loader(dataset_dir), n)]
    # the first buffer (samples 0-7: 5, 12, 19, 26, 33, 40, 7, 14 tokens): 14 | 12 | 7+5 | then the pieces of
    # 19 (16 + 3), 26, ... one pack each; a batch boundary falls between two pieces of one sample
    assert [b[0] for b in full[:4]] == [
        (("000007",), ("000001",)), (("000006", "000000"), ("000002#0",)),
        (("000002#1",), ("000003#0",)), (("000003#1",), ("000004#0",)),
    ]  # fmt: skip
    for k in range(1, n):
        ld = loader(dataset_dir)
        it = iter(ld)
        for _ in range(k):
            next(it)
        state = ld.save_state_rank()
        restored = [_fingerprint(b) for b in itertools.islice(loader(dataset_dir, state), n - k)]
        assert restored == full[k:], f"restore after batch {k}"
    tokens = [t for _, ids in full[:6] for t in ids]
    assert len(tokens) == len(set(tokens))  # 6 batches of one pass: no token twice, none lost in between


def _encoder(policy: str):
    from megatron.energon import TaskEncoder

    class Enc(PackwiseTaskEncoderMixin, TaskEncoder):
        packing_capacity = 4
        packing_overflow = policy
        packing_columns = ("col",)

    return Enc()


@pytest.mark.parametrize("policy", ["truncate", "split"])
def test_mixin_cuts_nested_list_mrope_positions_and_wide_columns_on_the_token_axis(policy):
    TS = make_dataclass("TS", [("input_ids", object), ("position_ids", object), ("col", object)], bases=(Sample,))
    long = TS(__key__="a", __restore_key__=(), __subflavors__={}, input_ids=[1, 2, 3, 4, 5, 6],
              position_ids=[[0, 1, 2, 3, 4, 5], [0, 1, 2, 3, 4, 5], [0, 1, 2, 3, 4, 5]],
              col=[[i, -i] for i in range(6)])  # fmt: skip
    enc = _encoder(policy)
    packs = [p for g in enc.select_samples_to_pack([long]) for p in enc.pack_selected_samples(g)]
    got = [(p.pack.input_ids.tolist(), p.pack.position_ids.tolist(), p.pack.columns["col"].tolist()) for p in packs]
    head = ([1, 2, 3, 4], [[0, 1, 2, 3]] * 3, [[0, 0], [1, -1], [2, -2], [3, -3]])
    tail = ([5, 6], [[4, 5]] * 3, [[4, -4], [5, -5]])
    assert got == ([head] if policy == "truncate" else [head, tail])
    assert [p.keys for p in packs] == ([["a"]] if policy == "truncate" else [["a#0"], ["a#1"]])


def test_mtp_with_energon_packing_is_refused_at_setup_naming_both_keys():
    cfg = PackingConfig(consumer={"multi_token_prediction": True}, buffer_size=16, alignment=4, labels="shifted")
    with pytest.raises(
        ValueError, match=r"consumer\.multi_token_prediction=True with Energon packing \(buffer_size=16\)"
    ):
        cfg.energon_settings()
    from megatron.energon import TaskEncoder

    class Enc(PackwiseTaskEncoderMixin, TaskEncoder):
        packing_config = cfg

    TS = make_dataclass("TS", [("input_ids", object)], bases=(Sample,))
    sample = TS(__key__="a", __restore_key__=(), __subflavors__={}, input_ids=torch.arange(3))
    with pytest.raises(FatalSampleError, match=r"multi_token_prediction=True.*cfg\.packed_seq_params"):
        Enc().select_samples_to_pack([sample])
    PackingConfig(consumer={"multi_token_prediction": True}, alignment=4, labels="shifted").collator()  # off Energon
