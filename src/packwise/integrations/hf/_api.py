"""Hugging Face Transformers / TRL integration: a packing collator and isolation through AttentionInterface.

The collator emits what HF's flash-attention path already understands — ``input_ids [1, T]``, ``labels``,
``position_ids`` restarting per document, ``cu_seq_lens_q/k`` and ``max_length_q/k`` — and no
``attention_mask`` (which would disable packing everywhere). ``use_packed_attention`` makes *any* model
that dispatches through ``AttentionInterface`` use :func:`packwise.attention.varlen_attention` on those
boundaries, so documents stay isolated on CPU and GPU, with ``use_cache`` on or off, in train and eval
mode. Measured with transformers 5.24 on CPU: without it, restarted position ids alone isolate on
eager/sdpa only when ``use_cache=False``.
"""

from __future__ import annotations

import inspect
import sys
import types
from collections.abc import Mapping, Sequence
from functools import partial
from typing import Any, cast

import torch

from ...assemble import (
    BATCH_KEYS,
    HF_KEYS,
    MEDIA_KEYS,
    PackedBatch,
    PackedSequence,
    assemble_batch,
    assemble_pack,
    check_max_segments,
    collate_packs,
)
from ...attention import BACKENDS, Backend
from ._attention import packwise_attention_forward
from ._features import _split
from ._guard import (
    ENCODERS,
    PackingRefused,
    _check_boundaries,
    _check_switched,
    _family,
    check_batch_norm,
    check_model,
    check_target,
    position_offset,
)
from ._mask import check_mask_only_features
from ._mixers import patch_mixers, row_scope
from ._router import routes, without_padding

__all__ = [
    "HF_KEYS", "PackedDataCollator", "PackingRefused", "attention_name", "packwise_attention_forward",
    "position_offset", "register_packed_attention", "use_packed_attention",
]  # fmt: skip


