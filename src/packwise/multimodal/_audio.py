"""Audio for Qwen2-Audio / Qwen2.5-Omni (thinker) packing: decode, features, placeholder tokens, MRoPE.

A clip (wav/flac, decoded by ``soundfile``; mono-mixed; resampled to 16 kHz with ``scipy.signal.resample_poly``)
becomes Whisper log-mel features from transformers' ``WhisperFeatureExtractor`` (128 mel bins, 30 s
windows: ``input_features (A, 128, 3000)`` float32 and ``feature_attention_mask (A, 3000)`` int64, both per
*clip*, not per token) and ``n`` ``<|AUDIO|>`` tokens between ``<|audio_bos|>`` and ``<|audio_eos|>``, with
``n`` from the model's own rule for ``f`` real mel frames (``Qwen2AudioEncoder._get_feat_extract_output_lengths``:
``((f - 1) // 2 + 1 - 2) // 2 + 1``; 1 s → 100 frames → 25 tokens). Clips longer than one window are
refused (the models read one 30 s window per clip). Needs the ``hf`` and ``audio`` extras.
"""

from __future__ import annotations

import io
from dataclasses import asdict, dataclass
from pathlib import Path

import numpy as np

from ..constants import AUDIO_END_TOKEN_ID, AUDIO_START_TOKEN_ID, AUDIO_TOKEN_ID

VISION_START_TOKEN_ID = 151652  # <|vision_start|> in Qwen2.5 / Qwen2.5-Omni


@dataclass(frozen=True)
class AudioSpec:
    """How audio clips are featurized and tokenized (Qwen2.5-Omni thinker / Qwen2-Audio defaults).

    Attributes:
        sampling_rate: Hz the features are computed at (16,000).
        feature_size: mel bins (128).
        chunk_length: seconds per feature window (30 → 3,000 frames).
        audio_token_id, audio_start_token_id, audio_end_token_id: ``<|AUDIO|>``, ``<|audio_bos|>``,
            ``<|audio_eos|>`` in the Qwen2.5-Omni vocabulary (151646, 151647, 151648).

    Example:
        >>> from packwise.multimodal import AudioSpec
        >>> spec = AudioSpec()
        >>> spec.max_frames, spec.tokens(3000)  # mel frames of a 30 s window; its audio tokens
        (3000, 750)
    """

    sampling_rate: int = 16000
    feature_size: int = 128
    chunk_length: int = 30
    audio_token_id: int = AUDIO_TOKEN_ID
    audio_start_token_id: int = AUDIO_START_TOKEN_ID
    audio_end_token_id: int = AUDIO_END_TOKEN_ID

    def to_dict(self) -> dict:
        return asdict(self)

    @property
    def max_frames(self) -> int:
        """Mel frames per window (hop 160 samples): 3,000 for 30 s."""
        return self.chunk_length * self.sampling_rate // 160

    def tokens(self, frames: int) -> int:
        """``<|AUDIO|>`` tokens of a clip with ``frames`` real mel frames (transformers' own rule).

        Example:
            >>> AudioSpec().tokens(100), AudioSpec().tokens(3000)
            (25, 750)
        """
        import torch
        from transformers.models.qwen2_audio.modeling_qwen2_audio import Qwen2AudioEncoder

        # unbound, self unused (None); transformers annotates the lengths as LongTensor (a Tensor here)
        _, out = Qwen2AudioEncoder._get_feat_extract_output_lengths(None, torch.tensor(int(frames)))  # type: ignore[arg-type]
        return int(out)

    def extractor(self):
        """transformers' ``WhisperFeatureExtractor`` with these settings (built offline, no download)."""
        from transformers import WhisperFeatureExtractor

        return WhisperFeatureExtractor(
            feature_size=self.feature_size, sampling_rate=self.sampling_rate, chunk_length=self.chunk_length
        )

    def placeholder(self, tokenizer, frames: int) -> str:
        """The text of one clip: the tokenizer's strings for the bos, audio and eos ids (so the ids are the
        model's whatever the tokenizer names them), audio repeated :meth:`tokens` times."""
        bos, pad, eos = tokenizer.convert_ids_to_tokens(
            [self.audio_start_token_id, self.audio_token_id, self.audio_end_token_id]
        )
        return bos + pad * self.tokens(frames) + eos


