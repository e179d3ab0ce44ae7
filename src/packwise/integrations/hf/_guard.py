"""What ``use_packed_attention`` refuses: models, layers and settings packwise cannot isolate.

Checked, never assumed. A module is accepted when its class comes from a transformers model family in
:data:`VERIFIED_FAMILIES` (each one ISOLATED in ``docs/conformance.md``), from ``torch.nn``, has a
position-wise name (``...MLP``, ``...Norm``, ``...Embedding``, ``Linear``, ...) or a container's
(``...Model``, ``...ForCausalLM``: PEFT wrappers; their children are checked one by one), or is named in ``allow``.
Layers that carry state along the sequence — Mamba/Mamba2 mixers, gated DeltaNet, Delta and Lightning
(linear) attention, RWKV, short convolutions — are refused by name whatever ``allow`` says (on
transformers' CPU/torch path their recurrence runs over the whole packed row, so one document's state flows
into the next), unless ``_mixers.MIXERS`` runs that exact class per document; its families count as verified.
Heads that pool one prediction per row (``...ForSequenceClassification``, ``...ForQuestionAnswering``,
``...ForMultipleChoice``, ``...ForNextSentencePrediction``, ``...ClassificationHead``) are refused too.
The patched forward's boundary checks (:func:`_check_boundaries`) and the post-switch check
(:func:`_check_switched`) live here as well.
"""

from __future__ import annotations

import re
from collections.abc import Sequence

import torch

from ...attention import FEATURES, Backend
from ._mixers import stateful_verdict, vouched

#: transformers model folders (``transformers.models.<name>``) whose every layer packwise has proved isolated.
VERIFIED_FAMILIES = frozenset(
    {
        "llama", "qwen2", "qwen3", "qwen3_moe", "mistral", "gemma2", "gemma3", "phi3", "gpt_oss", "olmo2",
        "roberta", "bert", "qwen2_5_vl",
        "qwen2_5_omni",  # the thinker: ISOLATED with text, image and audio documents (tests/multimodal/test_audio.py)
        # Nemotron-Omni: the wrapper, its RADIO vision and Parakeet audio encoders (each image/clip encoded on its own);
        # the NemotronH LM's mixers run per document (_mixers.py). ISOLATED: tests/multimodal/test_nemotron_omni.py
        "nemotron_h_omni", "radio", "parakeet",
        "qwen3_vl",  # interleaved MRoPE, deepstack: ISOLATED with image and video documents (test_qwen3_vl.py)
    }
)  # fmt: skip
#: Encoder families (bidirectional attention, per document) and their first position id.
ENCODERS = {"roberta": "pad_token_id + 1", "bert": "0"}
#: Stateful sequence mixers, refused whatever ``allow`` says. Case-insensitive except ``SSM`` (which would hit
#: ``GptOssMLP``): RWKV/Rwkv, Mamba, (gated) DeltaNet and Delta attention (Kimi Linear), Lightning attention
#: (MiniMax), linear attention, short/1-D convolutions, recurrent and retention layers.
_STATEFUL = re.compile(
    r"SSM|(?i:mamba|deltanet|delta\w*attention|lightning|linear\w*attention|shortconv|mixer|recurrent|rwkv|"
    r"retention|conv1d)"
)
#: Heads that pool ONE prediction per row (a pack would get one label for all its documents).
_PER_ROW_HEAD = re.compile(
    r"For(SequenceClassification|QuestionAnswering|MultipleChoice|NextSentencePrediction)$|ClassificationHead$"
)
_POSITIONWISE = re.compile(
    r"(MLP|Norm|RMSNorm|LayerNorm|Embedding|Embeddings|Embed|Linear|Dropout|Activation|Act|Experts|Router|Gate|"
    r"Identity|ModuleList|ModuleDict|ParameterList|ParameterDict|Sequential|Model|ForCausalLM)$"
)


class PackingRefused(ValueError):
    """``use_packed_attention`` cannot make this model isolate packed documents; ``reason`` says why and how.

    When only the chosen backend is the problem, ``problem`` is ``reason`` without its fix and ``backends``
    names the ``backend=`` values that take the model (``()`` otherwise: no backend does).

    Example:
        >>> from packwise.hf import PackingRefused, use_packed_attention
        >>> from packwise.verify import family_model
        >>> try:
        ...     use_packed_attention(family_model("kimi_linear", 64))  # a delta-attention mixer carries state
        ... except PackingRefused as e:
        ...     print(e.reason)
        KimiLinearDeltaAttention in model type 'kimi_linear' carries state along the sequence ... train it unpacked, ...
    """

    def __init__(self, reason: str, *, problem: str | None = None, backends: tuple[str, ...] = ()) -> None:
        super().__init__(reason)
        self.reason = reason
        self.problem = reason if problem is None else problem
        self.backends = tuple(backends)


