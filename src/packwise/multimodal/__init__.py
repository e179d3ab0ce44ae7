"""Multimodal packing (Qwen2/2.5-VL images and video; Qwen2-Audio / Qwen2.5-Omni audio): media sized, tokenized, packed
with MRoPE and kept in step with their tokens.

``__all__`` is the user API. The other names imported here (marked ``noqa: F401``) are the layer API: what
the pipeline, tokenize and the integrations import from ``multimodal`` instead of reaching into ``multimodal._*``.
"""

from ._audio import AudioSpec, audio_features, load_audio, omni_position_ids  # noqa: F401
from ._chat import PLACEHOLDER, audio_tokens_known, expand_images, is_multimodal  # noqa: F401
from ._encode import encode_media_chat
from ._images import (  # noqa: F401
    VisionSpec,
    image_grid,
    load_image,
    mrope_position_ids,
    process_images,
    qwen3_vl_position_ids,
)
from ._nemotron import NemotronOmniSpec, encode_nemotron_chat, nemotron_audio, nemotron_images  # noqa: F401  (Nemotron-Omni)
from ._video import process_video, video_frames, video_grid  # noqa: F401

__all__ = ["AudioSpec", "VisionSpec", "encode_media_chat"]
