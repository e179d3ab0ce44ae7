"""The Energon mixin's overflow on one sample with images, a video and audio: spans from the tokens, cuts that
never fall inside a span, and slices that keep exactly the media whose spans they hold (rows by t·h·w)."""

from __future__ import annotations

import numpy as np
import pytest
import torch

pytest.importorskip("megatron.energon")

from packwise.integrations.energon import QWEN_MEDIA_BOUNDS, QWEN_MEDIA_TOKENS, SEQUENCE_FIELDS
from packwise.integrations.energon._overflow import (
    check_media,
    media_spans,
    slice_sample,
)
from packwise.pipeline import cut_points

IMG, VID, AUD, VS, VE, AB, AE = 151655, 151656, 151646, 151652, 151653, 151647, 151648
# text(2) [VS img×4 VE] text(1) [VS vid×2 VE] [AB aud×3 AE] text(2) [VS img×1 VE] text(1)
IDS = [1, 2, VS, *[IMG] * 4, VE, 3, VS, *[VID] * 2, VE, AB, *[AUD] * 3, AE, 4, 5, VS, IMG, VE, 6]


def sample() -> dict:
    n = len(IDS)
    return {
        "input_ids": torch.tensor(IDS), "labels": torch.arange(n), "position_ids": torch.arange(n).expand(3, -1),
        "mm_token_type_ids": torch.tensor([1 if t == IMG else 2 if t == VID else 3 if t == AUD else 0 for t in IDS]),
        "image_grid_thw": torch.tensor([[1, 4, 4], [1, 2, 2]]), "pixel_values": torch.arange(20.0)[:, None],
        "video_grid_thw": torch.tensor([[2, 2, 2]]), "pixel_values_videos": torch.arange(8.0)[:, None] + 100,
        "second_per_grid_ts": torch.tensor([0.5]), "input_features": torch.ones(1, 128, 30),
        "feature_attention_mask": torch.ones(1, 30, dtype=torch.int64),
    }  # fmt: skip


def test_spans_cover_markers_and_match_the_media():
    spans = media_spans(np.asarray(IDS), QWEN_MEDIA_TOKENS, QWEN_MEDIA_BOUNDS)
    assert spans == [(2, 8, "image"), (9, 13, "video"), (13, 18, "audio"), (20, 23, "image")]
    check_media(sample(), spans, merge_size=2, where="s")
    bad = {**sample(), "image_grid_thw": torch.tensor([[1, 4, 4]])}
    with pytest.raises(ValueError, match="2 image placeholder run"):
        check_media(bad, spans, merge_size=2, where="s")
    check_media(sample(), spans, merge_size=2, where="s", media_tokens=QWEN_MEDIA_TOKENS)
    wrong = {**sample(), "image_grid_thw": torch.tensor([[1, 4, 4], [1, 4, 2]])}  # image 1 needs 2 tokens, has 1
    with pytest.raises(ValueError, match=r"image 1 has 1 placeholder tokens but its grid \[1, 4, 2\] needs 2"):
        check_media(wrong, spans, merge_size=2, where="s", media_tokens=QWEN_MEDIA_TOKENS)


def test_cuts_move_before_spans_and_slices_keep_whole_media():
    spans = media_spans(np.asarray(IDS), QWEN_MEDIA_TOKENS, QWEN_MEDIA_BOUNDS)
    assert cut_points(len(IDS), 11, "truncate", spans=spans) == [(0, 9)]  # 11 falls inside the video (9-13)
    assert cut_points(len(IDS), 11, "split", spans=spans) == [(0, 9), (9, 20), (20, 24)]
    assert cut_points(len(IDS), 4, "truncate", spans=spans) == [(0, 2)]
    assert cut_points(len(IDS), 3, "truncate", spans=[(0, 6, "image")]) == []  # a span longer than the limit
    assert cut_points(len(IDS), 4, "split", spans=spans) == []  # a later cut is blocked: the sample is dropped
    names = (*SEQUENCE_FIELDS, "mm_token_type_ids")
    head, dropped = slice_sample(sample(), 0, 9, spans, names)
    assert dropped == 3 and head["image_grid_thw"].tolist() == [[1, 4, 4]]
    assert head["pixel_values"][:, 0].tolist() == list(range(16)) and "pixel_values_videos" not in head
    assert head["position_ids"].shape == (3, 9) and head["input_ids"].tolist() == IDS[:9]
    mid, dropped = slice_sample(sample(), 9, 20, spans, names)
    assert (
        dropped == 2 and mid["video_grid_thw"].tolist() == [[2, 2, 2]] and mid["second_per_grid_ts"].tolist() == [0.5]
    )
    assert mid["pixel_values_videos"].shape == (8, 1) and mid["input_features"].shape == (1, 128, 30)
    assert "image_grid_thw" not in mid and mid["mm_token_type_ids"].tolist().count(3) == 3
    tail, _ = slice_sample(sample(), 20, 24, spans, names)
    assert tail["image_grid_thw"].tolist() == [[1, 2, 2]] and tail["pixel_values"][:, 0].tolist() == [16, 17, 18, 19]


# ---------------------------------------------------------------- the mixin's accounting (a real TaskEncoder)
LENS = [25, 6, 9, 40, 7]  # at capacity 16, split: 25 -> 16 + 9, 40 -> 16 + 16 + 8 (3 pieces added)


