"""The built-in ``qwen2.5`` tokenizer without transformers, for the pipeline (``packwise pack``).

Importing transformers and building a ``PreTrainedTokenizerFast`` costs seconds of start-up, while the
pipeline only needs the Rust tokenizer (``encode_batch`` with offsets), the chat template and a few facts
about special tokens. :class:`LiteTokenizer` wraps the cached ``tokenizers.Tokenizer`` and answers exactly
those facts as the transformers tokenizer of ``load_tokenizer("qwen2.5")`` does (same backend definition, so
the same ids and the same :func:`~packwise.text.tokenizer_fingerprint`); anything else it is asked loads that
transformers tokenizer on first use and delegates to it, so no caller can get a different answer.

``tests/test_text_lite.py`` proves the two give identical tokens, loss masks and packed files.
"""

from __future__ import annotations

from functools import cache

from ._load import QWEN_ROLES, chatml_template, load_tokenizer, qwen25_file


class LiteTokenizer:
    """``load_tokenizer("qwen2.5")`` as far as packwise's pipeline asks (see the module docstring).

    Example:
        >>> tok = pipeline_tokenizer("qwen2.5")
        >>> tok.backend_tokenizer.encode("Hello, world!").ids, len(tok), tok.eos_token_id
        ([9707, 11, 1879, 0], 151665, 151645)
    """

    is_fast = True

    def __init__(self, spec: str) -> None:
        from tokenizers import Tokenizer

        self._spec = spec
        self.backend_tokenizer = Tokenizer.from_file(str(qwen25_file()))
        self.name_or_path = spec
        self.chat_template = chatml_template()
        self.special_tokens_map = dict(QWEN_ROLES)
        self.eos_token, self.pad_token = QWEN_ROLES["eos_token"], QWEN_ROLES["pad_token"]
        self.eos_token_id = self.backend_tokenizer.token_to_id(self.eos_token)
        self.pad_token_id = self.backend_tokenizer.token_to_id(self.pad_token)
        self.all_special_tokens = list(QWEN_ROLES.values())
        self.added_tokens_decoder = self.backend_tokenizer.get_added_tokens_decoder()

    def __len__(self) -> int:
        return self.backend_tokenizer.get_vocab_size(with_added_tokens=True)

    def get_added_vocab(self) -> dict[str, int]:
        return {t.content: i for i, t in sorted(self.added_tokens_decoder.items())}

    def convert_tokens_to_ids(self, tokens):
        if isinstance(tokens, str):
            return self.backend_tokenizer.token_to_id(tokens)
        return [self.backend_tokenizer.token_to_id(t) for t in tokens]

    def convert_ids_to_tokens(self, ids, skip_special_tokens: bool = False):
        if skip_special_tokens:
            return self.full().convert_ids_to_tokens(ids, skip_special_tokens=True)
        if isinstance(ids, int):
            return self.backend_tokenizer.id_to_token(ids)
        return [self.backend_tokenizer.id_to_token(int(i)) for i in ids]

    def full(self):
        """The transformers tokenizer this one stands for (loaded on first use)."""
        return load_tokenizer(self._spec)

    def __call__(self, *args, **kwargs):
        return self.full()(*args, **kwargs)

    def __getattr__(self, name: str):
        if name.startswith("_"):
            raise AttributeError(name)
        return getattr(self.full(), name)

    def __repr__(self) -> str:
        return f"LiteTokenizer({self._spec!r}, vocab {len(self)})"


@cache
def _lite(spec: str) -> LiteTokenizer:
    return LiteTokenizer(spec)


def pipeline_tokenizer(spec):
    """The tokenizer the pipeline uses for ``spec``: a :class:`LiteTokenizer` for the built-in ``"qwen2.5"``
    (no transformers import), else :func:`~packwise.text.load_tokenizer` of it.

    Raises:
        ValueError: as :func:`~packwise.text.load_tokenizer`.
    """
    if isinstance(spec, str) and spec == "qwen2.5":
        return _lite(spec)
    return load_tokenizer(spec)