class PackedDataCollator:
    """Collate rows into one packed row for ``transformers.Trainer`` / ``trl.SFTTrainer``.

    A row is either one tokenized sample (``input_ids`` + optional ``labels`` or ``loss_mask``) or a row of
    ``packwise pack`` output (``input_ids``, ``labels``, ``seq_lengths``): every document of every row
    becomes a segment of one ``[1, T]`` row. Under ``Trainer``'s default ``remove_unused_columns=True``
    ``seq_lengths`` survives when the model was patched by :func:`use_packed_attention` (its forward
    accepts the column) and always under TRL's ``SFTTrainer`` (which keeps it). When a ``Trainer`` has
    pruned ``seq_lengths`` from a dataset that has it, the first call raises instead of merging a pack into
    one document.

    Args:
        pad_to_multiple_of: pad T up to a multiple (one extra segment, labels -100).
        alignment: pad every document to a multiple (context/tensor parallelism).
        position_offset: first position of every document.
        pad_token_id: ``input_ids`` value on padding.
        return_packwise_keys: also return ``cu_seqlens``, ``seq_idx``, ``padding_mask``, ... (not for
            ``model(**batch)``).
        max_segments: give ``cu_seq_lens_q/k`` exactly ``max_segments + 1`` entries (the last boundary
            repeated: empty segments) so ``torch.compile`` sees one shape; a batch with more segments
            (documents, plus one for ``pad_to_multiple_of`` padding) is refused by name.
        drop_columns: names of the rows' columns to leave out (e.g. ``("id",)`` under
            ``remove_unused_columns=False``), each drop counted in ``dropped_columns`` (name -> rows). Any other
            column without one value per token (a scalar, a string) is refused by name.

    Rows may also be :class:`~packwise.assemble.PackedSequence` objects (``PackedParquetDataset`` items).
    Every other per-token column of a row (``token_type_ids``, ...) travels per document, as
    :func:`~packwise.assemble.assemble_pack` carries it (padding: 0); scalars and strings stay out. A row's
    own ``position_ids`` are kept — split by ``seq_lengths`` on a packed row — the one rule of every loader
    (``collate_packs`` keeps a pack's positions): they are data (a chunk that continues a document at 10);
    rows without them restart at ``position_offset``. An empty row (no ``input_ids``) is refused by index.

    Raises:
        ValueError: a row column that is neither per token nor read by the collator (``{"id": "row-7"}``),
            naming it: remove it (``dataset.remove_columns(["id"])``; ``Trainer``'s default
            ``remove_unused_columns=True`` does) or list it in ``drop_columns``.
        TypeError: ``drop_columns`` not a collection of column names, or naming ``input_ids``.

    Returns (``__call__``):
        ``input_ids [1, T]`` int64, ``labels [1, T]`` int64 (the first label of every document -100),
        ``position_ids [1, T]`` (MRoPE data: ``[4, 1, T]``, row 0 the text positions Qwen-VL models use to
        detect packing), ``cu_seq_lens_q/k (M+1,)`` int32, ``max_length_q/k`` (ints), and for data with
        images ``mm_token_type_ids [1, T]``, ``pixel_values``, ``image_grid_thw``; the rows' other per-token
        columns ``[1, T]``; ``padding_mask [1, T]`` bool (True on alignment/tail padding) only when the batch
        has padding — the forward patched by :func:`use_packed_attention` keeps it out of MoE router
        statistics (``hf/_router.py``) — ready for ``model(**batch)``. No ``attention_mask``.

    Example:
        >>> collate = PackedDataCollator()
        >>> batch = collate([{"input_ids": [1, 2, 3]}, {"input_ids": [4, 5]}])
        >>> batch["input_ids"].tolist(), batch["labels"].tolist(), batch["position_ids"].tolist()
        ([[1, 2, 3, 4, 5]], [[-100, 2, 3, -100, 5]], [[0, 1, 2, 0, 1]])
        >>> batch["cu_seq_lens_q"].tolist(), batch["max_length_q"], "attention_mask" in batch
        ([0, 3, 5], 3, False)
    """

    def __init__(
        self,
        *,
        pad_to_multiple_of: int = 1,
        alignment: int = 1,
        position_offset: int = 0,
        pad_token_id: int = 0,
        return_packwise_keys: bool = False,
        max_segments: int | None = None,
        drop_columns: Sequence[str] = (),
    ) -> None:
        if isinstance(drop_columns, str) or not all(isinstance(c, str) for c in drop_columns):
            raise TypeError(f"drop_columns={drop_columns!r}: pass a tuple of column names, e.g. drop_columns=('id',)")
        if "input_ids" in drop_columns:
            raise TypeError("drop_columns names 'input_ids': the tokens are what the collator packs; keep them")
        self.drop_columns = tuple(drop_columns)
        self.dropped_columns: dict[str, int] = dict.fromkeys(self.drop_columns, 0)  # name -> rows it was dropped from
        self.pad_to_multiple_of = pad_to_multiple_of
        self.alignment = alignment
        self.position_offset = position_offset
        self.pad_token_id = pad_token_id
        self.return_packwise_keys = return_packwise_keys
        self.max_segments = check_max_segments(max_segments)
        self._trainer_checked = False
        self._unpatched_router = None  # the Trainer's MoE model when use_packed_attention did not wrap it

    def __call__(self, features: Sequence[Mapping]) -> dict[str, Any]:
        if not features:
            raise ValueError("PackedDataCollator got an empty batch")
        if self.drop_columns:
            features = [self._drop(f) for f in features]
        if not self._trainer_checked:  # once per collator, when a Trainer calls it
            packed = any(isinstance(f, PackedSequence) or "seq_lengths" in f for f in features)
            trainer = _check_trainer_kept_boundaries(packed=packed)
            self._trainer_checked = trainer is not None
            model = getattr(trainer, "model", None)
            moe = isinstance(model, torch.nn.Module) and routes(model) and not _wrapped(model)
            self._unpatched_router = model if moe else None
        if not any(isinstance(f, PackedSequence) or "loss_mask" in f for f in features):
            # one fused pass (same batch, bit for bit): HF rows only; Megatron rows (labels + loss_mask) and packs
            # take the two-step path, which converts them to HF labels or refuses a conversion that loses a target
            batch: PackedBatch = assemble_batch(
                [_split(f, i) for i, f in enumerate(features)], alignment=self.alignment,
                position_offset=self.position_offset, pad_token_id=self.pad_token_id,
                pad_to_multiple_of=self.pad_to_multiple_of, max_segments=self.max_segments,
            )  # fmt: skip
        else:
            packs = [
                f if isinstance(f, PackedSequence) else assemble_pack(
                    _split(f, i), alignment=self.alignment, position_offset=self.position_offset,
                    pad_token_id=self.pad_token_id,
                )
                for i, f in enumerate(features)
            ]  # fmt: skip
            batch = collate_packs(  # labels="hf": HF models shift; Megatron-shifted packs are converted back
                packs,
                pad_to_multiple_of=self.pad_to_multiple_of,
                pad_token_id=self.pad_token_id,
                labels="hf",
                max_segments=self.max_segments,
            )
        if batch["position_ids"].dim() == 3:  # MRoPE: Qwen-VL's packed form [4, 1, T], row 0 = text positions
            text = _text_positions(batch["cu_seqlens_padded"], batch["position_ids"].shape[-1])
            batch["position_ids"] = torch.cat([text.view(1, 1, -1), batch["position_ids"]])
        full = cast("dict[str, Any]", batch)  # a PackedBatch is a plain dict, the rows' own columns included
        if self.return_packwise_keys:
            return full
        out = {k: full[k] for k in HF_KEYS}
        out.update({k: full[k] for k in ("mm_token_type_ids", *MEDIA_KEYS) if k in full})
        out.update({k: v for k, v in full.items() if k not in BATCH_KEYS})  # the rows' own per-token columns
        if bool(batch["padding_mask"].any()):  # for the router statistics of MoE models (see _router.py)
            if self._unpatched_router is not None:  # its forward would swallow padding_mask in **kwargs
                raise ValueError(
                    f"this batch has {int(batch['padding_mask'].sum())} padding tokens (alignment={self.alignment}, "
                    f"pad_to_multiple_of={self.pad_to_multiple_of}) and the Trainer's "
                    f"{type(self._unpatched_router).__name__} computes MoE router statistics but its forward is not "
                    "packwise's: padding_mask would vanish in **kwargs and the load-balancing loss would count the "
                    "padding. Fix: use_packed_attention(model) before the Trainer, or alignment=1, pad_to_multiple_of=1"
                )
            out["padding_mask"] = batch["padding_mask"]
        return out

    def _drop(self, feature):
        if isinstance(feature, PackedSequence) or not isinstance(feature, Mapping):
            return feature  # a pack holds no row columns; a non-dict row is refused by name later
        for name in self.drop_columns:
            self.dropped_columns[name] += name in feature
        return {k: v for k, v in feature.items() if k not in self.drop_columns}