def _backend_refused(problem: str, feature: str) -> PackingRefused:
    backends = ("auto", *FEATURES[feature])
    fix = f"use backend 'auto' or one of {', '.join(FEATURES[feature])}"
    return PackingRefused(f"{problem}; {fix}", problem=problem, backends=backends)


def _family(cls: type) -> str | None:
    parts = cls.__module__.split(".")
    return parts[2] if len(parts) > 2 and parts[:2] == ["transformers", "models"] else None


def check_target(model, allow: Sequence[str]) -> None:
    """Refuse what :func:`use_packed_attention` cannot patch: a model without ``set_attn_implementation`` (not a
    transformers ``PreTrainedModel``), an ``allow`` given as one string (it would be read as its characters) or
    holding a non-string, and an ``allow`` name that matches no module class of ``model`` (a typo opts nothing in).

    Raises:
        TypeError: the model or the ``allow`` type, named. ValueError: an ``allow`` name no module carries.
    """
    if not isinstance(model, torch.nn.Module) or not callable(getattr(model, "set_attn_implementation", None)):
        raise TypeError(
            f"use_packed_attention got a {type(model).__name__}, not a transformers PreTrainedModel (it has no "
            "set_attn_implementation): packwise patches transformers models only; for a custom torch model call "
            "packwise.attention.varlen_attention with the batch's cu_seq_lens_q yourself"
        )
    if isinstance(allow, str) or not all(isinstance(a, str) for a in allow):
        raise TypeError(f"allow={allow!r}: pass a list of module class names, e.g. allow=['LlamaAttention']")
    present = {type(m).__name__ for m in model.modules()}
    missing = sorted(set(allow) - present)
    if missing:
        raise ValueError(
            f"allow names {missing[0]!r}, which is no module class of this {type(model).__name__} (its classes: "
            f"{sorted(present)}); fix the name or drop it"
        )


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
        if _PER_ROW_HEAD.search(name):
            raise PackingRefused(
                f"{name} pools one prediction per row (sequence classification, question answering, multiple "
                "choice, next-sentence prediction): a packed row would get ONE prediction for all its documents. "
                "packwise refuses this head: train it unpacked (padded batches), or use a per-token head "
                "(...ForCausalLM, ...ForTokenClassification, ...ForMaskedLM)"
            )
        verdict = stateful_verdict(cls, family, named=bool(family and _STATEFUL.search(name)))
        if verdict is not None:
            raise PackingRefused(
                f"{name} in model type {model_type!r} carries state along the sequence (a recurrent/convolutional "
                f"mixer: {verdict}); transformers' torch path runs it over the whole packed row without resetting at "
                "document boundaries, so packed documents would leak into each other. packwise refuses this model: "
                "train it unpacked, or with a kernel that takes seq_idx/cu_seqlens and prove it with packwise verify"
            )
        if family in VERIFIED_FAMILIES or vouched(cls, family):
            continue
        if cls.__module__.startswith(("torch.", "transformers.activations")):
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
            raise _backend_refused(
                f"{type(cfg).__name__}.attn_logit_softcapping={cap}: backend {backend!r} cannot apply logit "
                "softcapping",
                "softcap",
            )
    has_sinks = any(getattr(m, "sinks", None) is not None for m in model.modules() if _family(type(m)))
    if has_sinks and backend != "auto" and backend not in FEATURES["sinks"]:
        raise _backend_refused(
            f"model type {config.model_type!r} has attention sinks (GptOssAttention.sinks): backend {backend!r} "
            "cannot add them to the softmax",
            "sinks",
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


def _check_switched(model, name: str) -> None:
    """Raise unless the model's config (and every sub-config) now names packwise attention.

    transformers only logs a warning when a model cannot switch attention at run time (Falcon, whose
    attention class is chosen in ``__init__``), leaving it on eager/sdpa, which merges packed documents."""
    config = getattr(model, "config", None)
    if config is None:
        return
    configs = [("config", config)]
    for key in getattr(config, "sub_configs", None) or {}:
        sub = getattr(config, key, None)
        if sub is not None and hasattr(sub, "_attn_implementation"):
            configs.append((f"config.{key}", sub))
    stale = {where: cfg._attn_implementation for where, cfg in configs if cfg._attn_implementation != name}
    if stale:
        cls = type(model).__name__
        found = ", ".join(f"{k}._attn_implementation={v!r}" for k, v in stale.items())
        raise ValueError(
            f"{cls} did not switch to packwise attention: {found} "
            f"after set_attn_implementation({name!r}): transformers cannot route this model's attention through "
            "AttentionInterface (it only logs a warning), so packed documents would attend to each other. packwise "
            "refuses this model: train it unpacked (padded batches), or use a model family whose attention "
            "dispatches through AttentionInterface"
        )


def check_batch_norm(norms: list, kwargs: dict, media_keys) -> None:
    """Refuse a packed row with media while a BatchNorm layer of the model trains (Parakeet's conformer
    convolution module in Nemotron-Omni's audio tower): train-mode batch statistics span every clip/image of
    the row's documents, padding frames included, so one document's media move another's features (measured on
    tiny-nemotron-h-omni: max |Δlogit| 0.13 on the audio documents; 0 with the BatchNorm in eval mode)."""
    cu = kwargs.get("cu_seq_lens_q")
    if cu is None or cu.numel() <= 2 or not any(kwargs.get(k) is not None for k in media_keys):
        return
    for name, module in norms:
        if module.training:
            raise ValueError(
                f"{name} ({type(module).__name__}) is in train mode in a packed row of {cu.numel() - 1} segments with "
                "media: BatchNorm normalises with statistics over the whole batch, so the documents' clips/images "
                f"would leak into each other. Put it in eval mode (model.{name}.eval(): running statistics, e.g. a "
                "frozen encoder) after model.train(), or train this model unpacked"
            )


def _check_boundaries(kwargs: dict, offset: int) -> None:
    """Refuse a packed row whose boundaries the attention cannot see.

    Without ``cu_seq_lens_q``: position ids that restart (do not increase) between two consecutive REAL
    tokens (``attention_mask`` 1 at ``t-1`` and ``t``; no mask: every token) — HF's left padding restarts
    positions after the pads and stays allowed. With ``cu_seq_lens_q`` and 2-D position ids: positions must
    increase by exactly 1 inside every segment (a segment holding several documents would leak).
    ``cu_seq_lens_k`` must equal ``cu_seq_lens_q`` (packed training has no KV cache: keys are the queries).
    """
    cu_q, cu_k = kwargs.get("cu_seq_lens_q"), kwargs.get("cu_seq_lens_k")
    if cu_k is not None and (cu_q is None or not torch.equal(torch.as_tensor(cu_q), torch.as_tensor(cu_k))):
        q = None if cu_q is None else torch.as_tensor(cu_q).tolist()
        raise ValueError(
            f"cu_seq_lens_k {torch.as_tensor(cu_k).tolist()} differs from cu_seq_lens_q {q}: in a packed row the keys "
            "are the queries, so both must hold the same boundaries (queries of one document would attend to keys "
            "of another). Pass the cu_seq_lens_q/k that one PackedDataCollator call emits"
        )
    pos = kwargs.get("position_ids")
    if not isinstance(pos, torch.Tensor) or pos.shape[-1] < 2:
        return
    if pos.dim() == 3:  # MRoPE: [4, B, T] carries the text positions in row 0; [3, B, T] none
        if pos.shape[0] != 4:
            return
        pos = pos[0]
    cu = kwargs.get("cu_seq_lens_q")
    if cu is None:
        restart = pos.diff(dim=-1) <= 0
        mask = kwargs.get("attention_mask")
        if isinstance(mask, torch.Tensor):
            if mask.dim() != 2 or mask.shape[-1] != pos.shape[-1]:
                return  # a custom 4-D mask (or one covering a cache): it carries its own boundaries
            real = mask.to(torch.bool)
            restart = restart & real[..., 1:] & real[..., :-1]
        if bool(restart.any()):
            where = int(restart.nonzero()[0, -1]) + 1
            raise ValueError(
                f"a packed row reached the model without boundaries: position_ids restart at token {where} but no "
                "cu_seq_lens_q/k were given (an attention_mask of ones does not separate documents), so documents "
                "would attend to each other. Build batches with packwise.hf.PackedDataCollator (it emits "
                "cu_seq_lens_q/k from seq_lengths)"
            )
        return
    if pos.dim() == 2 and int(cu[-1]) == pos.numel():
        flat = pos.reshape(-1)
        step = flat.diff() != 1
        starts = cu[1:-1].long()
        inside = torch.ones_like(step)
        inside[(starts - 1).clamp(min=0, max=max(step.numel() - 1, 0))] = False  # a segment start may restart
        bad = step & inside
        if bool(bad.any()):
            where = int(bad.nonzero()[0, 0]) + 1
            raise ValueError(
                f"position_ids restart at token {where} inside a segment of cu_seq_lens_q {cu.tolist()}: the "
                "boundaries do not match the documents, so documents in one segment would attend to each other. "
                "Build input_ids, position_ids and cu_seq_lens_q/k with one PackedDataCollator call"
            )
    if pos.dim() == 2 and pos.shape[0] == 1 and offset:
        starts = pos[0, cu[:-1].long().clamp(max=pos.shape[-1] - 1)]
        if bool((starts[cu.diff() > 0] != offset).any()):
            raise ValueError(
                f"documents start at position ids {sorted(set(starts.tolist()))} but this model's first position is "
                f"{offset} (RoBERTa-style: pad_token_id + 1); use PackedDataCollator(position_offset={offset})"
            )
