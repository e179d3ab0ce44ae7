"""Video documents (Qwen2.5-VL): PyAV decoding, pixel_values_videos layout, <|video_pad|> counts, temporal MRoPE."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from PIL import Image

from packwise.multimodal import VisionSpec, encode_media_chat
from packwise.multimodal._video import load_video, process_video
from packwise.tokenize import load_tokenizer

SPEC = VisionSpec(max_pixels=56 * 56)
VIDEO_PAD = 151656


def noise(n, seed=0, size=56):
    rng = np.random.default_rng(seed)
    return [rng.integers(0, 256, (size, size, 3), dtype=np.uint8) for _ in range(n)]


@pytest.fixture(scope="module")
def clip(tmp_path_factory):
    """A 5-frame 56x56 lossless (FFV1) video at 2 fps, made with PyAV."""
    import av

    path = tmp_path_factory.mktemp("video") / "noise.mkv"
    with av.open(str(path), "w") as out:
        stream = out.add_stream("ffv1", rate=2)
        stream.width = stream.height = 56
        stream.pix_fmt = "bgr0"
        for frame in noise(5):
            for packet in stream.encode(av.VideoFrame.from_ndarray(frame, format="rgb24").reformat(format="bgr0")):
                out.mux(packet)
        for packet in stream.encode():
            out.mux(packet)
    return path


def test_load_video_decodes_every_frame_exactly(clip):
    frames, fps = load_video(clip)
    assert fps == 2.0 and len(frames) == 5
    assert all(np.array_equal(np.asarray(f), n) for f, n in zip(frames, noise(5)))


def test_two_equal_frames_give_the_image_patches():
    # the image path repeats a still frame over the temporal patch; a video of that frame twice is the same
    frame = Image.fromarray(noise(1)[0])
    pv, grid = process_video([frame, frame], SPEC)
    from packwise.multimodal._images import process_images_in_memory

    img, img_grid = process_images_in_memory([frame], SPEC)
    assert grid.tolist() == [1, 4, 4] == img_grid[0].tolist()
    assert torch.equal(pv, img)


def test_frames_are_stacked_in_time():
    a, b = (Image.fromarray(x) for x in noise(2, seed=1))
    pv, grid = process_video([a, b, a], SPEC)  # 3 frames -> padded with the last to 4 -> t = 2
    assert grid.tolist() == [2, 4, 4] and pv.shape == (32, 1176)
    pa, _ = process_video([a, a], SPEC)
    pab = pv[:16].reshape(16, 3, 2, 14, 14)
    assert torch.equal(pab[:, :, 0], pa.reshape(16, 3, 2, 14, 14)[:, :, 0])  # first temporal slot: frame a
    assert not torch.equal(pab[:, :, 1], pab[:, :, 0])  # second: frame b
    assert torch.equal(pv[16:].reshape(16, 3, 2, 14, 14), pa.reshape(16, 3, 2, 14, 14))  # a, a (padded)


def test_encode_video_chat_counts_tokens_and_temporal_mrope(clip):
    frames, fps = load_video(clip)
    chat = [{"role": "user", "content": [{"type": "video"}, {"type": "text", "text": "What moves?"}]},
            {"role": "assistant", "content": "Noise."}]  # fmt: skip
    f = encode_media_chat(chat, load_tokenizer("qwen2.5"), videos=[frames], video_fps=[fps], vision=SPEC)
    assert f["video_grid_thw"].tolist() == [[3, 4, 4]] and f["pixel_values_videos"].shape == (48, 1176)
    assert int((f["input_ids"] == VIDEO_PAD).sum()) == 12 and int((f["mm_token_type_ids"] == 2).sum()) == 12
    assert f["second_per_grid_ts"].tolist() == [1.0]  # temporal patch of 2 frames at 2 fps
    assert (f["labels"][f["mm_token_type_ids"] == 2] == -100).all()
    # temporal positions step by second_per_grid_t * tokens_per_second (Qwen2.5-VL: 1 s * 4) per temporal patch
    from transformers import Qwen2_5_VLConfig
    from transformers.models.qwen2_5_vl.modeling_qwen2_5_vl import Qwen2_5_VLModel

    model = Qwen2_5_VLModel.__new__(Qwen2_5_VLModel)
    model.config = Qwen2_5_VLConfig()
    want, _ = Qwen2_5_VLModel.get_rope_index(
        model, f["input_ids"][None], f["mm_token_type_ids"][None], None, f["video_grid_thw"], f["second_per_grid_ts"]
    )
    assert torch.equal(f["position_ids"], want[:, 0])
    t = f["position_ids"][0][f["mm_token_type_ids"] == 2]
    assert t.unique().diff().tolist() == [4, 4]


def test_video_errors():
    a, b = Image.new("RGB", (56, 56)), Image.new("RGB", (84, 56))
    with pytest.raises(ValueError, match="video frames differ in size"):
        process_video([a, b], SPEC)
    with pytest.raises(ValueError, match="does not exist"):
        load_video("/nonexistent/x.mp4")
    chat = [{"role": "user", "content": [{"type": "video"}]}, {"role": "assistant", "content": "x"}]
    with pytest.raises(ValueError, match=r"an entry left in images \(0\) / videos \(0\)"):
        encode_media_chat(chat, load_tokenizer("qwen2.5"))


def test_verify_documents_include_a_video_document():
    # tests/cli/test_cli_verify.py::test_verify_tiny_qwen25_vl_... proves isolation on these 4 documents
    from packwise.verify._models import load_multimodal_documents

    docs = load_multimodal_documents(load_tokenizer("qwen2.5"), num_docs=4, max_tokens=48)
    kinds = ["video" if "pixel_values_videos" in d else "image" if "pixel_values" in d else "text" for d in docs]
    assert kinds == ["text", "image", "text", "video"]
    assert docs[3]["video_grid_thw"].tolist() == [[2, 4, 4]] and int((docs[3]["input_ids"] == VIDEO_PAD).sum()) == 8
