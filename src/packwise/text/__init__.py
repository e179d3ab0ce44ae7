"""Tokenization: tokenizers (built-in ``qwen2.5``, ``smollm2``, or a local directory), chat templates, and
loss masks from the template's assistant spans. Needs the ``hf`` extra.

``__all__`` is the user API. The other names imported here (marked ``noqa: F401``) are the layer API: what
the pipeline, multimodal and verify import from this facade instead of its private modules.
"""

from ._chat import LossOn, encode_chats, encode_prompt_completion, template_renderer  # noqa: F401
from ._chat import _encode_chats as encode_checked_chats  # noqa: F401  (chats already checked by check_row)
from ._fields import REASONING_FIELDS, check_message_fields, check_rendered, untrained  # noqa: F401
from ._lite import LiteTokenizer, pipeline_tokenizer, tokenizer_fingerprint  # noqa: F401
from ._literal import check_chats, check_row, special_token_pattern  # noqa: F401
from ._load import (  # noqa: F401
    BUILTIN_TOKENIZERS,
    SMOLLM2_GGUF,
    cache_dir,
    cache_folder_error,
    chatml_template,
    load_chat_template,
    load_tokenizer,
    package_dir,
    tokenizer_name,
    write_cached,
)

__all__ = ["encode_chats", "load_tokenizer"]