def load_audio(source, spec: AudioSpec = AudioSpec(), where: str = "sample") -> np.ndarray:
    """``(samples,)`` float32 mono waveform at ``spec.sampling_rate`` from a wav/flac path or bytes.

    Raises:
        ValueError: a missing or undecodable file, or a clip longer than ``spec.chunk_length`` seconds,
            naming ``where`` and the source.

    Example:
        >>> import wave
        >>> buf = io.BytesIO()
        >>> with wave.open(buf, "wb") as w:
        ...     w.setnchannels(1); w.setsampwidth(2); w.setframerate(8000); w.writeframes(bytes(1600))
        >>> load_audio(buf.getvalue()).shape
        (1600,)
    """
    import soundfile

    name = "<bytes>" if isinstance(source, (bytes, bytearray)) else str(source)
    if not isinstance(source, (bytes, bytearray)) and not Path(source).is_file():
        raise ValueError(
            f"{where}: audio {name} does not exist; fix the path (relative paths are relative to the input)"
        )
    try:
        data, rate = soundfile.read(io.BytesIO(source) if isinstance(source, (bytes, bytearray)) else source,
                                    dtype="float32", always_2d=True)  # fmt: skip
    except (soundfile.LibsndfileError, RuntimeError, TypeError) as e:
        raise ValueError(f"{where}: audio {name} cannot be decoded ({e}); use wav or flac") from e
    wave = data.mean(axis=1)
    if rate != spec.sampling_rate:
        from math import gcd

        from scipy.signal import resample_poly

        g = gcd(int(rate), spec.sampling_rate)
        wave = resample_poly(wave, spec.sampling_rate // g, int(rate) // g).astype(np.float32)
    if wave.shape[0] > spec.chunk_length * spec.sampling_rate:
        raise ValueError(
            f"{where}: audio {name} lasts {wave.shape[0] / spec.sampling_rate:.1f} s > {spec.chunk_length} s, the "
            "model's window; cut it into clips"
        )
    if wave.shape[0] == 0:
        raise ValueError(f"{where}: audio {name} is empty")
    return np.ascontiguousarray(wave, dtype=np.float32)


def audio_features(waves: list, spec: AudioSpec = AudioSpec()):
    """``input_features (A, mel, frames)`` float32 and ``feature_attention_mask (A, frames)`` int64 (1 on real
    frames) from transformers' ``WhisperFeatureExtractor``; ``A = len(waves)`` (0 clips → empty tensors).

    Example:
        >>> f, m = audio_features([np.zeros(16000, dtype=np.float32)])
        >>> tuple(f.shape), int(m.sum())
        ((1, 128, 3000), 100)
    """
    import torch

    if not waves:
        return torch.zeros(0, spec.feature_size, spec.max_frames), torch.zeros(0, spec.max_frames, dtype=torch.int64)
    out = spec.extractor()(
        [np.asarray(w, dtype=np.float32) for w in waves], sampling_rate=spec.sampling_rate, return_attention_mask=True,
        padding="max_length", return_tensors="np",
    )  # fmt: skip
    return torch.from_numpy(np.asarray(out["input_features"], dtype=np.float32)), torch.from_numpy(
        np.asarray(out["attention_mask"], dtype=np.int64)
    )


def omni_position_ids(input_ids, *, image_grid_thw=None, video_grid_thw=None, feature_attention_mask=None,
                      second_per_grid_ts=None, spatial_merge_size: int = 2):  # fmt: skip
    """``(3, L)`` int64 MRoPE positions of one Qwen2.5-Omni thinker sample (text, image, video and audio), from
    transformers' ``Qwen2_5OmniThinkerForConditionalGeneration.get_rope_index`` on a config-only stand-in.

    Example:
        >>> import torch
        >>> ids = torch.tensor([1, 151647] + [151646] * 3 + [151648, 2])
        >>> omni_position_ids(ids, feature_attention_mask=torch.ones(1, 20)).tolist()[0]
        [0, 1, 2, 3, 4, 5, 6]
    """
    import types

    import torch
    from transformers.models.qwen2_5_omni import Qwen2_5OmniThinkerConfig
    from transformers.models.qwen2_5_omni.modeling_qwen2_5_omni import (
        Qwen2_5OmniPreTrainedModelForConditionalGeneration as Base,
    )

    config = Qwen2_5OmniThinkerConfig(vision_config={"spatial_merge_size": spatial_merge_size})
    if getattr(config, "vision_start_token_id", None) is None:  # released checkpoints set it; the default lacks it
        config.vision_start_token_id = VISION_START_TOKEN_ID
    holder = types.SimpleNamespace(config=config, spatial_merge_size=spatial_merge_size)
    holder.get_llm_pos_ids_for_vision = types.MethodType(Base.get_llm_pos_ids_for_vision, holder)
    ids = torch.as_tensor(input_ids).reshape(1, -1)
    seqlens = None if feature_attention_mask is None else torch.as_tensor(feature_attention_mask).sum(-1)
    grid = None if image_grid_thw is None or not len(image_grid_thw) else torch.as_tensor(image_grid_thw)
    vgrid = None if video_grid_thw is None or not len(video_grid_thw) else torch.as_tensor(video_grid_thw)
    # unbound on a stand-in self; transformers annotates LongTensor (plain Tensors here)
    pos, _ = Base.get_rope_index(
        holder, ids, grid, vgrid, attention_mask=torch.ones_like(ids), audio_seqlens=seqlens,  # type: ignore[arg-type]
        second_per_grids=None if second_per_grid_ts is None else torch.as_tensor(second_per_grid_ts),
    )  # fmt: skip
    return pos[:, 0].to(torch.int64)
