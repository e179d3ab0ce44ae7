"""Shared constants."""

#: Label that carries no loss (PyTorch ``cross_entropy``'s default ``ignore_index``; HF convention).
IGNORE_INDEX = -100

#: Qwen2.5-Omni's audio placeholder ids ``<|AUDIO|>``, ``<|audio_bos|>``, ``<|audio_eos|>`` (the Qwen2.5 BPE's
#: added tokens at those ids): ``multimodal.AudioSpec``'s defaults and the literal-token check of ``text``.
AUDIO_TOKEN_ID, AUDIO_START_TOKEN_ID, AUDIO_END_TOKEN_ID = 151646, 151647, 151648
