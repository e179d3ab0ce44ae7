"""Document-aware stateful mixers: every Mamba / gated-DeltaNet / short-convolution layer resets at each boundary.

transformers' torch path runs a stateful mixer over the whole packed row: its causal conv1d pads only the row
start, its scan starts from a zero state only there, and the kernel wrapper
(``transformers/integrations/hub_kernels.py``) raises when a call carries ``seq_idx``/``cu_seqlens`` and no kernel
package is installed (otherwise it drops them). Jamba's and Zamba's decoder layers do not even pass their kwargs
to the mixer. packwise therefore brings the boundaries by ONE mechanism, independent of the plumbing:

- :func:`row_scope` — a context variable holding the row's ``cu_seq_lens_q``, entered by the patched forward of
  every ``PreTrainedModel`` of a patched model (the outer model and every inner base model, e.g. ``model.model``).
- :func:`patch_mixers` — each mixer instance whose class is in :data:`MIXERS` gets an instance ``forward`` that,
  when a scope is active, runs the original forward once per document slice (``cache`` off, boundary kwargs
  removed) and concatenates the outputs. Each slice zero-pads its convolution and starts its scan from a zero
  state, exactly as the document alone does (measured: logits ≤ 2.1e-7, ``docs/conformance.md``). Without a scope
  (unpacked batches, ``generate`` with a cache) the original forward runs unchanged.

Gradient checkpointing replays a layer during backward, outside the scope: the wrapper records the row's
boundaries on the forward pass of a checkpointed layer and the replay (inside backward) reads them back.

GPU kernels: mamba-ssm's ``mamba_chunk_scan_combined(seq_idx=...)``, causal-conv1d's ``causal_conv1d_fn(seq_idx=...)``
and flash-linear-attention's ``cu_seqlens=`` kernels reset state natively, but transformers 5.24 only reaches them
through the hub-kernel wrapper, and none is installed here, so packwise always takes the per-document torch path
(one mixer call per document; exact on CPU and GPU). Source: transformers 5.24 ``modeling_*`` of the families in
:data:`MIXERS`; ``/work/shared/reference/hybrid-models.md`` (measurements).
"""

from __future__ import annotations

import contextlib
import contextvars
import functools
import inspect
import re
import types

import torch

#: Stateful mixer classes packwise runs per document: class name -> transformers model folder. Every other module
#: whose name says it carries state (``_guard._STATEFUL``), and every subclass of these, is refused by name.
MIXERS: dict[str, str] = {
    "MambaMixer": "mamba", "Mamba2Mixer": "mamba2", "FalconMambaMixer": "falcon_mamba", "BambaMixer": "bamba",
    "NemotronHMamba2Mixer": "nemotron_h", "GraniteMoeHybridMambaLayer": "granitemoehybrid",
    "FalconH1Mixer": "falcon_h1", "ZambaMambaMixer": "zamba", "Zamba2MambaMixer": "zamba2",
    "JambaMambaMixer": "jamba", "Qwen3NextGatedDeltaNet": "qwen3_next", "Qwen3_5GatedDeltaNet": "qwen3_5",
    "Qwen3_5MoeGatedDeltaNet": "qwen3_5_moe", "Lfm2ShortConv": "lfm2", "Lfm2MoeShortConv": "lfm2_moe",
    "OlmoHybridGatedDeltaNet": "olmo_hybrid",
    "MiniMaxLightningAttention": "minimax",
}  # fmt: skip
#: Mixers that return ``(output, state)``: their decoder layer discards the state, so a slice's is dropped too.
_RETURNS_STATE = frozenset({"MiniMaxLightningAttention"})
#: Model folders whose every other layer is stateless (attention is routed through packwise attention).
MIXER_FAMILIES = frozenset(MIXERS.values())
#: Names a stateful-looking class may have in :data:`MIXER_FAMILIES` when it only holds a mixer (a decoder layer,
#: a block, the model) or normalises per token (a gated RMSNorm): its children are checked one by one.
_CONTAINER_SUFFIXES = ("DecoderLayer", "Block", "Model", "ForCausalLM", "Norm", "NormGated")
#: Parts of a hybrid family packwise has not verified (e.g. the vision tower of Qwen3.5's VL model): they are
#: unknown classes to ``check_model`` (refused by name; ``allow`` opts in after ``packwise verify``).
_UNVERIFIED_PARTS = re.compile(r"Vision|Visual|Audio|Video|Speech")
#: Stateful mixers refused with a specific reason (every other one gets the generic "no per-document path").
_REFUSED = {
    "KimiLinearDeltaAttention": "its delta mixer would run per document, but Kimi Linear's MLA attention "
    "(KimiLinearAttention) has a value head dim different from the query's, which packwise's varlen attention refuses",
}
#: Keyword arguments a mixer must not see on a document slice (boundaries of the whole row).
_BOUNDARY_KWARGS = ("cu_seq_lens_q", "cu_seq_lens_k", "max_length_q", "max_length_k", "seq_idx", "cu_seqlens")