def _check_trainer_kept_boundaries(*, packed: bool = False):
    """Raise if a ``transformers.Trainer`` up the call stack pruned ``seq_lengths`` from a packed dataset.

    The Trainer drops dataset columns that are not ``model.forward`` parameters before the collator runs, so
    a pack would reach the model as one document. Checked on the collator's first batch (in the process that
    runs the Trainer: ``dataloader_num_workers=0``, the default). Also refuses accelerate's batch dispatching
    of an iterable dataset (it slices ``cu_seq_lens_q/k`` to the batch size). ``packed``: the rows still carry
    ``seq_lengths`` (nothing was pruned). Returns the Trainer found, or None.
    """
    trainer_mod = sys.modules.get("transformers.trainer")
    if trainer_mod is None:
        return None
    frame: types.FrameType | None = sys._getframe(2)
    for _ in range(64):
        if frame is None:
            return None
        trainer = frame.f_locals.get("self")
        if isinstance(trainer, trainer_mod.Trainer):
            break
        frame = frame.f_back
    else:
        return None
    if not packed:
        _check_pruned(trainer)
    dispatch = getattr(getattr(trainer.args, "accelerator_config", None), "dispatch_batches", None)
    evals = getattr(trainer, "eval_dataset", None)
    sets = [trainer.train_dataset, *(evals.values() if isinstance(evals, dict) else [evals])]
    iterable = [d for d in sets if isinstance(d, torch.utils.data.IterableDataset)]
    if iterable and dispatch is not False:
        raise ValueError(
            f"{type(trainer).__name__} hands an iterable dataset ({type(iterable[0]).__name__}) to "
            "accelerate, which dispatches its batches (accelerator_config.dispatch_batches defaults to True for "
            "iterable datasets) and slices every tensor to the batch size along dim 0 — cutting cu_seq_lens_q/k to "
            "one value. Fix: TrainingArguments(accelerator_config={'dispatch_batches': False})"
        )
    return trainer


