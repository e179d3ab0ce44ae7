"""Nemotron-Omni (transformers ``nemotron_h_omni``: RADIO vision, Parakeet audio, NemotronH LM) inputs of one chat.

The model's own input layout (``NemotronH_Omni_Reasoning_V3.forward``, transformers 5.24): images as flattened
``patch_size``² patches ``pixel_values (patches, 3·p²)`` with their grids ``image_grid_hw (I, 2)``, one
``image_token_id`` per ``merge²`` patches (``merge = 1 / downsample_ratio``) between image start/end tokens;
audio as Parakeet log-mel frames ``input_features (A, frames, mel)`` with ``input_features_mask (A, frames)`` and
``audio_token_id`` repeated the encoder's subsampled length between audio start/end tokens. Positions are
plain 1-D (the NemotronH LM has no rotary embedding): a document's positions count from 0.

The image steps follow transformers' ``NemotronH_Omni_Reasoning_V3ImageProcessor`` (grid rule
``get_patch_grid_size``, bicubic resize, CLIP mean/std, channel-major patches) re-implemented with PIL/numpy
because that processor needs torchvision; the audio features are transformers' own ``ParakeetFeatureExtractor``.
Clips are padded to ``chunk_length`` seconds so that clips of different documents stack in one pack.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import cast

import numpy as np

from ..constants import AUDIO_END_TOKEN_ID, AUDIO_START_TOKEN_ID, AUDIO_TOKEN_ID, IGNORE_INDEX

_CLIP_MEAN = (0.48145466, 0.4578275, 0.40821073)  # OPENAI_CLIP_MEAN / STD (transformers.image_utils)
_CLIP_STD = (0.26862954, 0.26130258, 0.27577711)


@dataclass(frozen=True)
class NemotronOmniSpec:
    """Sizes and token ids of Nemotron-Omni inputs (defaults: the tiny random model of ``packwise verify``,
    over the qwen2.5 vocabulary; a real checkpoint brings its own ids and patch budget).

    Attributes:
        patch_size: pixels per patch side (16); downsample_ratio: pixel-shuffle ratio (0.5 → merge 2).
        min_num_patches, max_num_patches: patch budget per image (the processor's, here 16 and 64).
        image_token_id, image_start_token_id, image_end_token_id: placeholder and wrappers (``<image>``, ``<img>``,
            ``</img>`` in the real tokenizer; ``<|image_pad|>``, ``<|vision_start|>``, ``<|vision_end|>`` here).
        audio_token_id, audio_start_token_id, audio_end_token_id: ``<so_embedding>``, ``<so_start>``, ``<so_end>``.
        sampling_rate (Hz), hop_length (samples per mel frame), feature_size (mel bins), subsampling_factor
            (the encoder's frame reduction), chunk_length (seconds every clip is padded to).

    Example:
        >>> NemotronOmniSpec().audio_tokens(8000), NemotronOmniSpec().max_frames
        (7, 201)
    """

    patch_size: int = 16
    downsample_ratio: float = 0.5
    min_num_patches: int = 16
    max_num_patches: int = 64
    image_token_id: int = 151655
    image_start_token_id: int = 151652
    image_end_token_id: int = 151653
    audio_token_id: int = AUDIO_TOKEN_ID
    audio_start_token_id: int = AUDIO_START_TOKEN_ID
    audio_end_token_id: int = AUDIO_END_TOKEN_ID
    sampling_rate: int = 16000
    hop_length: int = 160
    feature_size: int = 80
    subsampling_factor: int = 8
    chunk_length: float = 2.0

    @property
    def merge(self) -> int:
        return round(1 / self.downsample_ratio)

    @property
    def max_frames(self) -> int:
        """Mel frames of a ``chunk_length`` clip (``1 + samples // hop``, the centred STFT)."""
        return 1 + int(self.chunk_length * self.sampling_rate) // self.hop_length

    def audio_tokens(self, samples: int) -> int:
        """Audio placeholder tokens of a clip of ``samples`` samples: the processor's
        ``_estimate_audio_num_embeddings`` (``log2(subsampling_factor)`` stride-2, kernel-3 stages)."""
        length = 1 + int(samples) // self.hop_length
        for _ in range(int(math.log2(self.subsampling_factor))):
            length = (length - 1) // 2 + 1
        return max(1, length)

    def grid(self, height: int, width: int) -> tuple[int, int]:
        """``(grid_h, grid_w)`` patches an image is resized to (transformers' ``get_patch_grid_size``)."""
        p, m, lo, hi = self.patch_size, self.merge, self.min_num_patches, self.max_num_patches
        gh, gw = round(height / p + 0.5), round(width / p + 0.5)
        f = min(math.sqrt(hi / (gh * gw)), 1.0)
        gh, gw = math.floor(f * gh), math.floor(f * gw)
        if hi > lo and gh * gw < lo:
            f = math.sqrt(lo / (gh * gw))
            gh, gw = math.ceil(f * gh), math.ceil(f * gw)
        if r := gh % m:
            gh = gh + m - r if (gh + m - r) * gw <= hi else max(m, gh - r)
        if r := gw % m:
            gw = gw + m - r if gh * (gw + m - r) <= hi else max(m, gw - r)
        return gh, gw


def nemotron_images(images: list, spec: NemotronOmniSpec = NemotronOmniSpec()):
    """``pixel_values (patches, 3·p²)`` float32 and ``image_grid_hw (I, 2)`` int64 of PIL images.

    Example:
        >>> from PIL import Image
        >>> pv, grid = nemotron_images([Image.new("RGB", (64, 64))])
        >>> tuple(pv.shape), grid.tolist()
        ((16, 768), [[4, 4]])
    """
    import torch
    from PIL import Image

    pixels, grids = [], []
    for img in images:
        gh, gw = spec.grid(img.height, img.width)
        p = spec.patch_size
        arr: np.ndarray = (
            np.asarray(img.convert("RGB").resize((gw * p, gh * p), Image.Resampling.BICUBIC), np.float32) / 255.0
        )
        arr = (arr - np.asarray(_CLIP_MEAN, np.float32)) / np.asarray(_CLIP_STD, np.float32)
        chw = arr.transpose(2, 0, 1).reshape(3, gh, p, gw, p).transpose(1, 3, 0, 2, 4)  # row-major, channel-major
        pixels.append(chw.reshape(gh * gw, 3 * p * p))
        grids.append((gh, gw))
    pv = torch.from_numpy(np.concatenate(pixels) if pixels else np.zeros((0, 3 * spec.patch_size**2), np.float32))
    return pv, torch.tensor(grids, dtype=torch.int64).reshape(-1, 2)


def nemotron_audio(waves: list, spec: NemotronOmniSpec = NemotronOmniSpec()):
    """``input_features (A, max_frames, mel)`` float32 and ``input_features_mask (A, max_frames)`` int64 from
    transformers' ``ParakeetFeatureExtractor``, every clip padded to ``spec.max_frames``.

    Raises:
        ValueError: a clip longer than ``spec.chunk_length`` seconds (or empty).

    Example:
        >>> f, m = nemotron_audio([np.zeros(8000, dtype=np.float32)])
        >>> tuple(f.shape), int(m.sum())
        ((1, 201, 80), 50)
    """
    import torch
    from transformers import ParakeetFeatureExtractor

    limit = int(spec.chunk_length * spec.sampling_rate)
    for i, w in enumerate(waves):
        if not 0 < len(w) <= limit:
            raise ValueError(
                f"audio clip {i}: {len(w)} samples; a clip needs 1 to {limit} ({spec.chunk_length} s at "
                f"{spec.sampling_rate} Hz): cut it, or raise NemotronOmniSpec.chunk_length"
            )
    fe = ParakeetFeatureExtractor(feature_size=spec.feature_size, sampling_rate=spec.sampling_rate,
                                  hop_length=spec.hop_length)  # fmt: skip
    feats, masks = [], []
    for w in waves:  # one clip at a time: the extractor normalises over the clip's own frames
        out = fe([np.asarray(w, np.float32)], sampling_rate=spec.sampling_rate, return_tensors="pt")
        f, m = out["input_features"][0], out["attention_mask"][0].to(torch.int64)
        pad = spec.max_frames - f.shape[0]
        feats.append(torch.nn.functional.pad(f, (0, 0, 0, pad)))
        masks.append(torch.nn.functional.pad(m, (0, pad)))
    if not waves:
        return torch.zeros(0, spec.max_frames, spec.feature_size), torch.zeros(0, spec.max_frames, dtype=torch.int64)
    return torch.stack(feats).float(), torch.stack(masks)


def encode_nemotron_chat(
    messages: list[dict], tokenizer, *, images=(), audios=(), spec: NemotronOmniSpec | None = None,
    where: str = "sample",
) -> dict:  # fmt: skip
    """Tokenize one chat for Nemotron-Omni; ``{"type": "image"}`` / ``{"type": "audio"}`` parts take the next
    PIL image / float32 waveform (``spec.sampling_rate``) in order.

    Returns:
        ``input_ids (L,)``, ``labels (L,)`` (-100 outside assistant turns), ``mm_token_type_ids (L,)`` (0 text,
        1 image, 3 audio), ``position_ids (L,)`` int64 from 0, and when present ``pixel_values``,
        ``image_grid_hw``, ``input_features``, ``input_features_mask`` (see the module docstring).

    Raises:
        ValueError: media parts and media lists that do not match, an unknown part, literal placeholder tokens
            in the text (the counts would not match the media), a clip too long.

    Example:
        >>> from PIL import Image
        >>> from packwise.text import load_tokenizer
        >>> chat = [{"role": "user", "content": [{"type": "image"}, {"type": "text", "text": "What?"}]},
        ...         {"role": "assistant", "content": "Grey."}]
        >>> f = encode_nemotron_chat(chat, load_tokenizer("qwen2.5"), images=[Image.new("RGB", (64, 64))])
        >>> int((f["mm_token_type_ids"] == 1).sum()), f["image_grid_hw"].tolist(), tuple(f["pixel_values"].shape)
        (4, [[4, 4]], (16, 768))
    """
    import torch

    from ..text import check_chats, encode_checked_chats, special_token_pattern

    spec = spec or NemotronOmniSpec()
    images, audios = list(images), list(audios)
    pv, grid = nemotron_images(images, spec)
    feats, mask = nemotron_audio(audios, spec)
    img_s, img_p, img_e, aud_s, aud_p, aud_e = tokenizer.convert_ids_to_tokens([
        spec.image_start_token_id, spec.image_token_id, spec.image_end_token_id, spec.audio_start_token_id,
        spec.audio_token_id, spec.audio_end_token_id,
    ])  # fmt: skip
    n_img = n_aud = 0
    out_msgs = []
    for j, m in enumerate(messages):
        content = m["content"]
        if isinstance(content, list):
            parts = []
            for part in content:
                kind = part.get("type") if isinstance(part, dict) else None
                if kind == "text":
                    parts.append(part["text"])
                elif kind == "image" and n_img < len(images):
                    gh, gw = grid[n_img].tolist()
                    parts.append(img_s + img_p * (gh * gw // spec.merge**2) + img_e)
                    n_img += 1
                elif kind == "audio" and n_aud < len(audios):
                    parts.append(aud_s + aud_p * spec.audio_tokens(len(audios[n_aud])) + aud_e)
                    n_aud += 1
                else:
                    raise ValueError(
                        f"{where}: messages[{j}] part {part!r}: expected a text part, or an image/audio part with an "
                        f"entry left in images ({len(images)}) / audios ({len(audios)})"
                    )
            content = "".join(parts)
        out_msgs.append({**m, "content": content})
    if (n_img, n_aud) != (len(images), len(audios)):
        raise ValueError(
            f"{where}: {n_img} image and {n_aud} audio parts for {len(images)} images, {len(audios)} clips"
        )
    check_chats([messages], special_token_pattern(tokenizer), lambda i: where)
    [encoded] = encode_checked_chats([out_msgs], tokenizer)
    ids_np, loss = cast("tuple[np.ndarray, np.ndarray]", encoded)  # media tokens are ours; never None
    ids = torch.from_numpy(ids_np.astype(np.int64))
    types = torch.zeros_like(ids)
    types[ids == spec.image_token_id] = 1
    types[ids == spec.audio_token_id] = 3
    need = (int(grid.prod(-1).sum()) // spec.merge**2, sum(spec.audio_tokens(len(w)) for w in audios))
    have = (int((types == 1).sum()), int((types == 3).sum()))
    if have != need:
        raise ValueError(
            f"{where}: {have[0]} image / {have[1]} audio placeholder tokens but the media need {need[0]} / {need[1]}; "
            "remove literal placeholder tokens from the text"
        )
    out = {"input_ids": ids, "labels": torch.where(torch.from_numpy(loss), ids, IGNORE_INDEX),
           "mm_token_type_ids": types, "position_ids": torch.arange(ids.numel())}  # fmt: skip
    if images:
        out["pixel_values"], out["image_grid_hw"] = pv, grid
    if audios:
        out["input_features"], out["input_features_mask"] = feats, mask
    return out