#: Boundaries a checkpointed mixer keeps for its backward replay (older ones are dropped; a mismatch raises).
_PENDING = 64

_ROW: contextvars.ContextVar[torch.Tensor | None] = contextvars.ContextVar("packwise_row", default=None)


@contextlib.contextmanager
def row_scope(cu_seqlens: torch.Tensor | None):
    """Make ``cu_seqlens`` (``(M+1,)`` int, token offsets of the row's documents) the boundaries every patched
    mixer sees inside the ``with`` block; ``None`` leaves an enclosing scope as it is.

    Example:
        >>> import torch
        >>> with row_scope(torch.tensor([0, 3, 5])):
        ...     current_row().tolist()
        [0, 3, 5]
        >>> current_row() is None
        True
    """
    if cu_seqlens is None:
        yield
        return
    token = _ROW.set(cu_seqlens)
    try:
        yield
    finally:
        _ROW.reset(token)


def current_row() -> torch.Tensor | None:
    """The ``cu_seqlens`` of the innermost active :func:`row_scope`, or None (see :func:`row_scope`)."""
    return _ROW.get()


def known_mixer(cls: type) -> bool:
    """Whether ``cls`` is a mixer class packwise runs per document (exact class, not a subclass).

    Example:
        >>> from transformers.models.lfm2.modeling_lfm2 import Lfm2ShortConv
        >>> known_mixer(Lfm2ShortConv), known_mixer(type("MyConv", (Lfm2ShortConv,), {}))
        (True, False)
    """
    family = MIXERS.get(cls.__name__)
    return family is not None and cls.__module__ == f"transformers.models.{family}.modeling_{family}"


def vouched(cls: type, family: str | None) -> bool:
    """Whether a class of a :data:`MIXER_FAMILIES` family is covered by its ISOLATED row (text layers only).

    Example:
        >>> from transformers.models.qwen3_5.modeling_qwen3_5 import Qwen3_5Attention, Qwen3_5VisionAttention
        >>> vouched(Qwen3_5Attention, "qwen3_5"), vouched(Qwen3_5VisionAttention, "qwen3_5")
        (True, False)
    """
    return family in MIXER_FAMILIES and not _UNVERIFIED_PARTS.search(cls.__name__)


def stateful_verdict(cls: type, family: str | None, *, named: bool) -> str | None:
    """Why a module class is refused as a stateful mixer, or None when it is not one or packwise handles it.

    ``named``: the class comes from a transformers model folder ``family`` and its name says it carries state.
    Accepted: a :data:`MIXERS` class, or a container/gated norm of a :data:`MIXER_FAMILIES` family. Refused:
    a subclass of a known mixer (packwise has not seen its forward) and every other stateful class.

    Example:
        >>> from transformers.models.bamba.modeling_bamba import BambaMixer
        >>> stateful_verdict(BambaMixer, "bamba", named=True) is None
        True
        >>> stateful_verdict(type("MyLayer", (BambaMixer,), {}), None, named=False)[:40]
        'MyLayer subclasses BambaMixer, a mixer p'
    """
    if known_mixer(cls):
        return None
    seen = next((b for b in cls.__mro__[1:] if known_mixer(b)), None)
    if seen is not None:
        return (
            f"{cls.__name__} subclasses {seen.__name__}, a mixer packwise runs per document, but its forward is not "
            "the one packwise verified; packwise refuses it rather than assume it"
        )
    if not named or (family in MIXER_FAMILIES and cls.__name__.endswith(_CONTAINER_SUFFIXES)):
        return None
    return _REFUSED.get(cls.__name__, f"packwise has no per-document path for {cls.__name__}")


def patch_mixers(model: torch.nn.Module) -> int:
    """Give every :data:`MIXERS` module of ``model`` its per-document forward; returns how many were patched.

    Idempotent. The enclosing gradient-checkpointing layer of each mixer is remembered so that a replay during
    backward finds the row's boundaries.
    """
    layers = {}  # id(module) -> its innermost ancestor that can checkpoint (pre-order: deeper ones overwrite)
    for module in model.modules():
        if hasattr(module, "gradient_checkpointing"):
            for sub in module.modules():
                if sub is not module:
                    layers[id(sub)] = module
    count = 0
    for module in model.modules():
        if known_mixer(type(module)):
            if not getattr(getattr(module.forward, "__func__", None), "_packwise", False):
                _patch(module, layers.get(id(module)))
            count += 1
    return count


def _patch(mixer: torch.nn.Module, layer: torch.nn.Module | None) -> None:
    # plain instance attributes (object.__setattr__: the layer is not registered as a child), so that a deep copy
    # of the model gets its own layer reference and its own replay list
    object.__setattr__(mixer, "_packwise_layer", layer)
    object.__setattr__(mixer, "_packwise_replay", [])  # boundaries of checkpointed forwards not yet replayed
    mixer.forward = types.MethodType(_mixer_forward, mixer)