def _check_pruned(trainer) -> None:
    """Raise if the Trainer pruned ``seq_lengths`` (or may have, from a dataset that cannot be inspected)."""
    if not getattr(trainer.args, "remove_unused_columns", False):
        return
    kept = trainer._signature_columns or []
    sets = (
        [trainer.train_dataset, *(getattr(trainer, "eval_dataset", None) or {}).values()]
        if isinstance(getattr(trainer, "eval_dataset", None), dict)
        else [trainer.train_dataset, getattr(trainer, "eval_dataset", None)]
    )
    if "seq_lengths" in kept:
        return
    seen = [_has_seq_lengths(d) for d in sets if d is not None]
    if None in seen and True not in seen:
        raise ValueError(
            f"{type(trainer).__name__} prunes dataset columns (remove_unused_columns=True keeps only "
            f"{type(trainer.model).__name__}.forward's parameters, which lack 'seq_lengths') and its dataset "
            f"({', '.join(sorted({type(d).__name__ for d in sets if d is not None and _has_seq_lengths(d) is None}))}) "
            "cannot be inspected, so PackedDataCollator cannot tell whether the rows were packs: a pack would "
            "reach the model as ONE document. Fix: call packwise.hf.use_packed_attention(model) before building "
            "the Trainer (the patched forward accepts seq_lengths); TrainingArguments(remove_unused_columns=False) "
            "keeps the column too, but an unpatched model isolates documents only under flash_attention_2"
        )
    if True in seen:
        raise ValueError(
            f"{type(trainer).__name__} removed the 'seq_lengths' column (remove_unused_columns=True keeps only "
            f"{type(trainer.model).__name__}.forward's parameters), so PackedDataCollator would merge every pack into "
            "ONE document. Fix: call packwise.hf.use_packed_attention(model) before building the Trainer (the patched "
            "forward accepts seq_lengths); TrainingArguments(remove_unused_columns=False) keeps the column too, but "
            "an unpatched model isolates documents only under flash_attention_2"
        )


def _has_seq_lengths(dataset) -> bool | None:
    """Whether a dataset's rows carry ``seq_lengths``: a ``datasets`` dataset's columns, else its first row.

    None when it cannot be told: an iterable dataset (torch ``IterableDataset``, a ``datasets.IterableDataset``
    with unknown features) or one that cannot be indexed."""
    names = getattr(dataset, "column_names", None)
    if names is not None:
        return "seq_lengths" in names
    if isinstance(dataset, torch.utils.data.IterableDataset) or type(dataset).__name__ == "IterableDataset":
        return None  # iterating would consume it
    try:
        first = dataset[0]  # a torch map-style Dataset or a list of dicts (Trainer prunes their keys per batch)
    except Exception:  # cannot be indexed: nothing to inspect
        return None
    return isinstance(first, Mapping) and "seq_lengths" in first


