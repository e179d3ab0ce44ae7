"""``tiny-nemotron-h-omni``: a random-init Nemotron-Omni (transformers ``nemotron_h_omni``) and its documents.

The model (about 19.6 M parameters, 19.4 M of them the qwen2.5-vocabulary embeddings and head): a RADIO vision
encoder (hidden 32, 2 layers, patch 16), a Parakeet audio encoder (hidden 32, 1 layer, 80 mel bins, 8×
subsampling) with its projector, and a NemotronH hybrid LM (hidden 64, ``hybrid_override_pattern="M*"``: one
Mamba2 layer, 4 heads of 32, state 16; one attention layer) — the recipe of
``/work/shared/reference/hybrid-models.md`` ("The seed family").
"""

from __future__ import annotations

import numpy as np
import torch

NEMOTRON_OMNI = "tiny-nemotron-h-omni"
_PHOTOS = ("astronaut", "coffee", "chelsea")  # scikit-image sample data (shipped, no download)
KINDS = ("text", "image", "audio", "image+audio")  # the document kinds, in turn


def tiny_nemotron_omni_model(vocab_size: int, *, seed: int = 0, spec=None):
    """A random-init ``NemotronH_Omni_Reasoning_V3`` (fp32, eval mode) whose image/audio token ids are those of
    ``spec`` (a :class:`packwise.multimodal.NemotronOmniSpec`, default: the qwen2.5-vocabulary one).

    Example:
        >>> m = tiny_nemotron_omni_model(1024)
        >>> m.config.model_type, m.config.text_config.hybrid_override_pattern, m.config.audio_config.num_mel_bins
        ('nemotron_h_omni', 'M*', 80)
    """
    from transformers.models.nemotron_h_omni import NemotronH_Omni_Reasoning_V3, NemotronH_Omni_Reasoning_V3_Config

    from ..multimodal import NemotronOmniSpec

    spec = spec or NemotronOmniSpec()
    vision = dict(hidden_size=32, num_hidden_layers=2, num_attention_heads=2, patch_size=spec.patch_size,
                  image_size=64, max_img_size=256, video_temporal_patch_size=2)  # fmt: skip
    text = dict(
        vocab_size=vocab_size, hidden_size=64, intermediate_size=128, num_attention_heads=4, num_key_value_heads=2,
        head_dim=16, hybrid_override_pattern="M*", mamba_num_heads=4, mamba_head_dim=32, ssm_state_size=16,
        n_groups=1, max_position_embeddings=4096,
    )  # fmt: skip
    audio = dict(
        hidden_size=32, num_hidden_layers=1, num_attention_heads=2, intermediate_size=64, subsampling_conv_channels=8,
        num_mel_bins=spec.feature_size, subsampling_factor=spec.subsampling_factor, projection_hidden_size=64,
        projection_bias=False, dropout=0.0, layerdrop=0.0, activation_dropout=0.0, attention_dropout=0.0,
    )  # fmt: skip
    config = NemotronH_Omni_Reasoning_V3_Config(
        vision_config=vision, text_config=text, audio_config=audio, projector_hidden_size=64, vision_hidden_size=32,
        force_image_size=64, downsample_ratio=spec.downsample_ratio, image_token_id=spec.image_token_id,
        video_token_id=spec.image_token_id, audio_token_id=spec.audio_token_id,
    )  # fmt: skip
    torch.manual_seed(seed)
    return NemotronH_Omni_Reasoning_V3(config).to(torch.float32).eval()  # type: ignore[arg-type]  # transformers' to() is @wraps(Module.to): mypy's _Wrapped does not bind self


def chirp(i: int, seconds: float, rate: int = 16000) -> np.ndarray:
    """A seeded test clip: a rising sine of ``seconds`` at ``rate`` Hz, float32 (no file, no download)."""
    t = np.arange(int(rate * seconds)) / rate
    return (0.3 * np.sin(2 * np.pi * (300 + 40 * i + 200 * t) * t)).astype(np.float32)


def load_nemotron_omni_documents(tokenizer, *, num_docs: int, max_tokens: int, spec=None) -> list[dict]:
    """Text, image, audio and image + audio documents in turn (:data:`KINDS`) for ``tiny-nemotron-h-omni``:
    scikit-image photos (→ 8×8 patches, 16 image tokens), chirps of 0.5-1.25 s (→ 7-16 audio tokens), built by
    :func:`packwise.multimodal.encode_nemotron_chat`. Text documents are cut to ``max_tokens``; media
    documents are kept whole. Each document carries 1-D ``position_ids`` from 0.

    Raises:
        ValueError: scikit-image missing (the photos).
    """
    from PIL import Image

    try:
        from skimage import data as samples
    except ImportError:
        raise ValueError("the image documents are scikit-image sample photos: pip install 'packwise[images]'") from None
    from ..multimodal import NemotronOmniSpec, encode_nemotron_chat
    from ..pipeline import chitchat_conversations

    spec, convs, docs = spec or NemotronOmniSpec(), chitchat_conversations(), []
    for i in range(num_docs):
        kind = KINDS[i % 4]
        images, audios, parts = [], [], []
        if "image" in kind:
            images.append(Image.fromarray(getattr(samples, _PHOTOS[i % len(_PHOTOS)])()).resize((128, 128)))
            parts.append({"type": "image"})
        if "audio" in kind:
            audios.append(chirp(i, 0.5 + 0.25 * (i % 4), spec.sampling_rate))
            parts.append({"type": "audio"})
        if kind == "text":
            messages = convs[i][:4]
        else:
            parts.append({"type": "text", "text": f"What is in document {i}?"})
            messages = [{"role": "user", "content": parts}, {"role": "assistant", "content": f"Document {i}."}]
        doc = encode_nemotron_chat(messages, tokenizer, images=images, audios=audios, spec=spec, where=f"document {i}")
        if kind == "text":
            doc = {k: doc[k][:max_tokens] for k in ("input_ids", "labels", "mm_token_type_ids", "position_ids")}
        docs.append(doc)
    return docs
