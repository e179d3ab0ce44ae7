"""Images for Qwen2/2.5-VL packing: load, size, preprocess, and MRoPE positions — all through transformers.

An image becomes ``grid_thw = (t, h, w)`` patches of 14×14 pixels (``t = 1`` for a still image, whose frame
is repeated to the temporal patch size 2), i.e. ``pixel_values (t·h·w, 1176)``, and ``t·h·w / merge²``
``<|image_pad|>`` tokens between ``<|vision_start|>`` and ``<|vision_end|>`` in the text. Sizes follow
``Qwen2VLImageProcessor``'s ``smart_resize`` between ``min_pixels`` and ``max_pixels`` (Qwen2-VL: 3,136 and
12,845,056). Needs the ``hf`` extra (transformers + pillow); no torchvision.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import get_args

import numpy as np

from ..constants import MediaFamily

QWEN2VL_MIN_PIXELS = 56 * 56
QWEN2VL_MAX_PIXELS = 28 * 28 * 16384


@dataclass(frozen=True)
class VisionSpec:
    """How images are sized and tokenized (Qwen2-VL defaults; Qwen2.5 tokenizer ids).

    Attributes:
        min_pixels, max_pixels: the area bounds of ``smart_resize``.
        patch_size: pixels per patch side (14).
        merge_size: patches merged per token side (2): one image token per ``merge²`` patches.
        temporal_patch_size: frames per temporal patch (2).
        image_token_id, vision_start_token_id, vision_end_token_id: Qwen2.5 special tokens.
        media_root: the folder images must be inside; relative image paths are relative to it (None: the
            input file's folder — see ``packwise.pipeline._media.resolve_media_path``).
        media_family: whose media encoding the offline pipeline writes (:data:`packwise.constants.MediaFamily`):
            ``"qwen2.5-vl"`` (these sizes) or ``"nemotron-omni"`` (:class:`NemotronOmniSpec`'s grid and audio
            rules; the pixel bounds and patch sizes here are then unused).

    Raises:
        ValueError: an unknown ``media_family``, naming it and the choices.

    Example:
        >>> from PIL import Image
        >>> from packwise.multimodal import VisionSpec, image_grid
        >>> spec = VisionSpec(max_pixels=448 * 448)
        >>> t, h, w = image_grid(Image.new("RGB", (448, 448)), spec)  # 32 x 32 patches of 14 px
        >>> (t, h, w), t * h * w // spec.merge_size**2  # image tokens in the sequence
        ((1, 32, 32), 256)
    """

    min_pixels: int = QWEN2VL_MIN_PIXELS
    max_pixels: int = QWEN2VL_MAX_PIXELS
    patch_size: int = 14
    merge_size: int = 2
    temporal_patch_size: int = 2
    image_token_id: int = 151655
    vision_start_token_id: int = 151652
    vision_end_token_id: int = 151653
    media_root: str | None = None
    media_family: MediaFamily = "qwen2.5-vl"

    def __post_init__(self) -> None:
        if self.media_family not in get_args(MediaFamily):
            raise ValueError(
                f"media_family={self.media_family!r} is not one of {', '.join(get_args(MediaFamily))}; pick the "
                "family of the model you train"
            )

    def to_dict(self) -> dict:
        return asdict(self)

    def tokens(self, grid_thw) -> int:
        """``<|image_pad|>`` tokens of an image: ``t·h·w / merge²``."""
        t, h, w = (int(x) for x in grid_thw)
        return t * h * w // self.merge_size**2

    def processor(self):
        """transformers' ``Qwen2VLImageProcessor`` (the PIL backend) with these bounds.

        transformers 5 names the PIL backend ``Qwen2VLImageProcessorPil``; asking for the default class there
        without torchvision falls back to it with a warning to install torchvision, which packwise never needs."""
        from transformers.models import qwen2_vl

        cls = getattr(qwen2_vl, "Qwen2VLImageProcessorPil", None) or qwen2_vl.Qwen2VLImageProcessor
        return cls(
            size={"shortest_edge": self.min_pixels, "longest_edge": self.max_pixels},
            patch_size=self.patch_size,
            merge_size=self.merge_size,
            temporal_patch_size=self.temporal_patch_size,
        )


def load_image(path, where: str = "sample"):
    """An RGB ``PIL.Image``.

    Raises:
        ValueError: the file does not exist or is not a readable image, naming ``where`` and the path.
    """
    from PIL import Image, UnidentifiedImageError

    p = Path(path)
    if p.is_dir():
        raise ValueError(f"{where}: image {p} is a directory, not an image file; name the file itself")
    if not p.is_file():
        raise ValueError(
            f"{where}: image {p} does not exist; fix the path (relative paths are relative to the input file)"
        )
    try:
        with Image.open(p) as img:
            return img.convert("RGB")
    except (UnidentifiedImageError, OSError, Image.DecompressionBombError) as e:
        raise ValueError(f"{where}: image {p} cannot be read ({type(e).__name__}: {e}); replace or remove it") from e


def image_grid(image, spec: VisionSpec) -> tuple[int, int, int]:
    """``(t, h, w)`` patch grid of an image without computing its pixels (the processor's smart_resize).

    Example:
        >>> from PIL import Image
        >>> image_grid(Image.new("RGB", (112, 112)), VisionSpec())
        (1, 8, 8)
    """
    from transformers.models.qwen2_vl.image_processing_pil_qwen2_vl import smart_resize

    width, height = image.size
    factor = spec.patch_size * spec.merge_size
    h, w = smart_resize(height, width, factor=factor, min_pixels=spec.min_pixels, max_pixels=spec.max_pixels)
    return 1, h // spec.patch_size, w // spec.patch_size


def process_images(paths: list, spec: VisionSpec, where: str = "pack"):
    """``pixel_values (patches, 3·temporal·patch²)`` float32 and ``image_grid_thw (images, 3)`` int64.

    Relative ``paths`` (as packed outputs record them) are relative to ``spec.media_root``.

    Raises:
        ValueError: a missing or unreadable image.
    """
    import torch

    if not paths:
        width = 3 * spec.temporal_patch_size * spec.patch_size**2
        return torch.zeros(0, width), torch.zeros(0, 3, dtype=torch.int64)
    if spec.media_root is not None:
        paths = [Path(spec.media_root) / p for p in paths]  # absolute paths stay as they are
    return process_images_in_memory([load_image(p, where) for p in paths], spec)


def process_images_in_memory(images: list, spec: VisionSpec):
    """:func:`process_images` for RGB ``PIL.Image`` objects already in memory (an Energon sample's)."""
    import torch

    out = spec.processor()(images=[im.convert("RGB") for im in images], return_tensors="np")
    return torch.from_numpy(np.asarray(out["pixel_values"], dtype=np.float32)), torch.from_numpy(
        np.asarray(out["image_grid_thw"], dtype=np.int64)
    )


def mrope_position_ids(input_ids, mm_token_type_ids, image_grid_thw, *, spatial_merge_size: int = 2,
                       video_grid_thw=None, second_per_grid_ts=None):  # fmt: skip
    """``(3, L)`` int64 MRoPE positions of one sample, computed by transformers' Qwen2.5-VL ``get_rope_index``.

    Text tokens count up on all three rows; image tokens get (temporal, height, width) positions; video tokens
    (``mm_token_type_ids == 2``) temporal positions scaled by ``second_per_grid_ts`` (seconds per temporal patch).

    Example:
        >>> import torch
        >>> ids = torch.tensor([1, 151652, 151655, 151655, 151655, 151655, 151653, 2])
        >>> mrope_position_ids(ids, (ids == 151655).long(), torch.tensor([[1, 4, 4]])).tolist()
        [[0, 1, 2, 2, 2, 2, 4, 5], [0, 1, 2, 2, 3, 3, 4, 5], [0, 1, 2, 3, 2, 3, 4, 5]]
    """
    import torch

    ids = torch.as_tensor(input_ids).reshape(1, -1)
    types = torch.as_tensor(mm_token_type_ids).reshape(1, -1).to(torch.int64)
    grid = torch.as_tensor(image_grid_thw, dtype=torch.int64).reshape(-1, 3)
    if not bool(types.any()):
        return torch.arange(ids.shape[1]).expand(3, -1).clone()
    vgrid = (
        None if video_grid_thw is None or not len(video_grid_thw) else torch.as_tensor(video_grid_thw).reshape(-1, 3)
    )
    secs = None if vgrid is None or second_per_grid_ts is None else torch.as_tensor(second_per_grid_ts).reshape(-1)
    pos, _ = _rope_index(spatial_merge_size)(ids, types, grid if grid.numel() else None, vgrid, secs)
    return pos[:, 0].to(torch.int64)


def _rope_index(spatial_merge_size: int):
    """transformers' ``Qwen2_5_VLModel.get_rope_index`` bound to a config-only stand-in (no weights)."""
    import types

    from transformers import Qwen2_5_VLConfig
    from transformers.models.qwen2_5_vl.modeling_qwen2_5_vl import Qwen2_5_VLModel

    holder = types.SimpleNamespace(config=Qwen2_5_VLConfig(vision_config={"spatial_merge_size": spatial_merge_size}))
    holder.get_vision_position_ids = types.MethodType(Qwen2_5_VLModel.get_vision_position_ids, holder)
    return types.MethodType(Qwen2_5_VLModel.get_rope_index, holder)


def expected_patches(grid_thw) -> int:
    """Patches of an image: ``t·h·w``."""
    return math.prod(int(x) for x in grid_thw)


def qwen3_vl_position_ids(input_ids, mm_token_type_ids, image_grid_thw=None, *, video_grid_thw=None,
                          spatial_merge_size: int = 2):  # fmt: skip
    """``(3, L)`` int64 interleaved-MRoPE positions of one Qwen3-VL sample, computed by transformers'
    ``Qwen3VLModel.get_rope_index`` (videos split per temporal patch: their frames are separated by timestamps).

    Example:
        >>> import torch
        >>> ids = torch.tensor([1, 151652, 151655, 151655, 151655, 151655, 151653, 2])
        >>> qwen3_vl_position_ids(ids, (ids == 151655).long(), torch.tensor([[1, 4, 4]])).tolist()
        [[0, 1, 2, 2, 2, 2, 4, 5], [0, 1, 2, 2, 3, 3, 4, 5], [0, 1, 2, 3, 2, 3, 4, 5]]
    """
    import types

    import torch
    from transformers import Qwen3VLConfig
    from transformers.models.qwen3_vl.modeling_qwen3_vl import Qwen3VLModel

    holder = types.SimpleNamespace(config=Qwen3VLConfig(vision_config={"spatial_merge_size": spatial_merge_size}))
    holder.get_vision_position_ids = types.MethodType(Qwen3VLModel.get_vision_position_ids, holder)
    ids = torch.as_tensor(input_ids).reshape(1, -1)
    grid = None if image_grid_thw is None or not len(image_grid_thw) else torch.as_tensor(image_grid_thw).reshape(-1, 3)
    vgrid = (
        None if video_grid_thw is None or not len(video_grid_thw) else torch.as_tensor(video_grid_thw).reshape(-1, 3)
    )
    types_ = torch.as_tensor(mm_token_type_ids).reshape(1, -1).to(torch.int64)
    # called unbound on a stand-in self; transformers annotates LongTensor/IntTensor (plain Tensors here)
    pos, _ = Qwen3VLModel.get_rope_index(holder, ids, types_, grid, None if vgrid is None else vgrid.clone())  # type: ignore[arg-type]
    return pos[:, 0].to(torch.int64)