def _mixer_forward(self, *args, **kwargs):
    """A patched mixer's forward: per document inside a row scope (or a backward replay of one), else as is."""
    original = type(self).forward
    cu = _ROW.get()
    layer, replay = self.__dict__["_packwise_layer"], self.__dict__["_packwise_replay"]
    checkpointed = layer is not None and bool(getattr(layer, "gradient_checkpointing", False)) and self.training
    if cu is None and replay and checkpointed and torch.is_grad_enabled() and torch._C._current_graph_task_id() != -1:
        cu = _replayed(replay, type(self).__name__)  # a replay inside backward: the forward's boundaries
    elif cu is not None and checkpointed:  # reentrant checkpointing runs the first pass under no_grad
        replay.append(cu)
        del replay[:-_PENDING]
    if cu is None:
        return original(self, *args, **kwargs)
    return _per_document(self, original, _signature(original), cu, args, kwargs)


_mixer_forward.__dict__["_packwise"] = True  # the marker _wrap and the tests read as an attribute


@functools.cache
def _signature(forward) -> inspect.Signature:
    return inspect.signature(forward)


def _replayed(replay: list[torch.Tensor], name: str) -> torch.Tensor:
    first = replay.pop(0)
    if any(x.shape != first.shape or bool((x != first).any()) for x in replay):
        raise ValueError(
            f"gradient checkpointing replays {name} with {len(replay) + 1} packed rows of different boundaries pending "
            "(several packed forwards before one backward): packwise cannot tell which row this replay belongs to. "
            "Fix: call backward after each packed forward, or disable gradient checkpointing"
        )
    return first


def _per_document(mixer, original, signature, cu, args, kwargs):
    bound = signature.bind(mixer, *args, **kwargs)
    arguments = dict(bound.arguments)
    extra = dict(arguments.pop("kwargs", {}) or {})
    arguments.pop("self", None)
    hidden = arguments.pop("hidden_states")
    name = type(mixer).__name__
    if hidden.dim() != 3 or hidden.shape[0] != 1 or int(cu[-1]) != hidden.shape[1]:
        raise ValueError(
            f"{name} got hidden_states of shape {tuple(hidden.shape)} but the packed row's cu_seq_lens_q ends at "
            f"{int(cu[-1])}: packed rows are [1, T] with cu_seq_lens_q[-1] == T (build them with PackedDataCollator)"
        )
    cache = arguments.pop("cache", None)
    if cache is not None and _has_state(cache, getattr(mixer, "layer_idx", None)):
        raise ValueError(
            f"{name} got a cache that already holds state together with cu_seq_lens_q: a packed row cannot continue "
            "from a cache (pass use_cache=False, or continue generation from one unpacked prompt)"
        )
    mask = arguments.pop("attention_mask", None)
    if mask is not None and not (mask.dim() == 2 and mask.shape[-1] == hidden.shape[1]):
        raise ValueError(
            f"{name} got an attention_mask of shape {tuple(mask.shape)} with a packed row: packwise slices only a "
            "[1, T] mask per document; PackedDataCollator emits none"
        )
    for key in _BOUNDARY_KWARGS:
        extra.pop(key, None)
    extra.pop("position_ids", None)
    rest = {**arguments, **extra, "attention_mask": mask}
    length = hidden.shape[1]
    bounds = cu.tolist()
    outs, width = [], None
    for start, end in zip(bounds[:-1], bounds[1:]):
        if end == start:
            continue
        piece = {k: _slice(v, length, start, end) for k, v in rest.items()}
        out = original(mixer, hidden[:, start:end], cache=None, **piece)
        if isinstance(out, tuple):
            if name not in _RETURNS_STATE:
                raise ValueError(f"{name} returned {len(out)} outputs; packwise knows only mixers returning one tensor")
            out, width = out[0], len(out)
        outs.append(out)
    out = torch.cat(outs, dim=1)
    return out if width is None else (out, *([None] * (width - 1)))


def _slice(value, length: int, start: int, end: int):
    """A per-token argument (``[1, T, ...]`` tensor, or a tuple of them: rotary cos/sin) cut to one document."""
    if isinstance(value, torch.Tensor) and value.dim() >= 2 and value.shape[:2] == (1, length):
        return value[:, start:end]
    if isinstance(value, tuple) and value and all(isinstance(v, torch.Tensor) for v in value):
        return tuple(_slice(v, length, start, end) for v in value)
    return value


def _has_state(cache, layer_idx) -> bool:
    check = getattr(cache, "has_previous_state", None)
    if check is not None and layer_idx is not None:
        try:
            return bool(check(layer_idx))
        except (TypeError, IndexError, KeyError, AttributeError):
            pass
    return bool(cache.get_seq_length()) if hasattr(cache, "get_seq_length") else False