def _text_positions(cu_padded: torch.Tensor, total: int) -> torch.Tensor:
    """Per-segment arange over the physical segments (what HF's packed-sequence detection expects)."""
    seg = cu_padded.to(torch.int64).diff()
    starts = cu_padded[:-1].to(torch.int64)
    return torch.arange(total, device=cu_padded.device) - torch.repeat_interleave(starts, seg)


def attention_name(backend: Backend = "auto") -> str:
    """The ``AttentionInterface`` name packwise registers for a backend (``packwise`` or ``packwise_<backend>``)."""
    return "packwise" if backend == "auto" else f"packwise_{backend}"


def register_packed_attention(backend: Backend = "auto") -> str:
    """Register packwise attention (and SDPA's mask builder) under :func:`attention_name`; returns the name."""
    from transformers import AttentionInterface, AttentionMaskInterface
    from transformers.masking_utils import sdpa_mask

    if backend not in BACKENDS:
        raise ValueError(f"unknown attention backend {backend!r}; use one of {', '.join(BACKENDS)}")
    name = attention_name(backend)
    AttentionInterface.register(name, partial(packwise_attention_forward, backend=backend))
    AttentionMaskInterface.register(name, sdpa_mask)
    return name


def use_packed_attention(model, *, backend: Backend = "auto", allow: Sequence[str] = ()):
    """Switch a Hugging Face model to packwise attention so packed documents never attend to each other.

    Checks the model first (:class:`PackingRefused` names what cannot be isolated), then routes every
    attention layer through :func:`packwise_attention_forward` — boundaries come from the collator's
    ``cu_seq_lens_q/k``, never from token values or position ids — and wraps ``model.forward`` so that
    (a) ``Trainer(remove_unused_columns=True)`` keeps the ``seq_lengths`` column (the forward lists it)
    and (b) a packed row without boundaries is refused: position ids that restart inside a row without
    ``cu_seq_lens_q``, ``seq_lengths`` passed to the model itself, or documents whose first position id
    is not the model's :func:`position_offset`. Sliding windows, logit softcapping, attention sinks,
    custom scaling and encoder (bidirectional) attention are honoured per document; ``generate`` works.
    A sliding window a module applies only through HF's mask is honoured when its layer holds it
    (qwen2_moe) and refused otherwise (phimoe, doge, blt), whatever ``allow`` says (``hf/_mask.py``). The
    collator's ``padding_mask`` reaches an MoE model's load-balancing loss as ``attention_mask``, so a
    padded batch's aux loss is the tight pack's.
    Hybrid models: every stateful mixer packwise knows (Mamba, Mamba2, gated DeltaNet, short convolution,
    lightning attention: :mod:`packwise.integrations.hf._mixers`) runs once per document of a packed row, so
    its state restarts at every boundary; the same holds when an inner base model (``model.model(...)``)
    is called directly, and under gradient checkpointing. Returns the model (switched in place).

    Args:
        backend: varlen backend (see :mod:`packwise.attention`); ``auto`` picks one that honours the
            model's features.
        allow: module class names to accept in a model family packwise has not verified — only after
            ``packwise verify --model PATH`` printed ISOLATED for it. Stateful mixers are refused anyway,
            except the Mamba/Mamba2/gated-DeltaNet/short-conv/lightning classes packwise runs per document.

    Raises:
        PackingRefused: (a ``ValueError``) a stateful mixer packwise cannot run per document (named with
            the model type), an unverified module class (named, with the ``allow`` opt-in), a config
            feature the backend cannot honour (field and value), or a sliding window only HF's mask applies.
        TypeError: a model that is not a transformers ``PreTrainedModel``, or ``allow`` given as one string.
        ValueError: an ``allow`` name matching no module class of the model, an unknown backend, or a model that
            cannot switch attention implementation (checked on
            ``config._attn_implementation`` and every sub-config afterwards: Falcon only logs a warning).
        ValueError (at forward time): a packed row with media while a BatchNorm layer trains (Parakeet's audio
            tower in Nemotron-Omni): its batch statistics span every document; put that layer in eval mode.

    Example:
        >>> from transformers import LlamaConfig, LlamaForCausalLM
        >>> cfg = LlamaConfig(vocab_size=64, hidden_size=32, intermediate_size=64, num_hidden_layers=1,
        ...                   num_attention_heads=4, num_key_value_heads=2)
        >>> model = use_packed_attention(LlamaForCausalLM(cfg), backend="sdpa")
        >>> model.config._attn_implementation, "seq_lengths" in inspect.signature(model.forward).parameters
        ('packwise_sdpa', True)
    """
    if backend not in BACKENDS:
        raise ValueError(f"unknown attention backend {backend!r}; use one of {', '.join(BACKENDS)}")
    check_target(model, allow)
    check_model(model, backend, allow)
    check_mask_only_features(model)  # whatever allow= says
    name = register_packed_attention(backend)
    try:
        model.set_attn_implementation(name)
    except (ValueError, AttributeError) as e:
        raise ValueError(f"{type(model).__name__} cannot switch to packwise attention: {e}") from e
    _check_switched(model, name)
    for module in model.modules():
        if _family(type(module)) in ENCODERS and getattr(module, "is_causal", None) is False:
            module._packwise_bidirectional = True  # an encoder's self-attention: per document, both directions
    patch_mixers(model)  # stateful mixers run per document inside the row scope the wrapped forwards enter
    for module in model.modules():  # every PreTrainedModel a user can call: the inner base model too
        if module is model or (hasattr(module, "config") and hasattr(module, "base_model_prefix")):
            _wrap_forward(module)
    return model


