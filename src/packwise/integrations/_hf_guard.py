"""What ``use_packed_attention`` refuses: models, layers and settings packwise cannot isolate.

Checked, never assumed. A module is accepted when its class comes from a transformers model family in
:data:`VERIFIED_FAMILIES` (each one ISOLATED in ``docs/conformance.md``), from ``torch.nn``, has a
position-wise name (``...MLP``, ``...Norm``, ``...Embedding``, ``Linear``, ...) or a container's
(``...Model``, ``...ForCausalLM``: PEFT wrappers; their children are checked one by one), or is named in ``allow``.
Layers that carry state along the sequence — Mamba/Mamba2 mixers, gated DeltaNet, short convolutions —
are refused by name whatever ``allow`` says: on transformers' CPU/torch path their recurrence runs over the
whole packed row (no ``seq_idx``/``cu_seqlens`` reset), so one document's state flows into the next.
"""

from __future__ import annotations

import re
from collections.abc import Sequence

from ..attention import FEATURES, Backend

#: transformers model folders (``transformers.models.<name>``) whose every layer packwise has proved isolated.
VERIFIED_FAMILIES = frozenset(
    {
        "llama", "qwen2", "qwen3", "qwen3_moe", "mistral", "gemma2", "gemma3", "phi3", "gpt_oss", "olmo2",
        "roberta", "bert", "qwen2_5_vl",
        "qwen2_5_omni",  # the thinker: ISOLATED with text, image and audio documents (tests/multimodal/test_audio.py)
    }
)  # fmt: skip
#: Encoder families (bidirectional attention, per document) and their first position id.
ENCODERS = {"roberta": "pad_token_id + 1", "bert": "0"}
_STATEFUL = re.compile(r"Mamba|DeltaNet|ShortConv|Mixer|SSM|Recurrent|RWKV|Retention|LinearAttention|Conv1d")
_POSITIONWISE = re.compile(
    r"(MLP|Norm|RMSNorm|LayerNorm|Embedding|Embeddings|Embed|Linear|Dropout|Activation|Act|Experts|Router|Gate|"
    r"Identity|ModuleList|ModuleDict|ParameterList|ParameterDict|Sequential|Model|ForCausalLM)$"
)


class PackingRefused(ValueError):
    """``use_packed_attention`` cannot make this model isolate packed documents; ``reason`` says why and how."""

    def __init__(self, reason: str) -> None:
        super().__init__(reason)
        self.reason = reason


def _family(cls: type) -> str | None:
    parts = cls.__module__.split(".")
    return parts[2] if len(parts) > 2 and parts[:2] == ["transformers", "models"] else None


def check_model(model, backend: Backend, allow: Sequence[str] = ()) -> None:
    """Raise :class:`PackingRefused` unless every layer of ``model`` is one packwise can isolate on ``backend``.

    Raises:
        PackingRefused: a stateful sequence mixer (named with its model type), a module class packwise
            does not know (with how to opt in), or a config feature ``backend`` cannot honour (field and value).
    """
    config = getattr(model, "config", None)
    model_type = getattr(config, "model_type", "?")
    unknown: dict[str, str] = {}
    for module in model.modules():
        cls = type(module)
        name, family = cls.__name__, _family(cls)
        if family and _STATEFUL.search(name):
            raise PackingRefused(
                f"{name} in model type {model_type!r} carries state along the sequence (a recurrent/convolutional "
                "mixer); transformers' torch path runs it over the whole packed row without resetting at document "
                "boundaries, so packed documents would leak into each other. packwise refuses this model: train it "
                "unpacked, or with a kernel that takes seq_idx/cu_seqlens and prove it with packwise verify"
            )
        if family in VERIFIED_FAMILIES or cls.__module__.startswith(("torch.", "transformers.activations")):
            continue
        if name in allow or _POSITIONWISE.search(name):
            continue
        unknown.setdefault(name, cls.__module__)
    if unknown:
        names = ", ".join(f"{n} ({m})" for n, m in unknown.items())
        raise PackingRefused(
            f"model type {model_type!r} has module classes packwise has not verified: {names}. Run "
            f"`packwise verify --model PATH --allow {','.join(sorted(unknown))}` on the checkpoint; if it prints "
            f"ISOLATED, opt in with use_packed_attention(model, allow={sorted(unknown)!r})"
        )
    _check_features(model, config, backend)


def _configs(config):
    yield config
    for attr in ("text_config", "vision_config"):
        sub = getattr(config, attr, None)
        if sub is not None and sub is not config:
            yield sub


def _check_features(model, config, backend: Backend) -> None:
    if config is None:
        return
    for cfg in _configs(config):
        cap = getattr(cfg, "attn_logit_softcapping", None)
        if cap and backend != "auto" and backend not in FEATURES["softcap"]:
            raise PackingRefused(
                f"{type(cfg).__name__}.attn_logit_softcapping={cap}: backend {backend!r} cannot apply logit "
                f"softcapping; use backend 'auto' or one of {', '.join(FEATURES['softcap'])}"
            )
    has_sinks = any(getattr(m, "sinks", None) is not None for m in model.modules() if _family(type(m)))
    if has_sinks and backend != "auto" and backend not in FEATURES["sinks"]:
        raise PackingRefused(
            f"model type {config.model_type!r} has attention sinks (GptOssAttention.sinks): backend {backend!r} "
            f"cannot add them to the softmax; use backend 'auto' or one of {', '.join(FEATURES['sinks'])}"
        )


def position_offset(model) -> int:
    """The first position id of every document the model expects (RoBERTa: ``pad_token_id + 1``; else 0).

    Example:
        >>> from transformers import RobertaConfig, LlamaConfig
        >>> class M:
        ...     config = RobertaConfig(pad_token_id=1)
        >>> position_offset(M())
        2
    """
    config = model.config
    if config.model_type in ("roberta", "xlm-roberta", "camembert", "xlm-roberta-xl"):
        return int(config.pad_token_id) + 1
    return 0
