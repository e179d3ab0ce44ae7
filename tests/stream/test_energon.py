"""End to end with the real megatron-energon: a WebDataset of chitchat conversations prepared with energon's
own CLI, packed by the packwise mixin, then save/restore of the loader state continues identically."""

from __future__ import annotations

import io
import json
import subprocess
import sys
import tarfile
from dataclasses import dataclass
from pathlib import Path

import pytest
import torch

energon = pytest.importorskip("megatron.energon")

CAPACITY = 512


@pytest.fixture(scope="module")
def dataset_dir(tmp_path_factory):
    from packwise.pipeline._demo import chitchat_conversations

    root = tmp_path_factory.mktemp("energon")
    (root / "shards").mkdir()
    with tarfile.open(root / "shards" / "shard_000.tar", "w") as tar:
        for i, conv in enumerate(chitchat_conversations()[:60]):
            data = json.dumps(conv).encode()
            info = tarfile.TarInfo(f"{i:06d}.txt")
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))
    energon_cli = Path(sys.executable).parent / "energon"
    subprocess.run(
        [str(energon_cli), "prepare", "--non-interactive", "--split-parts", "train:shards/.*", "--sample-type",
         "TextSample", "--field-map", '{"text": "txt"}', str(root)],
        check=True, capture_output=True,
    )  # fmt: skip
    return root


def make_encoder():
    from megatron.energon import Sample, TaskEncoder, TextSample, stateless

    from packwise.integrations.energon import PackwiseTaskEncoderMixin
    from packwise.text import encode_chats, load_tokenizer

    tok = load_tokenizer("qwen2.5")

    @dataclass
    class TokenSample(Sample):
        input_ids: torch.Tensor
        labels: torch.Tensor
        packing_key: str

    class ChatEncoder(PackwiseTaskEncoderMixin, TaskEncoder[TextSample, TokenSample, dict, dict]):
        packing_capacity = CAPACITY
        packing_alignment = 8

        @stateless
        def preencode_sample(self, sample: TextSample) -> TokenSample:
            [(ids, mask)] = encode_chats([json.loads(sample.text)], tok)
            ids, mask = torch.from_numpy(ids[: CAPACITY - 8]).long(), torch.from_numpy(mask[: CAPACITY - 8])
            return TokenSample.derive_from(
                sample, input_ids=ids, labels=torch.where(mask, ids, -100), packing_key="qwen2.5/chatml"
            )

        @stateless
        def postencode_sample(self, sample: TokenSample) -> TokenSample:
            return sample

    return ChatEncoder()


def loader(root, state=None):
    from megatron.energon import WorkerConfig, get_savable_loader, get_train_dataset

    wc = WorkerConfig(rank=0, world_size=1, num_workers=0)
    ds = get_train_dataset(
        str(root), worker_config=wc, batch_size=2, shuffle_buffer_size=None, max_samples_per_sequence=None,
        packing_buffer_size=16, task_encoder=make_encoder(), repeat=False,
    )  # fmt: skip
    ld = get_savable_loader(ds)
    if state is not None:
        ld.restore_state_rank(state)
    return ld


def test_packs_use_every_sample_once_and_fit(dataset_dir):
    keys = []
    for batch in loader(dataset_dir):
        assert batch["layout"] == "thd"
        lengths = batch["cu_seqlens_padded"].diff()
        assert int(batch["num_sequences"].sum()) == sum(len(k) for k in batch["keys"])
        for p, pack_keys in enumerate(batch["keys"]):
            start, end = batch["cu_pack_tokens"][p : p + 2].tolist()
            assert end - start <= CAPACITY
            keys += pack_keys
        assert (lengths % 8 == 0).all()  # aligned costs
    assert len(keys) == 60 and len(set(keys)) == 60


def test_save_restore_continues_identically(dataset_dir):
    ld = loader(dataset_dir)
    it = iter(ld)
    for _ in range(2):
        next(it)
    state = ld.save_state_rank()
    expected = [[tuple(k) for k in b["keys"]] for b in it]
    restored = [[tuple(k) for k in b["keys"]] for b in loader(dataset_dir, state)]
    assert expected and restored == expected
