"""The components one :class:`packwise.PackingConfig` builds: planner, assembler, collator, stream, loader,
loss, CP sharding, Energon settings and Megatron ``PackedSeqParams``. Each method reads the fields that
configure its component and nothing else holds a default (``tests/config/test_build.py`` changes every
field in turn and checks that a built component's output changes)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Literal

if TYPE_CHECKING:
    from .assemble import PackedBatch


class ConfigBuilders:
    """Builder methods of :class:`packwise.PackingConfig` (mixed in; reads its fields)."""

    if TYPE_CHECKING:  # PackingConfig's fields and properties that the builders read (declared there)
        capacity: int
        algorithm: str
        algorithm_options: dict[str, Any]
        overflow: Literal["truncate", "split", "drop", "error"]
        topology: Any  # config.Topology, Emit, Consumer: config imports this module, not the other way
        layout: Literal["thd", "padded"]
        fixed_width: bool
        emit: Any
        labels: Literal["hf", "shifted"]
        loss_reduction: Literal["token_mean", "sequence_mean", "sum"]
        buffer_size: int | None
        consumer: Any
        seed: int | None
        max_sequences_per_pack: int | None
        max_segments: int | None
        min_packs: int | None
        pack_count_multiple: int | None

        @property
        def documents_per_pack(self) -> int | None: ...

        @property
        def resolved_alignment(self) -> int: ...

    # -- keyword arguments, for callers that build the component themselves ---------------------------
    def plan_kwargs(self) -> dict[str, Any]:
        """Keyword arguments for :func:`packwise.plan.plan_packs` (capacity, algorithm and its options,
        seed, alignment, pack limits). ``overflow`` is not among them: ``plan_packs`` takes lengths that fit
        ``capacity``; the stream (:meth:`stream`) and ``packwise pack`` apply ``overflow`` before planning.

        Example:
            >>> from packwise import PackingConfig
            >>> PackingConfig(capacity=64, topology={"cp": 2}).plan_kwargs()["alignment"]
            4
        """
        return {
            "capacity": self.capacity, "algorithm": self.algorithm, "seed": self.seed,
            "alignment": self.resolved_alignment, "max_sequences_per_pack": self.documents_per_pack,
            "min_packs": self.min_packs, "pack_count_multiple": self.pack_count_multiple, **self.algorithm_options,
        }  # fmt: skip

    def assemble_kwargs(self) -> dict[str, Any]:
        """Keyword arguments for :func:`packwise.assemble.assemble_pack`: ``alignment``, ``pad_to``
        (``capacity`` with ``fixed_width``), ``labels_shifted`` (``labels == "shifted"``).

        Example:
            >>> from packwise import PackingConfig
            >>> PackingConfig(capacity=8, labels="shifted", fixed_width=True).assemble_kwargs()
            {'alignment': 1, 'pad_to': 8, 'labels_shifted': True}
        """
        return {
            "alignment": self.resolved_alignment,
            "pad_to": self.capacity if self.fixed_width else None,
            "labels_shifted": self.labels == "shifted",
        }

    def collate_kwargs(self) -> dict[str, Any]:
        """Keyword arguments for :func:`packwise.assemble.collate_packs`: ``layout``, ``labels``,
        ``pack_width`` (``capacity`` with ``fixed_width``), ``emit``, ``mrope``, ``max_seqlen``, ``max_segments``.

        Example:
            >>> from packwise import PackingConfig
            >>> PackingConfig(emit={"seq_idx": False}).collate_kwargs()["emit"]
            ('position_ids', 'padding_mask')
        """
        return {
            "layout": self.layout,
            "labels": self.labels,
            "pack_width": self.capacity if self.fixed_width else None,
            "emit": tuple(name for name, on in self.emit.model_dump().items() if on),
            "mrope": self.consumer.mrope or None,
            "max_seqlen": self.consumer.max_seqlen,
            "max_segments": self.max_segments,
        }

    # -- components ------------------------------------------------------------------------------------
    def assemble(self, sequences):
        """One pack from the sequences of a plan's pack (:func:`packwise.assemble.assemble_pack`)."""
        from .assemble import assemble_pack

        return assemble_pack(sequences, **self.assemble_kwargs())

    def collator(self, **overrides):
        """A :class:`packwise.assemble.PackCollator` (packs -> batch): layout, label convention, fixed width,
        emitted fields, MRoPE, and the multi-token-prediction media guard. ``overrides``: other
        :func:`collate_packs` options (``pad_token_id``, ``pad_values``, ``pad_to_multiple_of``).

        Example:
            >>> from packwise import PackingConfig
            >>> from packwise.assemble import assemble_pack
            >>> cfg = PackingConfig(capacity=4, labels="shifted", emit={"padding_mask": False})
            >>> batch = cfg.collator()([cfg.assemble([{"input_ids": [1, 2, 3]}])])
            >>> batch["tokens"].tolist(), batch["labels"].tolist(), "padding_mask" in batch
            ([[1, 2, 3]], [[2, 3, -100]], False)
        """
        from .assemble import PackCollator

        options = {**self.collate_kwargs(), "multi_token_prediction": self.consumer.multi_token_prediction}
        return PackCollator(**{**options, **overrides})

    def data_collator(self, **overrides):
        """:class:`packwise.hf.PackedDataCollator` for ``transformers.Trainer`` / TRL (HF labels).

        Raises:
            ValueError: a setting the HF collator does not honour, named: ``labels="shifted"`` (HF models
                shift labels themselves), ``layout="padded"`` or ``fixed_width`` (the HF collator emits one
                tight THD row), an ``emit`` field turned off (it always emits them), ``loss_reduction`` other
                than ``token_mean`` (the Trainer's loss), ``consumer.multi_token_prediction`` (Megatron-only).
                ``consumer.mrope=True`` gives text-only batches MRoPE positions too (Qwen-VL's packed
                ``[4, 1, T]``, four equal rows), as the data's MRoPE batches have.
        """
        why = {
            "labels": (self.labels == "shifted", "HF models shift the labels themselves"),
            "layout": (self.layout == "padded", "the HF collator emits one THD row"),
            "fixed_width": (self.fixed_width, "the HF collator emits one tight THD row"),
            "loss_reduction": (self.loss_reduction != "token_mean", "the Trainer computes its own token-mean loss"),
            "consumer.multi_token_prediction": (self.consumer.multi_token_prediction, "MTP is a Megatron layer"),
            "consumer.max_seqlen": (self.consumer.max_seqlen != "int", "HF attention reads max_length_q as an int"),
            **{f"emit.{k}": (not v, "the HF collator always emits it") for k, v in self.emit.model_dump().items()},
        }
        for key, (bad, reason) in why.items():
            if bad:
                got = self
                for part in key.split("."):
                    got = getattr(got, part)
                raise ValueError(
                    f"{key}={got!r} does not fit the HF data collator ({reason}); use the default for HF "
                    "Trainer / TRL, or PackingConfig.collator() for Megatron-style batches"
                )
        from .hf import PackedDataCollator

        collator = PackedDataCollator(alignment=self.resolved_alignment, max_segments=self.max_segments, **overrides)
        return _MRoPEDataCollator(collator) if self.consumer.mrope else collator

    def stream(self, source, **overrides):
        """A :class:`packwise.stream.PackingStream` over ``source`` (``buffer_size`` samples a window).

        Raises:
            ValueError: ``buffer_size`` is None (set it: streaming needs a window).
        """
        if self.buffer_size is None:
            raise ValueError("PackingConfig.stream() needs buffer_size (samples per window); set buffer_size")
        from .stream import PackingStream

        kwargs = {
            "capacity": self.capacity, "buffer_size": self.buffer_size, "algorithm": self.algorithm,
            "seed": 0 if self.seed is None else self.seed, "overflow": self.overflow,
            "multi_token_prediction": self.consumer.multi_token_prediction,
            **{k: v for k, v in self.assemble_kwargs().items()}, "max_segments": self.max_segments,
            **self.algorithm_options,
        }  # fmt: skip
        if self.max_sequences_per_pack is not None:
            raise ValueError(
                f"max_sequences_per_pack={self.max_sequences_per_pack} is not supported by PackingStream "
                "(buffer_size); pack offline or drop max_sequences_per_pack"
            )
        kwargs.update(overrides)
        return PackingStream(source, **kwargs)

    def loader(self, source, *, batch_size: int = 1, **overrides):
        """A :class:`packwise.stream.PackingLoader` over :meth:`stream` that collates with :meth:`collator`."""
        from .stream import PackingLoader

        if self.max_segments is not None and self.layout == "thd" and batch_size > 1:
            raise ValueError(
                f"max_segments={self.max_segments} with layout='thd' and batch_size={batch_size}: one THD row of "
                f"{batch_size} packs holds up to {batch_size * self.max_segments} segments; use batch_size=1 or "
                "layout='padded' (max_segments per row)"
            )
        return PackingLoader(self.stream(source), batch_size=batch_size, collate_fn=self.collator(), **overrides)

    def loss(self):
        """A :class:`packwise.loss.PackedLoss` with ``loss_reduction`` and ``topology.cp``."""
        from .loss import PackedLoss

        return PackedLoss(reduction=self.loss_reduction, cp_size=self.topology.cp, labels=self.labels)

    def shard(self, batch: PackedBatch, *, cp_rank: int) -> PackedBatch:
        """Rank ``cp_rank``'s share of a batch (:func:`shard_for_context_parallel` with ``topology.cp``)."""
        from .assemble import shard_for_context_parallel

        return shard_for_context_parallel(batch, cp_size=self.topology.cp, cp_rank=cp_rank)

    def packed_seq_params(self, batch):
        """megatron-core ``PackedSeqParams`` of a THD batch (:func:`to_packed_seq_params`); with
        ``consumer.multi_token_prediction`` the layout MTP's ``roll_tensor`` rolls correctly."""
        from .assemble import to_packed_seq_params

        return to_packed_seq_params(batch, multi_token_prediction=self.consumer.multi_token_prediction)

    def energon_settings(self) -> dict[str, Any]:
        """What ``PackwiseTaskEncoderMixin(packing_config=cfg)`` uses: ``plan`` (:func:`plan_packs`
        kwargs), ``assemble``, ``collate``, ``overflow`` (applied per sample, media-safe), and ``dataset``
        (``packing_buffer_size`` for Energon's ``get_train_dataset``).

        Example:
            >>> from packwise import PackingConfig
            >>> PackingConfig(buffer_size=64, overflow="error").energon_settings()["dataset"]
            {'packing_buffer_size': 64}

        Raises:
            ValueError: ``buffer_size`` is None (Energon's packing needs a buffer), or
                ``consumer.multi_token_prediction=True``: the mixin's batch carries the real ``cu_seqlens``, and
                ``to_packed_seq_params(batch)`` on it would let MTP's ``roll_tensor`` roll a document's first token
                into the previous document's padding (only ``cfg.packed_seq_params(batch)`` knows the flag).
        """
        if self.buffer_size is None:
            raise ValueError(
                "buffer_size=None: Energon packs from a buffer of samples (get_train_dataset packing_buffer_size); "
                "set buffer_size"
            )
        if self.consumer.multi_token_prediction:
            raise ValueError(
                f"consumer.multi_token_prediction=True with Energon packing (buffer_size={self.buffer_size}) is not "
                "supported: the Energon batch carries no MTP flag, so to_packed_seq_params(batch) would give MTP's "
                "roll_tensor the real cu_seqlens and roll each document's first token into the previous document's "
                "padding; pack with PackingStream / PackCollator and build PackedSeqParams with "
                "cfg.packed_seq_params(batch), or set consumer.multi_token_prediction=False"
            )
        plan = self.plan_kwargs()
        plan["seed"] = 0 if plan["seed"] is None else plan["seed"]
        return {
            "plan": plan,
            "assemble": self.assemble_kwargs(),
            "collate": self.collate_kwargs(),
            "overflow": self.overflow,
            "dataset": {"packing_buffer_size": self.buffer_size},
        }


class _MRoPEDataCollator:
    """The HF data collator with ``consumer.mrope=True``: a text-only batch's ``position_ids [1, T]`` become
    Qwen-VL's packed MRoPE form ``[4, 1, T]`` (row 0 the text positions, rows 1-3 the same for text)."""

    def __init__(self, inner) -> None:
        self.inner = inner

    def __getattr__(self, name):
        return getattr(self.inner, name)

    def __call__(self, features):
        batch = self.inner(features)
        pos = batch["position_ids"]
        if pos.dim() == 2:
            batch["position_ids"] = pos.unsqueeze(0).expand(4, -1, -1).contiguous()
        return batch
