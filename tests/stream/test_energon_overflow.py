"""The Energon mixin's overflow on one sample with images, a video and audio: spans from the tokens, cuts that
never fall inside a span, and slices that keep exactly the media whose spans they hold (rows by t·h·w)."""

from __future__ import annotations

import numpy as np
import pytest
import torch

pytest.importorskip("megatron.energon")

from packwise.integrations._energon_overflow import (
    check_media,
    cut_points,
    media_spans,
    slice_sample,
)
from packwise.integrations.energon import QWEN_MEDIA_BOUNDS, QWEN_MEDIA_TOKENS, SEQUENCE_FIELDS

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
    assert cut_points(len(IDS), 11, spans, split=False) == [(0, 9)]  # 11 falls inside the video (9-13)
    assert cut_points(len(IDS), 11, spans, split=True) == [(0, 9), (9, 20), (20, 24)]
    assert cut_points(len(IDS), 4, spans, split=False) == [(0, 2)]
    assert cut_points(len(IDS), 3, [(0, 6, "image")], split=False) == []  # a span longer than the limit
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
