"""Video documents (Qwen2.5-VL): PyAV decoding, pixel_values_videos layout, <|video_pad|> counts, temporal MRoPE."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from PIL import Image

from packwise.multimodal import VisionSpec, encode_media_chat, mrope_position_ids
from packwise.multimodal._video import load_video, process_video
from packwise.text import load_tokenizer

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


def test_offline_pipeline_packs_video_files_and_frame_lists(clip, tmp_path):
    """{type: video, path} and {type: video, frames} parts through pack -> Parquet -> PackedParquetDataset."""
    import json

    from packwise.assemble import collate_packs
    from packwise.cli import main
    from packwise.data import PackedParquetDataset

    frames = []
    for k, f in enumerate(noise(3, seed=2)):
        Image.fromarray(f).save(tmp_path / f"f{k}.png")
        frames.append(f"f{k}.png")
    (tmp_path / "noise.mkv").write_bytes(clip.read_bytes())
    rows = [
        {"messages": [{"role": "user", "content": [{"type": "video", "path": "noise.mkv"}, {"type": "text", "text": "?"}]},
                      {"role": "assistant", "content": "Noise."}]},
        {"messages": [{"role": "user", "content": "hi"}, {"role": "assistant", "content": "hello"}]},
        {"messages": [{"role": "user", "content": [{"type": "video", "frames": frames, "fps": 1}]},
                      {"role": "assistant", "content": "Still noise."}]},
    ]  # fmt: skip
    src = tmp_path / "v.jsonl"
    src.write_text("".join(json.dumps(r) + "\n" for r in rows))
    out = tmp_path / "out"
    assert main(["pack", str(src), "-o", str(out), "--capacity", "512", "--max-pixels", str(56 * 56), "-q"]) == 0
    pack = PackedParquetDataset(out)[0]
    ids, mm = pack.input_ids, pack.columns["mm_token_type_ids"]
    grids = pack.media["video_grid_thw"].tolist()
    assert sorted(grids) == [[2, 4, 4], [3, 4, 4]]  # 3 frames -> t 2 (padded); 5 frames -> t 3
    assert int((ids == VIDEO_PAD).sum()) == int((mm == 2).sum()) == 8 + 12
    assert pack.media["pixel_values_videos"].shape == (32 + 48, 1176)
    assert sorted(pack.media["second_per_grid_ts"].tolist()) == [1.0, 2.0]  # 2 fps file; frames at fps 1
    cu, v = pack.cu_seqlens.tolist(), 0
    for a, b in zip(cu, cu[1:]):  # each sequence's positions equal the sample alone (transformers' rope index)
        if (mm[a:b] == 2).any():
            alone = mrope_position_ids(ids[a:b], mm[a:b].long(), torch.zeros(0, 3),
                                       video_grid_thw=pack.media["video_grid_thw"][v : v + 1],
                                       second_per_grid_ts=pack.media["second_per_grid_ts"][v : v + 1])  # fmt: skip
            assert torch.equal(pack.position_ids[:, a:b], alone)
            v += 1
    # the re-materialised pixels are the videos' own, in pack order
    own = {
        2: process_video([Image.open(tmp_path / x) for x in frames], SPEC)[0],
        3: process_video(load_video(clip)[0], SPEC)[0],
    }
    assert torch.equal(pack.media["pixel_values_videos"], torch.cat([own[t] for t, _, _ in grids]))
    assert collate_packs([pack])["pixel_values_videos"].shape == (80, 1176)


def test_truncation_never_cuts_a_video(clip):
    from packwise.pipeline import pack_dataset

    content = [
        {"type": "text", "text": "word " * 20},
        {"type": "video", "path": str(clip)},
        {"type": "text", "text": "x"},
    ]
    row = {"messages": [{"role": "user", "content": content}, {"role": "assistant", "content": "Noise."}]}
    table, report = pack_dataset([row], capacity=30, vision=SPEC)  # 30 falls inside the 14-token video block
    ids = np.asarray(table.column("input_ids").to_pylist()[0])
    assert (ids == VIDEO_PAD).sum() == 0 and (ids == 151652).sum() == 0 and len(ids) < 30  # cut moved back
    assert "video_paths" not in table.column_names  # no video left anywhere
    assert report.multimodal["videos_dropped"] == 1 and report.multimodal["videos_packed"] == 0
    assert report.samples_truncated == 1 and report.tokens_read == report.tokens_packed + report.tokens_truncated
