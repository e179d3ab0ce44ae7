"""Megatron-Energon: a task-encoder mixin whose packing hooks are packwise's planner and assembler.

Energon calls ``select_samples_to_pack(buffer)`` on a full packing buffer and then
``pack_selected_samples(group)`` per group. Energon does not check the returned partition — a selector
that leaves a sample out silently drops it — so this mixin proves every index is used exactly once, and
groups samples by a compatibility key (tokenizer/template fingerprint, modality) so incompatible samples
never share a pack. Plans use aligned costs (``packing_alignment``, see
``packwise.plan.alignment_multiple``); the pack and batch tensors come from ``packwise.assemble``.

Usage::

    class MyTaskEncoder(PackwiseTaskEncoderMixin, TaskEncoder[TextSample, TokenSample, dict, dict]):
        packing_capacity = 4096

        @stateless
        def preencode_sample(self, sample): ...   # -> an object with input_ids (and labels / loss_mask)

Samples in the buffer must expose ``input_ids`` (and optionally ``labels``, ``loss_mask``,
``position_ids`` and a ``packing_key``).
"""

from __future__ import annotations

from collections.abc import Hashable, Sequence
from dataclasses import dataclass

import numpy as np
import torch
from megatron.energon import Sample, stateless

from ..assemble import PackedSequence, assemble_pack, collate_packs
from ..plan import plan_packs

SEQUENCE_FIELDS = ("input_ids", "labels", "loss_mask", "position_ids")


@dataclass
class PackedSample(Sample):
    """An Energon sample holding one packwise pack and the keys of its members (in pack order)."""

    pack: PackedSequence
    keys: list


class PackwiseTaskEncoderMixin:
    """Mixin for ``megatron.energon.TaskEncoder`` (put it first in the bases).

    Class attributes (override in the subclass): ``packing_capacity`` (tokens per pack, required),
    ``packing_algorithm`` (default ``best_fit_decreasing``), ``packing_alignment`` (default 1),
    ``packing_seed`` (default 0), ``packing_algorithm_options`` (default ``{}``).
    """

    packing_capacity: int = 0
    packing_algorithm: str = "best_fit_decreasing"
    packing_alignment: int = 1
    packing_seed: int = 0
    packing_algorithm_options: dict = {}  # noqa: RUF012 - read-only default
    # -- h16: a PackingConfig, when set, supplies every packing_* setting and the conventions (labels,
    # fixed_width, layout, emit) of pack_selected_samples and batch: see PackingConfig.energon_settings().
    packing_config = None

    def _packwise(self) -> dict:
        cfg = self.packing_config
        if cfg is None:
            return {"plan": {"capacity": self.packing_capacity, "algorithm": self.packing_algorithm,
                             "seed": self.packing_seed, "alignment": self.packing_alignment,
                             **self.packing_algorithm_options},
                    "assemble": {"alignment": self.packing_alignment}, "collate": {}}  # fmt: skip
        return cfg.energon_settings()

    # -- end h16

    def packing_length(self, sample) -> int:
        """Tokens of a buffered sample (default ``len(sample.input_ids)``)."""
        return len(sample.input_ids)

    def packing_key(self, sample) -> Hashable:
        """Compatibility key; only samples with equal keys share a pack (default ``sample.packing_key``)."""
        return getattr(sample, "packing_key", None)

    def select_samples_to_pack(self, samples: list) -> list[list]:
        """Plan the buffer with packwise, per compatibility group; every sample is used exactly once.

        Raises:
            ValueError: ``packing_capacity`` not set, or a sample longer than the capacity (after alignment).
        """
        settings = self._packwise()["plan"]
        if not settings["capacity"]:
            raise ValueError(f"{type(self).__name__}.packing_capacity is not set (tokens per pack)")
        groups: dict[Hashable, list[int]] = {}
        for i, s in enumerate(samples):
            groups.setdefault(self.packing_key(s), []).append(i)
        out: list[list] = []
        used = np.zeros(len(samples), dtype=np.int64)
        for members in groups.values():
            lengths = np.asarray([self.packing_length(samples[i]) for i in members], dtype=np.int64)
            plan = plan_packs(lengths, **settings)
            for pack in plan.packs():
                idx = [members[j] for j in pack.tolist()]
                used[idx] += 1
                out.append([samples[i] for i in idx])
        if not (used == 1).all():  # an internal invariant: Energon would silently drop or repeat samples
            raise RuntimeError(f"packwise internal error: samples used {used.tolist()} times")
        return out

    @stateless
    def pack_selected_samples(self, samples: list) -> PackedSample:
        """One pack from a selected group, assembled by :func:`packwise.assemble.assemble_pack`."""
        seqs = [
            {f: _tensor(getattr(s, f)) for f in SEQUENCE_FIELDS if getattr(s, f, None) is not None} for s in samples
        ]
        pack = assemble_pack(seqs, **self._packwise()["assemble"])
        return PackedSample.derive_from(
            samples[0], __key__="+".join(str(s.__key__) for s in samples), __restore_key__=(), pack=pack,
            keys=[s.__key__ for s in samples],
        )  # fmt: skip

    def batch(self, samples: Sequence[PackedSample]) -> dict:
        """A ``layout="thd"`` batch (:func:`packwise.assemble.collate_packs`) plus the member ``keys``."""
        batch = collate_packs([s.pack for s in samples], **self._packwise()["collate"])
        batch["keys"] = [s.keys for s in samples]
        return batch


def _tensor(value) -> torch.Tensor:
    return value if isinstance(value, torch.Tensor) else torch.as_tensor(np.asarray(value))
