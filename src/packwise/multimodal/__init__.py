"""Multimodal packing (Qwen2/2.5-VL images and video; Qwen2-Audio / Qwen2.5-Omni audio): media sized, tokenized, packed
with MRoPE and kept in step with their tokens."""

from ._audio import AudioSpec, audio_features, load_audio, omni_position_ids
from ._chat import PLACEHOLDER, expand_images, is_multimodal
from ._encode import encode_media_chat
from ._images import VisionSpec, image_grid, load_image, mrope_position_ids, process_images
from ._video import process_video, video_grid

__all__ = [
    "PLACEHOLDER",
    "AudioSpec",
    "VisionSpec",
    "audio_features",
    "encode_media_chat",
    "expand_images",
    "image_grid",
    "is_multimodal",
    "load_audio",
    "load_image",
    "mrope_position_ids",
    "omni_position_ids",
    "process_images",
    "process_video",
    "video_grid",
]
