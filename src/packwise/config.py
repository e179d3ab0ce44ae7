"""``PackingConfig``: every pipeline option in one validated, frozen place (pydantic v2, extra ``config``).

Two settings that disagree must fail when the config is built — a second at setup — not at the first
forward of a 30 B job. Each rule below names both keys, their values and the fix.

Rules (and why):

1. ``consumer.mrope`` or ``consumer.multi_token_prediction`` with ``emit.position_ids=False``: MRoPE and MTP
   consumers read position ids; without them every sequence after the first gets wrong positions.
2. ``topology.cp > 1`` with an ``alignment`` not divisible by ``2·cp``: the zigzag split cuts every
   sequence into ``2·cp`` chunks; Transformer Engine silently rounds other lengths down (TE #1929).
3. ``topology.sequence_parallel`` with ``tp > 1`` and an ``alignment`` not divisible by ``tp·cp``: the
   sequence dimension is sharded over tensor-parallel ranks.
4. ``topology.fp8`` with an ``alignment`` not divisible by 16: FP8 GEMMs need multiples of 16 tokens.
5. ``fixed_width`` with a ``capacity`` not divisible by the ``alignment``: a fixed-width pack is padded to
   the capacity, which must itself be aligned.
6. ``topology.pp > 1`` without ``fixed_width``: pipeline stages exchange fixed ``[b, s]`` buffers, so every
   micro-batch must have the same length.
7. ``algorithm_options`` an algorithm does not take, or ``delta < 0`` for ``balanced_greedy_knapsack``.
8. ``max_sequences_per_pack < 1``.
9. ``min_packs`` or ``pack_count_multiple`` with streaming (``buffer_size`` set): a stream cannot know the
   final pack count in advance.
10. ``layout="padded"`` with ``consumer.varlen_only``: varlen kernels (flash-attn varlen, TE THD) take one
    THD row, not ``[P, S]`` rows.
11. (removed: ``consumer.multi_token_prediction`` with ``alignment > 1`` is correct by construction —
    :meth:`packed_seq_params` gives MTP's ``roll_tensor`` the physical boundaries; see below.)
12. ``consumer.multi_token_prediction`` with ``consumer.mrope`` (multimodal): MTP layers embed the rolled
    token ids and never see the spliced image embeddings (upstream Megatron-LM lacks that path, #7253).
13. ``topology.cp > 1`` with ``loss_reduction="sequence_mean"``: each CP rank holds part of every document
    and cannot form a document's mean; the ranks' means do not sum to the unsharded loss.
14. ``topology.cp > 1`` with ``layout="padded"``: the zigzag split and Transformer Engine's THD context
    parallelism take one THD row.
15. ``emit.position_ids=False`` without ``consumer.varlen_only``: only a THD consumer (Megatron RoPE with
    ``PackedSeqParams``) rebuilds positions from ``cu_seqlens``; an HF model counts 0..T-1 over the whole
    pack, so every document after the first gets wrong positions.
16. alignment (set or derived) > ``capacity``: no aligned sequence fits a pack.
17. ``consumer.multi_token_prediction`` or ``topology.pp > 1`` with ``labels="hf"``: Megatron-only consumers
    read shifted labels and ``loss_mask``.
18. ``alignment``, ``topology.*``, ``buffer_size``, ``max_sequences_per_pack``, ``max_segments``, ``seed``,
    ``min_packs``, ``pack_count_multiple`` and ``multimodal.min_pixels/max_pixels`` are strict integers (``True``
    and ``"8"`` are refused, like ``capacity``). ``model_copy(update=...)`` re-validates every rule.
19. ``max_segments=1`` with ``fixed_width``: a fixed-width pack's tail padding is a segment, leaving no room
    for a document (``max_segments`` counts documents plus padding segments: see ``packwise.assemble._static``).

Correct by construction (not refused): context parallelism with ``labels="hf"`` — the sharder shifts the
labels within each document before the zigzag split (``shard_for_context_parallel``); multi-token
prediction with ``alignment > 1`` — ``cfg.packed_seq_params(batch)`` sets ``cu_seqlens_q/kv`` to the
physical boundaries, so Megatron's ``roll_tensor`` rolls each document inside its padded segment (with the
real boundaries it mixes documents: measured in tests/megatron).
The components are built from the config: ``cfg.collator()``, ``cfg.stream(source)``, ``cfg.loss()``, ...
(see :class:`packwise._build.ConfigBuilders`).

Example:
    >>> cfg = PackingConfig(capacity=8192, topology={"tp": 4, "cp": 2, "sequence_parallel": True})
    >>> cfg.resolved_alignment
    8
    >>> PackingConfig(capacity=4096, topology={"pp": 2})
    Traceback (most recent call last):
    ...
    pydantic_core._pydantic_core.ValidationError: 1 validation error for PackingConfig
      Value error, topology.pp=2 needs fixed_width=True (got fixed_width=False): ...
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator

from ._build import ConfigBuilders
from ._config_files import _config_error, _merge, read_config_file
from .constants import MediaFamily
from .plan import ALGORITHM_OPTIONS, MAX_CAPACITY, alignment_multiple, check_algorithm_options, resolve_algorithm


class _Frozen(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")


class Topology(_Frozen):
    """Parallelism of the consumer: tensor, context and pipeline parallel sizes, sequence parallel, FP8.

    The topology sets the default per-sequence alignment of :class:`PackingConfig` (``alignment=None``).

    Example:
        >>> from packwise.config import PackingConfig, Topology
        >>> PackingConfig(topology=Topology(cp=2)).resolved_alignment  # 2·cp: CP splits each sequence in 2·cp
        4
        >>> PackingConfig(topology={"tp": 2, "sequence_parallel": True}).resolved_alignment
        2
    """

    tp: int = Field(1, ge=1, strict=True)
    cp: int = Field(1, ge=1, strict=True)
    pp: int = Field(1, ge=1, strict=True)
    sequence_parallel: bool = False
    fp8: bool = False


class Emit(_Frozen):
    """Which optional fields the assembler emits."""

    position_ids: bool = True
    padding_mask: bool = True
    seq_idx: bool = True


class Consumer(_Frozen):
    """What the model needs: MRoPE positions, multi-token prediction, THD-only (varlen) kernels."""

    mrope: bool = False
    multi_token_prediction: bool = False
    varlen_only: bool = False
    #: ``max_seqlen``/``max_length_q/k`` in batches as Python ints (HF, megatron-core ``PackedSeqParams``) or as
    #: 0-d int32 tensors (Megatron-LM's ``get_batch_on_this_tp_rank`` broadcasts batch values as tensors).
    max_seqlen: Literal["int", "tensor"] = "int"


class Multimodal(_Frozen):
    """Image sizing bounds (Qwen2-VL ``smart_resize``) and the media root images must be inside."""

    min_pixels: int = Field(56 * 56, ge=1, strict=True)
    max_pixels: int = Field(28 * 28 * 16384, ge=1, strict=True)
    media_root: str | None = None  # images must be inside it; None: the input file's folder
    media_family: MediaFamily = "qwen2.5-vl"  # the model family whose media encoding is written

    @model_validator(mode="after")
    def _bounds(self) -> Multimodal:
        if self.min_pixels > self.max_pixels:
            raise ValueError(
                f"multimodal.min_pixels={self.min_pixels} is above multimodal.max_pixels={self.max_pixels}; swap them"
            )
        return self


class PackingConfig(ConfigBuilders, _Frozen):
    """Every packwise pipeline option, validated at construction (see the module docstring for the rules).

    Attributes:
        capacity: tokens per pack.
        algorithm: planner name or alias; ``algorithm_options`` its options (e.g. ``{"delta": 5}``).
        overflow: ``truncate`` | ``split`` | ``drop`` | ``error``.
        topology: parallel sizes (a dict is accepted).
        alignment: per-sequence alignment in tokens; None = derived from the topology.
        layout: ``thd`` (one row) or ``padded`` (``[P, S]``) — read by :meth:`collator`.
        fixed_width: pad every pack to ``capacity`` (pipeline parallelism, CUDA graphs) — :meth:`assemble`,
            :meth:`stream`, :meth:`collator`.
        emit: optional fields to emit — :meth:`collator`; ``labels``: the *output* convention, ``hf`` (unshifted)
            or ``shifted`` (Megatron: shifted labels, ``loss_mask``, ``tokens``) — assembler, stream,
            collator, loss, Energon. Input rows declare their own convention by their fields (docs/megatron.md).
        loss_reduction: ``token_mean`` | ``sequence_mean`` | ``sum`` — :meth:`loss` (``packwise.loss``).
        buffer_size: streaming window in samples (None = offline, whole dataset) — :meth:`stream`, Energon.
        consumer: what the model needs (MRoPE -> :meth:`collator`; MTP -> rules and the collator's media
            guard; ``varlen_only`` -> rules); ``multimodal``: image sizing (offline pipeline).

        max_segments: static shapes for ``torch.compile`` / CUDA graphs: every batch's ``cu_seqlens`` gets exactly
            ``max_segments + 1`` entries (:meth:`collator`, :meth:`data_collator`) and no pack is planned with
            more segments (:meth:`plan_kwargs`, :meth:`stream`, ``packwise pack``: at most ``max_segments``
            documents, one fewer with ``fixed_width``, whose tail padding is a segment).
        tokenizer, chat_template, loss_on, seed, max_sequences_per_pack, min_packs, pack_count_multiple,
        skip_bad_rows, drop_fields (``--drop-field``): as in ``packwise pack``.

    Builders (see :class:`packwise._build.ConfigBuilders`): ``plan_kwargs``, ``assemble_kwargs``,
    ``collate_kwargs``, ``pipeline_kwargs``, ``assemble``, ``collator``, ``data_collator``, ``stream``,
    ``loader``, ``loss``, ``shard``, ``packed_seq_params``, ``energon_settings``.

    Raises:
        pydantic.ValidationError (a ``ValueError``): a value out of range or rules that contradict each
        other, naming the field, the value and the fix.

    Example:
        >>> from packwise import PackingConfig
        >>> cfg = PackingConfig(capacity=16, overflow="split", algorithm="ffd")
        >>> cfg.algorithm, cfg.plan_kwargs()["capacity"]
        ('first_fit_decreasing', 16)
        >>> try:
        ...     PackingConfig(capacity=0)
        ... except ValueError as e:
        ...     print(type(e).__name__, e.errors()[0]["loc"])
        ValidationError ('capacity',)
    """

    capacity: int = Field(4096, ge=1, le=MAX_CAPACITY, strict=True)
    algorithm: str = "best_fit_decreasing"
    algorithm_options: dict[str, Any] = Field(default_factory=dict)
    overflow: Literal["truncate", "split", "drop", "error"] = "truncate"
    topology: Topology = Field(default_factory=Topology)
    alignment: int | None = Field(None, ge=1, strict=True)
    layout: Literal["thd", "padded"] = "thd"
    fixed_width: bool = False
    emit: Emit = Field(default_factory=Emit)
    labels: Literal["hf", "shifted"] = "hf"
    loss_reduction: Literal["token_mean", "sequence_mean", "sum"] = "token_mean"
    buffer_size: int | None = Field(None, ge=1, strict=True)
    consumer: Consumer = Field(default_factory=Consumer)
    multimodal: Multimodal = Field(default_factory=Multimodal)
    tokenizer: str | None = None
    chat_template: str | None = None
    loss_on: Literal["assistant", "all"] = "assistant"
    seed: int | None = Field(None, ge=0, strict=True)
    max_sequences_per_pack: int | None = Field(None, strict=True)
    max_segments: int | None = Field(None, ge=1, strict=True)
    min_packs: int | None = Field(None, ge=0, strict=True)
    pack_count_multiple: int | None = Field(None, ge=1, strict=True)
    skip_bad_rows: bool = False
    drop_fields: list[str] = Field(default_factory=list)

    @field_validator("algorithm")
    @classmethod
    def _algorithm(cls, v: str) -> str:
        return resolve_algorithm(v)

    @field_validator("max_sequences_per_pack")
    @classmethod
    def _max_seqs(cls, v: int | None) -> int | None:
        if v is not None and v < 1:
            raise ValueError(f"max_sequences_per_pack={v} must be >= 1 (or None for no limit)")
        return v

    @property
    def documents_per_pack(self) -> int | None:
        """The planner's document limit: ``max_sequences_per_pack`` and what ``max_segments`` leaves (one fewer
        with ``fixed_width``), the smaller; None when neither is set."""
        caps = [self.max_sequences_per_pack]
        if self.max_segments is not None:
            caps.append(self.max_segments - (1 if self.fixed_width else 0))
        limits = [c for c in caps if c is not None]
        return min(limits) if limits else None

    @property
    def resolved_alignment(self) -> int:
        """The alignment in tokens: ``alignment`` if set, else derived from ``topology``."""
        if self.alignment is not None:
            return self.alignment
        t = self.topology
        return alignment_multiple(tp=t.tp, cp=t.cp, sequence_parallel=t.sequence_parallel, fp8=t.fp8)

    @model_validator(mode="after")
    def _rules(self) -> PackingConfig:
        t, a, c = self.topology, self.resolved_alignment, self.consumer
        needs_pos = (
            "consumer.mrope" if c.mrope else "consumer.multi_token_prediction" if c.multi_token_prediction else ""
        )
        if needs_pos and not self.emit.position_ids:
            raise ValueError(
                f"{needs_pos}=True needs emit.position_ids=True (got False): the consumer reads position ids; "
                "set emit.position_ids: true"
            )
        if t.cp > 1 and a % (2 * t.cp):
            raise ValueError(
                f"topology.cp={t.cp} needs alignment divisible by 2*cp={2 * t.cp} (got alignment={a}); "
                f"set alignment to a multiple of {2 * t.cp} or leave it unset to derive it"
            )
        if t.sequence_parallel and t.tp > 1 and a % (t.tp * t.cp):
            raise ValueError(
                f"topology.sequence_parallel=True with tp={t.tp} needs alignment divisible by tp*cp={t.tp * t.cp} "
                f"(got alignment={a}); leave alignment unset to derive it"
            )
        if t.fp8 and a % 16:
            raise ValueError(
                f"topology.fp8=True needs alignment divisible by 16 (got alignment={a}); use a multiple of 16"
            )
        if self.fixed_width and self.capacity % a:
            raise ValueError(
                f"fixed_width=True needs capacity divisible by alignment={a} (got capacity={self.capacity}); "
                f"use capacity={self.capacity // a * a or a}"
            )
        if self.max_segments == 1 and self.fixed_width:
            raise ValueError(
                "max_segments=1 with fixed_width=True: the tail padding of a fixed-width pack is a segment, leaving "
                "no room for a document; use max_segments >= 2"
            )
        if t.pp > 1 and not self.fixed_width:
            raise ValueError(
                f"topology.pp={t.pp} needs fixed_width=True (got fixed_width=False): pipeline stages exchange "
                "fixed-size buffers; set fixed_width: true"
            )
        try:
            check_algorithm_options(self.algorithm, self.algorithm_options)
        except (TypeError, ValueError) as e:
            takes = sorted(ALGORITHM_OPTIONS[self.algorithm]) or "no options"
            raise ValueError(
                f"algorithm_options={self.algorithm_options} do not fit algorithm={self.algorithm!r} ({e}); "
                f"it takes {takes}"
            ) from None
        if self.buffer_size is not None and (self.min_packs is not None or self.pack_count_multiple is not None):
            key = "min_packs" if self.min_packs is not None else "pack_count_multiple"
            raise ValueError(
                f"{key}={getattr(self, key)} cannot be combined with buffer_size={self.buffer_size} (streaming): a "
                "stream does not know its final pack count; drop one of them"
            )
        if self.layout == "padded" and c.varlen_only:
            raise ValueError(
                "layout='padded' cannot feed consumer.varlen_only=True: varlen kernels take one THD row; "
                "set layout: thd"
            )
        self._megatron_rules(t, c)
        return self

    def _megatron_rules(self, t: Topology, c: Consumer) -> None:
        a = self.resolved_alignment
        if a > self.capacity:
            src = f"alignment={a}" if self.alignment is not None else f"alignment={a} (derived from topology)"
            raise ValueError(
                f"{src} exceeds capacity={self.capacity}: no sequence fits a pack; raise capacity to a multiple of "
                f"{a} or lower the topology"
            )
        for key, on in (
            ("consumer.multi_token_prediction=True", c.multi_token_prediction),
            (f"topology.pp={t.pp}", t.pp > 1),
        ):
            if on and self.labels == "hf":
                raise ValueError(
                    f"{key} is a Megatron setting but labels='hf' (unshifted, for HF models): Megatron's "
                    "GPTModel and pipeline stages read shifted labels and loss_mask; set labels: shifted"
                )
        if c.multi_token_prediction and c.mrope:
            raise ValueError(
                "consumer.multi_token_prediction=True cannot be combined with consumer.mrope=True (multimodal): "
                "MTP layers embed token ids, not the image embeddings (Megatron-LM #7253); turn one off"
            )
        if t.cp > 1 and self.loss_reduction == "sequence_mean":
            raise ValueError(
                f"topology.cp={t.cp} cannot be combined with loss_reduction='sequence_mean': a CP rank holds part of "
                "every document and cannot form its mean; use loss_reduction: token_mean"
            )
        if t.cp > 1 and self.layout == "padded":
            raise ValueError(
                f"topology.cp={t.cp} needs layout='thd' (got layout='padded'): context parallelism splits one THD "
                "row; set layout: thd"
            )
        if not self.emit.position_ids and not c.varlen_only:
            raise ValueError(
                "emit.position_ids=False needs consumer.varlen_only=True (got False): only a THD consumer "
                "rebuilds positions from cu_seqlens; an HF model counts positions over the whole pack"
            )

    def model_copy(self, *, update: Mapping[str, Any] | None = None, deep: bool = False) -> PackingConfig:
        """A copy with ``update`` applied, validated like a new config (pydantic's ``model_copy`` skips every
        rule; nested sections may be given as dicts, merged into the current ones).

        Example:
            >>> PackingConfig(capacity=64).model_copy(update={"topology": {"cp": 2}}).resolved_alignment
            4
        """
        data = self.model_dump()
        for key, value in (update or {}).items():
            if isinstance(value, BaseModel):
                value = value.model_dump()
            data[key] = {**data[key], **value} if isinstance(value, dict) and isinstance(data.get(key), dict) else value
        return type(self).model_validate(data)

    # -- loading and showing ----------------------------------------------------------------------------
    @classmethod
    def from_file(cls, path, **overrides) -> PackingConfig:
        """Load a ``.yaml``/``.yml``/``.toml``/``.json`` file; ``overrides`` (e.g. CLI flags) win.

        Raises:
            ValueError: the file is missing or unreadable, an unknown extension, or a rule is broken.
        """
        p = Path(path)
        data = read_config_file(p)
        try:
            return cls(**_merge(data, overrides))
        except ValidationError as e:
            raise _config_error(p, e, cls) from None

    def resolved(self) -> dict:
        """The config as a plain dict with the derived alignment filled in."""
        out = self.model_dump()
        out["alignment"] = self.resolved_alignment
        return out

    def pack_unapplied(self) -> list[str]:
        """The keys set away from their defaults that ``packwise pack`` does not apply: pack writes unshifted HF
        packs of at most ``capacity`` tokens, offline; ``labels``, ``fixed_width``, ``layout``, ``emit``,
        ``loss_reduction``, ``buffer_size``, ``consumer`` and ``topology.pp`` configure the loaders, collators
        and losses that read the packs (``cfg.collator()``, ``cfg.loader()``, ...), never the files. ``pack``
        refuses a config holding them (naming each) rather than ignore them.

        Example:
            >>> PackingConfig(labels="shifted", fixed_width=True, topology={"pp": 2}).pack_unapplied()
            ['fixed_width=True', "labels='shifted'", 'topology.pp=2']
            >>> PackingConfig(capacity=64, topology={"cp": 2}).pack_unapplied()  # cp: applied as the alignment
            []
        """
        default = type(self)()
        out = []
        for key in ("labels", "fixed_width", "layout", "loss_reduction", "buffer_size"):
            if getattr(self, key) != getattr(default, key):
                out.append(f"{key}={getattr(self, key)!r}")
        for section in ("emit", "consumer"):
            mine, base = getattr(self, section), getattr(default, section)
            out += [f"{section}.{k}={v!r}" for k, v in mine.model_dump().items() if v != getattr(base, k)]
        if self.topology.pp != 1:
            out.append(f"topology.pp={self.topology.pp}")
        return sorted(out)

    def pipeline_kwargs(self) -> dict:
        """Keyword arguments for :func:`packwise.pipeline.pack_columns`."""
        from .multimodal import VisionSpec

        return {
            "capacity": self.capacity,
            "tokenizer": self.tokenizer,
            "algorithm": self.algorithm,
            "seed": self.seed,
            "overflow": self.overflow,
            "loss_on": self.loss_on,
            "chat_template": self.chat_template,
            "skip_bad_rows": self.skip_bad_rows,
            "max_sequences_per_pack": self.documents_per_pack,
            "min_packs": self.min_packs,
            "pack_count_multiple": self.pack_count_multiple,
            "alignment": self.resolved_alignment,
            "vision": VisionSpec(
                min_pixels=self.multimodal.min_pixels,
                max_pixels=self.multimodal.max_pixels,
                media_root=self.multimodal.media_root,
                media_family=self.multimodal.media_family,
            ),
            **({"algorithm_options": self.algorithm_options} if self.algorithm_options else {}),
            **({"drop_fields": tuple(self.drop_fields)} if self.drop_fields else {}),
        }


__all__ = ["PackingConfig", "Topology"]
