"""Tokenization: tokenizers (built-in ``qwen2.5``, ``smollm2``, or a local directory), chat templates, and
loss masks from the template's assistant spans. Needs the ``hf`` extra."""

from ._chat import LossOn, encode_chats, encode_prompt_completion
from ._load import (
    BUILTIN_TOKENIZERS,
    chatml_template,
    load_tokenizer,
    package_dir,
    tokenizer_fingerprint,
    tokenizer_name,
)

__all__ = [
    "BUILTIN_TOKENIZERS",
    "LossOn",
    "chatml_template",
    "encode_chats",
    "encode_prompt_completion",
    "load_tokenizer",
    "package_dir",
    "tokenizer_fingerprint",
    "tokenizer_name",
]