def _wrapped(model) -> bool:
    """Whether ``model.forward`` is the one :func:`use_packed_attention` installed (it reads ``padding_mask``)."""
    return bool(getattr(getattr(model.forward, "__func__", None), "_packwise", False))


def _wrap_forward(model) -> None:
    """Give ``model`` an instance ``forward`` that lists ``seq_lengths`` and refuses rows without boundaries."""
    if _wrapped(model):
        return
    offset = position_offset(model)
    norms = [(n, m) for n, m in model.named_modules() if isinstance(m, torch.nn.modules.batchnorm._BatchNorm)]

    def forward(self, *args, seq_lengths=None, **kwargs):
        if seq_lengths is not None:
            raise ValueError(
                "seq_lengths reached the model: it is PackedDataCollator's input (turned into cu_seq_lens_q/k and "
                "restarting position_ids); pass data_collator=PackedDataCollator() to the Trainer"
            )
        if str(getattr(self.config, "_attn_implementation", "")).startswith("packwise"):
            _check_boundaries(kwargs, offset)
        kwargs = without_padding(self, kwargs, kwargs.pop("padding_mask", None))
        check_batch_norm(norms, kwargs, MEDIA_KEYS)
        with row_scope(kwargs.get("cu_seq_lens_q")):
            return type(self).forward(self, *args, **kwargs)

    params = list(inspect.signature(type(model).forward).parameters.values())
    extra = inspect.Parameter("seq_lengths", inspect.Parameter.KEYWORD_ONLY, default=None)
    var_kw = [p for p in params if p.kind is inspect.Parameter.VAR_KEYWORD]
    params = [p for p in params if p.kind is not inspect.Parameter.VAR_KEYWORD and p.name != "seq_lengths"]
    forward.__dict__["__signature__"] = inspect.Signature([*params, extra, *var_kw])  # a function's attributes
    forward.__dict__["_packwise"] = True
    forward.__doc__ = type(model).forward.__doc__
    model.forward = types.MethodType(forward, model)
