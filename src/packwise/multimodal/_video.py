"""Video for Qwen2/2.5-VL packing: frames from a file (PyAV) or a frame list, ``pixel_values_videos``,
``video_grid_thw`` and ``second_per_grid_ts``.

A video of ``F`` frames (padded to a multiple of ``temporal_patch_size`` = 2 by repeating the last frame, as
transformers' ``Qwen2VLVideoProcessor`` does) becomes ``grid_thw = (F/2, h, w)`` and ``t·h·w / merge²``
``<|video_pad|>`` tokens between ``<|vision_start|>`` and ``<|vision_end|>``; ``second_per_grid_ts =
temporal_patch_size / fps``. Each frame is resized and normalized by transformers' ``Qwen2VLImageProcessor``
(PIL backend, the image bounds of :class:`VisionSpec`); two consecutive frames then form one temporal patch in
the layout of ``Qwen2VLVideoProcessor._preprocess`` (``(t, h/m, w/m, m, m, C, temporal, patch, patch)``
flattened). transformers' own video processor needs torchvision, whose PyPI wheel is built for CUDA torch; this
path needs only pillow (and ``av`` for files).
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

from ._images import VisionSpec, image_grid

VIDEO_TOKEN_ID = 151656  # <|video_pad|> in Qwen2.5 / Qwen2.5-VL
DEFAULT_FPS = 2.0  # Qwen2.5-VL's processor default sampling rate


def load_video(path, where: str = "sample") -> tuple[list, float]:
    """``(frames, fps)``: every frame of a video file as an RGB ``PIL.Image`` and the stream's average rate.

    Raises:
        ValueError: a missing or undecodable file, or one without frames, naming ``where`` and the path.
    """
    import av

    p = Path(path)
    if not p.is_file():
        raise ValueError(f"{where}: video {p} does not exist; fix the path (relative paths are relative to the input)")
    try:
        with av.open(str(p)) as container:
            stream = container.streams.video[0]
            fps = float(stream.average_rate or DEFAULT_FPS)
            frames = [f.to_image().convert("RGB") for f in container.decode(stream)]
    except (av.FFmpegError, IndexError, ValueError) as e:
        raise ValueError(f"{where}: video {p} cannot be decoded ({type(e).__name__}: {e})") from e
    if not frames:
        raise ValueError(f"{where}: video {p} has no frames")
    return frames, fps


def video_grid(frames: list, spec: VisionSpec) -> tuple[int, int, int]:
    """``(t, h, w)`` of a frame list: ``t = ceil(F / temporal_patch_size)``, ``h, w`` from the first frame.

    Example:
        >>> from PIL import Image
        >>> video_grid([Image.new("RGB", (56, 56))] * 3, VisionSpec())
        (2, 4, 4)
    """
    _, h, w = image_grid(frames[0], spec)
    return -(-len(frames) // spec.temporal_patch_size), h, w


def process_video(frames: list, spec: VisionSpec, where: str = "sample"):
    """``pixel_values_videos (t·h·w, 3·temporal·patch²)`` float32 and ``video_grid_thw (3,)`` int64.

    Raises:
        ValueError: no frames, or frames of different sizes.

    Example:
        >>> from PIL import Image
        >>> pv, grid = process_video([Image.new("RGB", (56, 56))] * 4, VisionSpec())
        >>> tuple(pv.shape), grid.tolist()
        ((32, 1176), [2, 4, 4])
    """
    import torch

    if not frames:
        raise ValueError(f"{where}: a video needs at least one frame")
    if len({f.size for f in frames}) != 1:
        raise ValueError(f"{where}: video frames differ in size ({sorted({f.size for f in frames})}); resize them")
    tps, ps = spec.temporal_patch_size, spec.patch_size
    frames = list(frames) + [frames[-1]] * (-len(frames) % tps)
    out = spec.processor()(images=[f.convert("RGB") for f in frames], return_tensors="np")
    pv, grids = np.asarray(out["pixel_values"], dtype=np.float32), np.asarray(out["image_grid_thw"])
    hw = int(grids[0, 1] * grids[0, 2])
    per_frame = pv.reshape(len(frames), hw, 3, tps, ps, ps)[:, :, :, 0]  # the image path repeats each frame
    t = len(frames) // tps
    video = per_frame.reshape(t, tps, hw, 3, ps, ps).transpose(0, 2, 3, 1, 4, 5).reshape(t * hw, 3 * tps * ps * ps)
    return torch.from_numpy(np.ascontiguousarray(video)), torch.tensor([t, int(grids[0, 1]), int(grids[0, 2])])


def video_frames(paths, where: str = "sample") -> tuple[list, float]:
    """``(frames, fps)`` of a stored video: one path that is not an image file is decoded with PyAV (its
    own rate); otherwise the paths are the frames (rate :data:`DEFAULT_FPS`). The one rule the pipeline uses
    when packing and when re-materialising, so both see the same frames."""
    from PIL import Image

    from ._images import load_image

    paths = list(paths)
    if len(paths) == 1 and Path(paths[0]).suffix.lower() not in Image.registered_extensions():
        return load_video(paths[0], where)
    return [load_image(q, where) for q in paths], DEFAULT_FPS
