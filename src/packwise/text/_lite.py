"""The built-in ``qwen2.5`` tokenizer without transformers, for the pipeline (``packwise pack``).

Importing transformers and building a ``PreTrainedTokenizerFast`` costs seconds of start-up, while the
pipeline only needs the Rust tokenizer (``encode_batch`` with offsets), the chat template and a few facts
about special tokens. :class:`LiteTokenizer` wraps the cached ``tokenizers.Tokenizer`` and answers exactly
those facts as the transformers tokenizer of ``load_tokenizer("qwen2.5")`` does (same backend definition, so
the same ids and the same :func:`~packwise.text.tokenizer_fingerprint`); anything else it is asked loads that
transformers tokenizer on first use and delegates to it, so no caller can get a different answer.

``tests/text/test_fast_path.py`` proves the two give identical tokens, loss masks and packed files.
"""

from __future__ import annotations

import contextlib
import threading  # the instance cache's lock
from functools import cache

from ._load import (
    QWEN_ROLES,
    QWEN_SPECIAL_TOKENS,
    chatml_template,
    definition_fingerprint,
    load_qwen25,
    load_tokenizer,
    qwen25_file,
    write_cached,
)

#: Id of Qwen2.5's first special token (``<|endoftext|>``): the BPE ranks hold 151,643 tokens.
QWEN_FIRST_SPECIAL_ID = 151643


class LiteTokenizer:
    """``load_tokenizer("qwen2.5")`` as far as packwise's pipeline asks (see the module docstring).

    The special tokens are known up front (Qwen2.5's, ids 151643..151664: no transformers needed to find
    them) and checked against the loaded tokenizer before its first use (a cached file that does not hold them,
    or cannot be loaded, is rebuilt with a warning naming it).

    Example:
        >>> tok = pipeline_tokenizer("qwen2.5")
        >>> tok.backend_tokenizer.encode("Hello, world!").ids, len(tok), tok.eos_token_id
        ([9707, 11, 1879, 0], 151665, 151645)
    """

    is_fast = True

    def __init__(self, spec: str) -> None:
        from tokenizers import AddedToken

        self._spec = spec
        self._file = qwen25_file()
        self._backend = None
        self.name_or_path = spec
        self.chat_template = chatml_template()
        self.special_tokens_map = dict(QWEN_ROLES)
        self.eos_token, self.pad_token = QWEN_ROLES["eos_token"], QWEN_ROLES["pad_token"]
        first = QWEN_FIRST_SPECIAL_ID
        self.added_tokens_decoder = {first + i: AddedToken(t, special=True) for i, t in enumerate(QWEN_SPECIAL_TOKENS)}
        ids = {t.content: i for i, t in self.added_tokens_decoder.items()}
        self.eos_token_id, self.pad_token_id = ids[self.eos_token], ids[self.pad_token]
        self.all_special_tokens = list(QWEN_ROLES.values())

    @property
    def backend_tokenizer(self):
        """The ``tokenizers.Tokenizer`` (loaded on first use: ~0.55 s, most of it Qwen2.5's 294 k BPE merges; the
        GIL is held throughout, so no thread can overlap it)."""
        if self._backend is not None:
            return self._backend
        from tokenizers import Tokenizer

        def load(path):
            backend = Tokenizer.from_file(str(path))
            found = {i: (t.content, t.special) for i, t in backend.get_added_tokens_decoder().items()}
            if found != {i: (t.content, True) for i, t in self.added_tokens_decoder.items()}:
                raise ValueError(f"it does not hold Qwen2.5's special tokens at ids {QWEN_FIRST_SPECIAL_ID}..")
            return backend

        backend = load_qwen25(load)
        self._backend = backend
        return backend

    def fingerprint(self, template: str | None) -> str:
        """:func:`~packwise.text.tokenizer_fingerprint` of this tokenizer with ``template``, remembered in a
        file next to the cached tokenizer.json (keyed by the template, the file's size and mtime and the
        ``tokenizers`` version): serialising the tokenizer to hash it costs as much as loading it.

        The remembered value is only the report's provenance (``tokenizer_fingerprint`` in ``metadata.json``):
        nothing in packwise reuses output or skips work by it, and tokens always come from the tokenizer file
        itself. An entry that is not a fingerprint (16 lowercase hex digits) is computed again and replaced; a
        well-formed but wrong value is trusted as the tokenizer.json beside it is (both are packwise's cache:
        whoever can change one can change the other), since checking it costs the recompute it saves."""
        import hashlib
        import json

        import tokenizers

        template = self.chat_template if template is None else template

        def key() -> str:
            st = self._file.stat()
            text = f"{tokenizers.__version__}\0{st.st_size}\0{st.st_mtime_ns}\0{template}"
            return hashlib.sha256(text.encode()).hexdigest()

        store = self._file.with_name("fingerprints.json")
        try:
            known = json.loads(store.read_text())
        except (OSError, ValueError):
            known = {}
        known = known if isinstance(known, dict) else {}
        found = known.get(key())
        if isinstance(found, str) and len(found) == 16 and all(c in "0123456789abcdef" for c in found):
            return found
        found = definition_fingerprint(self.backend_tokenizer.to_str(), template)  # may rebuild the file
        known[key()] = found
        with contextlib.suppress(OSError):  # a read-only cache: computed again next time
            write_cached(store, lambda tmp: tmp.write_text(json.dumps(known)))
        return found

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


_LOCK = threading.Lock()


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
        with _LOCK:  # one instance even when called from two threads
            return _lite(spec)
    return load_tokenizer(spec)


def tokenizer_fingerprint(tok, chat_template: str | None = None) -> str:
    """SHA-256 (hex, 16 chars) of the tokenizer's full definition (vocab, merges, added tokens) and template.

    Example:
        >>> len(tokenizer_fingerprint(load_tokenizer("qwen2.5")))
        16
    """
    if isinstance(tok, LiteTokenizer):
        return tok.fingerprint(chat_template)
    template = chat_template if chat_template is not None else tok.chat_template
    return definition_fingerprint(tok.backend_tokenizer.to_str(), template)