def _encoder(*, labels: str = "shifted", overflow: str = "split", under: int = 0):
    from megatron.energon import TaskEncoder

    from packwise import PackingConfig
    from packwise.integrations.energon import PackwiseTaskEncoderMixin

    class Enc(PackwiseTaskEncoderMixin, TaskEncoder):
        packing_config = PackingConfig(capacity=16, labels=labels, buffer_size=8, overflow=overflow)

        def packing_length(self, s):
            return len(s.input_ids) - under

    return Enc()


def _samples(**fields_of):
    from dataclasses import make_dataclass

    from megatron.energon import Sample

    names = ["input_ids", *fields_of]
    TS = make_dataclass("TS", [(n, object) for n in names], bases=(Sample,))
    out = []
    for i, n in enumerate(LENS):
        ids = torch.arange(n) + 100 * (i + 1)
        extra = {k: f(ids) for k, f in fields_of.items()}
        out.append(TS(__key__=str(i), __restore_key__=(), __subflavors__={}, input_ids=ids, **extra))
    return out


def _run(enc, samples):
    packs = [p for g in enc.select_samples_to_pack(samples) for p in enc.pack_selected_samples(g)]
    return packs, enc.batch(packs)


@pytest.mark.parametrize("labels", ["shifted", "hf"])
def test_split_counts_the_target_each_later_piece_loses(labels):
    enc = _encoder(labels=labels)
    packs, batch = _run(enc, _samples())
    targets = int((batch["labels"] != -100).sum())
    # 82 targets (every token but each sample's first); 3 later pieces lose the target of their first token
    assert (targets, sum(n - 1 for n in LENS)) == (79, 82)
    assert (
        enc.packing_counts["loss_tokens_masked_at_boundary"]
        == 3
        == batch["packing_counts"]["loss_tokens_masked_at_boundary"]
    )
    assert (enc.packing_counts["samples_split"], enc.packing_counts["pieces_added"]) == (2, 3)
    from packwise import pack_dataset

    _, report = pack_dataset([{"input_ids": list(range(n))} for n in LENS], capacity=16, overflow="split")
    assert report.loss_tokens_masked_at_boundary == 3  # the offline pipeline's name and number


def test_split_boundary_count_follows_the_labels():
    # HF labels with -100 on every token at a cut (16, 32): the later pieces lose no target
    def labels(ids):
        lab = ids.clone()
        lab[[k for k in (16, 32) if k < len(ids)]] = -100
        return lab

    enc = _encoder()
    _, batch = _run(enc, _samples(labels=labels))
    assert enc.packing_counts["loss_tokens_masked_at_boundary"] == 0
    assert int((batch["labels"] != -100).sum()) == 82 - 3  # the 3 masked labels, nothing lost at the cuts
    # a Megatron row (labels = text[1:] + loss_mask): the earlier piece keeps the target of its last token
    enc = _encoder()
    _, batch = _run(enc, _samples(labels=lambda ids: ids + 1, loss_mask=lambda ids: torch.ones_like(ids)))
    assert enc.packing_counts["loss_tokens_masked_at_boundary"] == 0
    assert int((batch["labels"] != -100).sum()) == sum(LENS)


def test_packing_length_that_under_reports_is_fatal():
    from megatron.energon.errors import FatalSampleError

    enc = _encoder(overflow="truncate", under=5)
    msg = r"sample '0': packing_length says 20 tokens but its input_ids hold 25; .* packing_capacity 16"
    with pytest.raises(FatalSampleError, match=msg):
        enc.select_samples_to_pack(_samples())
    with pytest.raises(FatalSampleError, match=r"sample '1': packing_length says 1 tokens but its input_ids hold 6"):
        list(enc.pack_selected_samples(_samples()[1:3]))  # a restored group is checked too


def test_packing_length_that_over_reports_wastes_room_but_counts_real_tokens():
    enc = _encoder(overflow="truncate", under=-3)  # says 3 more tokens than the sample holds
    packs, batch = _run(enc, _samples())
    lengths = sorted(len(p.pack.input_ids) for p in packs)
    assert max(lengths) <= 16 and sum(lengths) == 16 + 6 + 9 + 16 + 7
    c = enc.packing_counts
    assert (c["samples_truncated"], c["tokens_truncated"]) == (2, 25 - 16 + 40 - 16)  # real tokens, not reported


def test_trl_completion_mask_is_the_loss_mask():
    from megatron.energon.errors import FatalSampleError

    def prompt_of_3(ids):
        return (torch.arange(len(ids)) >= 3).long()  # TRL completion_mask: the first 3 tokens are the prompt

    enc = _encoder(labels="hf", overflow="truncate")
    packs, batch = _run(enc, _samples(completion_mask=prompt_of_3))
    got = {tuple(k): p.pack.labels for k, p in zip(batch["keys"], packs)}
    one = next(lab for keys, lab in got.items() if keys[0] == "1")  # sample 1 (6 tokens) opens a pack
    assert one[:6].tolist() == [-100, -100, -100, 203, 204, 205]
    # every sample: targets after its prompt, within the kept head (25 -> 16, 40 -> 16)
    assert int((batch["labels"] != -100).sum()) == (16 - 3) + (6 - 3) + (9 - 3) + (16 - 3) + (7 - 3)
    assert enc.packing_counts["loss_tokens_truncated"] == 9 + 24  # the cut tails are all completion
    enc = _encoder(labels="hf", overflow="truncate")
    with pytest.raises(FatalSampleError, match=r"sample '0' has 'completion_mask' and 'labels': .* ambiguous"):
        enc.select_samples_to_pack(_samples(completion_mask=prompt_of_3, labels=lambda ids: ids))
