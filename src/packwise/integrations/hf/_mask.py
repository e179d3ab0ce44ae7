"""Attention features a module applies only through HF's mask: honoured, or refused even under ``allow=``.

packwise attention replaces the mask transformers builds with the collator's document boundaries, so a
feature that lives only in that mask is lost. The sliding window is the one such feature in transformers
5.24: Mistral, Qwen2, Gemma, gpt-oss pass ``sliding_window=`` to the attention function (honoured by
:func:`~packwise.hf.packwise_attention_forward`), but ``Qwen2MoeAttention`` (``modeling_qwen2_moe``),
``PhimoeAttention``, ``DogeAttention`` and BLT's attention pass none: their window is in the mask
``create_sliding_window_causal_mask`` builds (per layer from ``config.layer_types`` for qwen2_moe; for
every layer once ``config.sliding_window`` is set for phimoe, doge and blt). Without this check packed
documents on window layers get full attention (packed vs alone: 0.24-0.32 on a tiny qwen2_moe).

Honoured: a module whose layer is ``"sliding_attention"`` in ``config.layer_types`` and that holds the
window itself (``module.sliding_window == config.sliding_window``, qwen2_moe) — it is marked
``_packwise_window`` and packwise attention applies that window per document. Refused: any other module of a
windowed config whose forward passes no ``sliding_window`` (read from its source with :mod:`inspect`).
"""

from __future__ import annotations

import inspect
from functools import cache
from typing import Any

from ._guard import PackingRefused


def _window(config) -> int | None:
    """The sliding window a config turns on (``None``: none). Qwen2-style configs gate it by
    ``use_sliding_window``; BLT's local encoder/decoder hold it in their sub-config's ``sliding_window``."""
    if config is None or getattr(config, "use_sliding_window", True) is False:
        return None
    window = getattr(config, "sliding_window", None)
    return int(window) if isinstance(window, int) and not isinstance(window, bool) and window > 0 else None


@cache
def _dispatch(cls: type[Any]) -> tuple[bool, bool]:
    """(the forward calls an attention function, it passes ``sliding_window=`` to it), from the source."""
    try:
        source = inspect.getsource(cls.forward)
    except (OSError, TypeError):
        return False, False
    calls = "attention_interface(" in source or "ALL_ATTENTION_FUNCTIONS" in source
    return calls, "sliding_window=" in source


def check_mask_only_features(model) -> None:
    """Mark or refuse every attention module whose sliding window lives only in HF's mask (module docstring).

    Raises:
        PackingRefused: a module that applies a window only through the mask and does not hold it per layer:
            named with its class, the config field and value, whatever ``allow`` says.
    """
    model_config = getattr(model, "config", None)
    for name, module in model.named_modules():
        # type objects are hashable; mypy does not match them to typeshed's Hashable (functools.cache's key)
        calls, passes = _dispatch(type(module))  # type: ignore[arg-type]
        if not calls or passes:
            continue
        config = getattr(module, "config", None) or model_config
        window = _window(config)
        if window is None:
            continue
        types = getattr(config, "layer_types", None)
        idx = getattr(module, "layer_idx", None)
        if types is not None and isinstance(idx, int) and idx < len(types):
            if types[idx] != "sliding_attention":
                continue  # a full-attention layer: HF's mask for it has no window either
            if getattr(module, "sliding_window", None) == window:
                module._packwise_window = window
                continue
        cls = type(module).__name__
        raise PackingRefused(
            f"{cls} ({name}) applies {type(config).__name__}.sliding_window={window} only through the attention "
            "mask (its forward passes no sliding_window to the attention function), and packwise attention "
            "replaces that mask with the document boundaries: its layers would attend over whole documents. "
            "packwise refuses this model whatever allow= says: train it unpacked (padded batches), or with "
            "sliding_window=None only if the checkpoint was trained without a window"
        )
