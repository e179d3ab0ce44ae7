"""Multimodal packing (Qwen2/2.5-VL): images sized, tokenized, packed with MRoPE and media kept in step."""

from ._chat import PLACEHOLDER, expand_images, is_multimodal
from ._images import VisionSpec, image_grid, load_image, mrope_position_ids, process_images

__all__ = [
    "PLACEHOLDER",
    "VisionSpec",
    "expand_images",
    "image_grid",
    "is_multimodal",
    "load_image",
    "mrope_position_ids",
    "process_images",
]
