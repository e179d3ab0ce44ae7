"""Megatron-Energon: a task-encoder mixin whose packing hooks are packwise's planner and assembler.

Energon calls ``select_samples_to_pack(buffer)`` on a full packing buffer and then
``pack_selected_samples(group)`` per group (and again, on the restored members, for ``restore_sample`` and
after a loader-state restore). Energon does not check the returned partition — a selector that leaves a
sample out silently drops it — so this mixin proves every index is used exactly once, and groups samples by
a compatibility key (tokenizer/template fingerprint) so incompatible samples never share a pack. Plans use
aligned costs (``packing_alignment``, see ``packwise.plan.alignment_multiple``); the pack and batch tensors
come from ``packwise.assemble``.

Media: a buffered sample may carry images (``pixel_values``, ``image_grid_thw``), videos
(``pixel_values_videos``, ``video_grid_thw``, ``second_per_grid_ts``), audio clips (``input_features``,
``feature_attention_mask``) and per-token columns (``mm_token_type_ids`` and ``packing_columns``); all of
them reach the batch. A text-only sample packed with image samples gets ``mm_token_type_ids`` of zeros, and
``collate_packs`` fills a column batch-wide, so pack order never turns a per-token column into a list.

Overflow (``packing_overflow``, as the offline pipeline): ``truncate`` (default) keeps the head, ``split``
cuts into pieces (each piece is its own pack), ``drop`` removes the sample, ``error`` raises. A cut never
falls inside an image/video/audio span (see ``_overflow``). Every change is counted per pack
(``batch["packing_counts"]``) and per worker (``encoder.packing_counts``). The decision is a pure function
of the sample, made again by ``pack_selected_samples``, so ``restore_sample`` and loader-state restore
rebuild identical packs. Energon's error handler logs and *drops* the buffer on an exception; every
exception here is re-raised as Energon's ``FatalSampleError``, which the handler does not swallow.

Usage::

    class MyTaskEncoder(PackwiseTaskEncoderMixin, TaskEncoder[TextSample, TokenSample, dict, dict]):
        packing_capacity = 4096

        @stateless
        def preencode_sample(self, sample): ...   # -> an object with input_ids (and labels / loss_mask)

Samples in the buffer must expose ``input_ids`` (and optionally ``labels``, ``loss_mask``,
``position_ids``, media fields and a ``packing_key``). TRL's ``completion_mask`` / ``assistant_masks`` are read as
``loss_mask`` (as ``pack_dataset`` reads them); next to ``labels`` or ``loss_mask`` they are refused. Do the
tokenizing in ``preencode_sample``; with
megatron-energon 7.4.1 an overridden ``postencode_sample`` makes ``restore_sample`` fail (its
``PackingDataset.restore_sample`` unpacks a post-encoded member's key twice). Known Energon 7.4.1 issue: with
``repeat=False``, a shuffle buffer and more than one worker, a restored loader replays a worker's epoch (any
packer; training runs use ``repeat=True``, which restores exactly).
"""

from __future__ import annotations

import warnings
from collections.abc import Hashable, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import torch
from megatron.energon import Sample, stateless
from megatron.energon.errors import FatalSampleError

from ...assemble import MEDIA_KEYS, PackedSequence, as_int, assemble_pack, collate_packs
from ...pipeline import TRL_MASKS, Overflow, cut_points
from ...plan import plan_packs
from ._overflow import (
    boundary_target,
    check_media,
    loss_tokens,
    media_spans,
    piece_group,
    slice_sample,
    trl_loss_mask,
    zero_counts,
)

SEQUENCE_FIELDS = ("input_ids", "labels", "loss_mask", "position_ids")
#: Qwen2.5-VL / Qwen2.5-Omni placeholder token ids and span markers (vision start/end, audio bos/eos).
QWEN_MEDIA_TOKENS = {"image": 151655, "video": 151656, "audio": 151646}
QWEN_MEDIA_BOUNDS = (151652, 151653, 151647, 151648)


@dataclass
class PackedSample(Sample):
    """An Energon sample holding one packwise pack, the keys of its members (in pack order) and the overflow
    counts of its members (``packing_counts``)."""

    pack: PackedSequence
    keys: list
    packing_counts: dict = field(default_factory=zero_counts)


class PackwiseTaskEncoderMixin:
    """Mixin for ``megatron.energon.TaskEncoder`` (put it first in the bases).

    Class attributes (override in the subclass): ``packing_capacity`` (tokens per pack, required),
    ``packing_algorithm`` (default ``best_fit_decreasing``), ``packing_alignment`` (default 1),
    ``packing_seed`` (default 0), ``packing_algorithm_options`` (default ``{}``), ``packing_overflow``
    (``truncate`` | ``split`` | ``drop`` | ``error``, default ``truncate``), ``packing_columns`` (per-token
    columns carried besides ``mm_token_type_ids``), ``packing_media_tokens`` / ``packing_media_bounds``
    (placeholder and marker token ids; Qwen2.5 defaults), ``packing_merge_size`` (vision tokens per
    ``merge²`` patches, 2).

    ``packing_counts`` (per process: the worker's own encoder copy) sums ``buffers``, ``samples``, ``packs``
    and the overflow counts; every batch carries the counts of its own packs in ``batch["packing_counts"]``.

    Example:
        >>> from dataclasses import dataclass
        >>> import torch
        >>> from megatron.energon import Sample, TaskEncoder
        >>> from packwise.integrations.energon import PackwiseTaskEncoderMixin
        >>> @dataclass
        ... class Tokens(Sample):
        ...     input_ids: torch.Tensor
        >>> class Encoder(PackwiseTaskEncoderMixin, TaskEncoder):
        ...     packing_capacity = 8
        >>> enc = Encoder()
        >>> buffer = [Tokens(__key__=str(i), __restore_key__=(), __subflavors__={}, input_ids=torch.arange(n))
        ...           for i, n in enumerate((3, 5, 2))]
        >>> groups = enc.select_samples_to_pack(buffer)  # best fit decreasing: 5 + 3 | 2
        >>> sorted(sorted(s.__key__ for s in g) for g in groups)
        [['0', '1'], ['2']]
        >>> batch = enc.batch([p for g in groups for p in enc.pack_selected_samples(g)])
        >>> batch["input_ids"].shape, batch["cu_seqlens"].tolist()
        (torch.Size([1, 10]), [0, 5, 8, 10])
    """

    packing_capacity: int = 0
    packing_algorithm: str = "best_fit_decreasing"
    packing_alignment: int = 1
    packing_seed: int = 0
    packing_algorithm_options: dict = {}  # noqa: RUF012 - read-only default
    packing_overflow: str = "truncate"
    packing_columns: tuple = ()
    packing_media_tokens: dict = QWEN_MEDIA_TOKENS
    packing_media_bounds: tuple = QWEN_MEDIA_BOUNDS
    packing_merge_size: int = 2
    #: A :class:`packwise.PackingConfig`; when set it supplies capacity, algorithm, seed, alignment, overflow and
    #: the conventions (labels, fixed width, layout, emitted fields) of packs and batches: see
    #: ``PackingConfig.energon_settings()``. The ``packing_*`` attributes above are then not read.
    packing_config = None

    def _packwise(self) -> dict:
        """``plan`` (:func:`plan_packs` kwargs), ``assemble``, ``collate`` settings and the ``overflow`` policy."""
        cfg = self.packing_config
        if cfg is None:
            return {"plan": {"capacity": self.packing_capacity, "algorithm": self.packing_algorithm,
                             "seed": self.packing_seed, "alignment": self.packing_alignment,
                             **self.packing_algorithm_options},
                    "assemble": {"alignment": self.packing_alignment}, "collate": {},
                    "overflow": self.packing_overflow}  # fmt: skip
        return cfg.energon_settings()

    @property
    def packing_counts(self) -> dict:
        counts = self.__dict__.get("_packwise_counts")
        if counts is None:
            counts = self.__dict__["_packwise_counts"] = {"buffers": 0, "samples": 0, "packs": 0, **zero_counts()}
        return counts

    def packing_length(self, sample) -> int:
        """Tokens of a buffered sample (default ``len(sample.input_ids)``); an override may over-report (wasted
        room) but never under-report the tokens of ``input_ids`` (a ``FatalSampleError`` names the sample)."""
        return len(sample.input_ids)

    def _length(self, sample, fields: dict | None = None) -> int:
        """``packing_length(sample)``, checked against the tokens the pack will hold."""
        if getattr(sample, "input_ids", None) is None:
            raise ValueError(f"sample {getattr(sample, '__key__', None)!r} ({type(sample).__name__}) has no field "
                             "'input_ids'; preencode_sample must return a sample with input_ids")  # fmt: skip
        reported = int(self.packing_length(sample))
        ids = fields["input_ids"] if fields is not None else _tensor(sample.input_ids)
        real = int(ids.numel())
        if real > reported:
            raise ValueError(
                f"sample {sample.__key__!r}: packing_length says {reported} tokens but its input_ids hold {real}; "
                f"packs planned on it would exceed packing_capacity {self._settings()[0]} — packing_length must "
                "return at least len(sample.input_ids)"
            )
        return reported

    def packing_key(self, sample) -> Hashable:
        """Compatibility key; only samples with equal keys share a pack (default ``sample.packing_key``)."""
        return getattr(sample, "packing_key", None)

    # ------------------------------------------------------------------ overflow (a pure function of a sample)
    def _settings(self) -> tuple[int, int, Overflow]:
        """``(capacity, alignment, overflow)`` from ``packing_config`` when set, else the ``packing_*`` fields."""
        s = self._packwise()
        return s["plan"]["capacity"], s["plan"].get("alignment", 1), s["overflow"]

    def _limit(self) -> int:
        capacity, a, policy = self._settings()
        c = as_int(capacity)  # numpy ints are ints; bools, floats and strings are not
        if c is None or c < 1:
            raise ValueError(f"{type(self).__name__}.packing_capacity={capacity!r} ({type(capacity).__name__}): "
                             "must be an integer >= 1 (tokens per pack); set it in the subclass")  # fmt: skip
        if policy not in ("truncate", "split", "drop", "error"):
            raise ValueError(f"{type(self).__name__}.packing_overflow={policy!r}; use truncate, split, drop or error")
        limit = capacity // a * a
        if limit < 1:
            raise ValueError(f"packing_alignment {a} > packing_capacity {capacity}")
        return limit

    def _token_names(self) -> tuple:
        return (*SEQUENCE_FIELDS, "mm_token_type_ids", *self.packing_columns)

    def _fields(self, sample) -> dict:
        names = (*self._token_names(), *MEDIA_KEYS)
        fields = {f: _tensor(v) for f in names if (v := getattr(sample, f, None)) is not None}
        _refuse_uncarried(sample, fields, known=(*names, *TRL_MASKS))
        masks = {f: _tensor(v) for f in TRL_MASKS if (v := getattr(sample, f, None)) is not None}
        if masks:  # TRL's loss masks are the loss mask, as pack_dataset and PackedDataCollator read them
            fields = trl_loss_mask(fields, masks, where=f"sample {sample.__key__!r}")
        return fields

    def _fit(self, sample, limit: int) -> tuple[list[dict], dict]:
        """``([fields of each kept piece], counts)`` for one sample under the overflow policy."""
        counts = zero_counts()
        fields = self._fields(sample)
        self._length(sample, fields)
        n = int(fields["input_ids"].numel())  # the real tokens (packing_length may over-report)
        where = f"sample {sample.__key__!r}"
        if any(k in fields for k in MEDIA_KEYS):  # every media sample: items agree with their tokens
            spans = media_spans(fields["input_ids"].cpu().numpy(), self.packing_media_tokens, self.packing_media_bounds)
            check_media(fields, spans, merge_size=self.packing_merge_size, where=where,
                        media_tokens=self.packing_media_tokens)  # fmt: skip
        if n <= limit:
            return [fields], counts
        capacity, alignment, policy = self._settings()
        if policy == "error":
            raise ValueError(
                f"{where} has {n} tokens > packing_capacity {capacity} (alignment {alignment}); set "
                "packing_overflow (PackingConfig.overflow) to truncate, split or drop, or raise the capacity"
            )
        ids = fields["input_ids"].cpu().numpy()
        spans = media_spans(ids, self.packing_media_tokens, self.packing_media_bounds)
        check_media(fields, spans, merge_size=self.packing_merge_size, where=where)  # a text-only sample's media
        cuts = cut_points(n, limit, policy, spans=spans)  # the pipeline's kernel: never inside a media span
        if not cuts:  # dropped, or a span longer than the limit
            counts.update(samples_dropped=1, tokens_dropped=n, loss_tokens_dropped=loss_tokens(fields, 0, n))
            counts["media_dropped"] = len(spans)
            return [], counts
        pieces, kept_items = [], 0
        for s, e in cuts:
            piece, dropped = slice_sample(fields, s, e, spans, self._token_names())
            kept_items += len(spans) - dropped  # each item goes with the one slice it lies in
            pieces.append(piece)
        counts["media_dropped"] = len(spans) - kept_items  # (split keeps all; each piece misses the others')
        if policy == "truncate":
            kept = cuts[0][1]
            counts.update(
                samples_truncated=1, tokens_truncated=n - kept, loss_tokens_truncated=loss_tokens(fields, kept, n)
            )
        else:
            masked = sum(boundary_target(fields, s) for s, _ in cuts[1:])
            counts.update(samples_split=1, pieces_added=len(cuts) - 1, loss_tokens_masked_at_boundary=masked)
        return pieces, counts

    # ------------------------------------------------------------------ Energon hooks
    def select_samples_to_pack(self, samples: list) -> list[list]:
        """Plan the buffer with packwise, per compatibility group; every sample is used exactly once (once per piece).

        Over-long samples: ``truncate`` plans the kept head; ``split`` gives each piece a group of its own
        (piece ``k`` is ``k + 1`` references to the sample, so every group is one pack and Energon's saved
        state never holds a half-used group: a restore after any batch is exact); ``drop`` and unfittable
        samples ride along in the first group, where ``pack_selected_samples`` leaves them out and counts
        them. A buffer in which nothing fits is dropped with a warning (and counted).

        Raises:
            FatalSampleError: ``packing_capacity`` not set, ``packing_overflow='error'`` with a sample over the
                capacity, media that disagree with their placeholder tokens — Energon re-raises it.
        """
        try:
            return self._select(samples)
        except FatalSampleError:
            raise
        except Exception as e:
            raise FatalSampleError(f"packwise select_samples_to_pack ({len(samples)} samples): {e}") from e

    def _select(self, samples: list) -> list[list]:
        limit = self._limit()
        counts = self.packing_counts
        counts["buffers"] += 1
        missing = [c for c in self.packing_columns if all(getattr(s, c, None) is None for s in samples)]
        if missing and samples:
            raise ValueError(
                f"packing_columns names {missing[0]!r} but none of the {len(samples)} samples of the buffer "
                f"carries it (a {type(samples[0]).__name__} has "
                f"{sorted(k for k in vars(samples[0]) if k[:1] != '_')}); fix the name in packing_columns"
            )
        groups: dict[Hashable, list[tuple[int, int]]] = {}
        alone, riders = [], []
        for i, s in enumerate(samples):
            n = self._length(s)
            if n > limit:
                pieces, _ = self._fit(s, limit)
                if not pieces:
                    riders.append(i)
                    continue
                if len(pieces) > 1:
                    alone.append((i, len(pieces)))
                    continue
                n = len(pieces[0]["input_ids"])
            groups.setdefault(self.packing_key(s), []).append((i, n))
        out: list[list[int]] = []
        for members in groups.values():
            lengths = np.asarray([n for _, n in members], dtype=np.int64)
            plan = plan_packs(lengths, **self._packwise()["plan"])
            out += [[members[j][0] for j in pack.tolist()] for pack in plan.packs()]
        plain = len(out)
        # A split sample's piece k is the group of k + 1 references to it: one pack per group, so Energon's
        # state (which drops a group from its buffer before the packs it yields are batched) never holds a
        # half-consumed group, and the group alone says which piece to build (a pure function, restorable).
        for i, n_pieces in alone:
            out += [[i] * (k + 1) for k in range(n_pieces)]
        if riders:
            if plain:
                out[0] += riders
            elif out:  # only split samples: the riders are a group of their own (no pack, counted)
                out.append(riders)
            else:
                warnings.warn(
                    f"packwise: every one of {len(samples)} samples in an Energon packing buffer is over "
                    f"packing_capacity {self._settings()[0]} and cannot be kept "
                    f"(overflow={self._settings()[2]!r}); the buffer is dropped (counted in packing_counts)",
                    stacklevel=2,
                )
                for i in riders:
                    self._count(self._fit(samples[i], limit)[1])
        used = np.zeros(len(samples), dtype=np.int64)
        for group in out:
            used[sorted(set(group))] += 1
        want = np.ones(len(samples), dtype=np.int64)
        for i, n_pieces in alone:
            want[i] = n_pieces
        if not (used == want).all() and out:  # an internal invariant: Energon would silently drop or repeat samples
            raise RuntimeError(f"packwise internal error: samples used {used.tolist()} times, expected {want.tolist()}")
        return [[samples[i] for i in group] for group in out]

    def _count(self, delta: dict) -> None:
        for k, v in delta.items():
            self.packing_counts[k] += v

    @stateless
    def pack_selected_samples(self, samples: list):
        """Yield the pack(s) of a selected group, assembled by :func:`packwise.assemble.assemble_pack`.

        Members over the capacity get the overflow policy again (a pure function: a restored pack is
        identical); piece ``k`` of a split sample is the group of ``k + 1`` references to it (see
        ``select_samples_to_pack``); a split sample sharing a group with others is refused.

        Raises:
            FatalSampleError: anything that fails, so Energon cannot drop the group silently.
        """
        try:
            yield from self._packs(samples)
        except FatalSampleError:
            raise
        except Exception as e:
            keys = [getattr(s, "__key__", None) for s in samples]
            raise FatalSampleError(f"packwise pack_selected_samples (samples {keys}): {e}") from e

    def _packs(self, samples: list):
        limit = self._limit()
        piece = piece_group(samples)  # k + 1 references to one sample: piece k of a split sample (see _select)
        fits = [self._fit(s, limit) for s in (samples[:1] if piece is not None else samples)]
        if piece is not None and len(fits[0][0]) > 1:
            pieces, delta = fits[0]
            if piece >= len(pieces):
                raise ValueError(f"a group of {len(samples)} references to sample {samples[0].__key__!r} asks for "
                                 f"piece {piece}, but the sample splits into {len(pieces)}")  # fmt: skip
            counts = delta if piece == 0 else zero_counts()  # a sample's counts go with its first piece
            self._count(counts)
            self.packing_counts["samples"] += int(piece == 0)
            yield self._packed(samples[0], [pieces[piece]], [f"{samples[0].__key__}#{piece}"], counts)
            return
        if piece is not None and len(samples) > 1:
            fits = [fits[0]] + [self._fit(s, limit) for s in samples[1:]]
        split = [s.__key__ for s, (pieces, _) in zip(samples, fits) if len(pieces) > 1]
        if split:
            raise ValueError(
                f"sample {split[0]!r} splits into several packs but shares a group with {len(samples) - 1} other "
                "sample(s); its pieces are groups of their own — group the buffer with select_samples_to_pack"
            )
        counts = zero_counts()
        for _, delta in fits:
            for k, v in delta.items():
                counts[k] += v
        self._count(counts)
        self.packing_counts["samples"] += len(samples)
        members = [pieces[0] for pieces, _ in fits if pieces]
        if members:
            keys = [s.__key__ for s, (pieces, _) in zip(samples, fits) if pieces]
            yield self._packed(samples[0], members, keys, counts)

    def _packed(self, head, members: list[dict], keys: list, counts: dict) -> PackedSample:
        names = {k for m in members for k in m if k not in MEDIA_KEYS}
        for col in ("mm_token_type_ids", *self.packing_columns):  # text-only members get zeros
            if col in names:
                for m in members:
                    if col not in m:
                        ref = next(x[col] for x in members if col in x)
                        m[col] = torch.zeros((len(m["input_ids"]), *ref.shape[1:]), dtype=ref.dtype)
        pack = assemble_pack(members, **self._packwise()["assemble"])
        self.packing_counts["packs"] += 1
        return PackedSample.derive_from(
            head, __key__="+".join(str(k) for k in keys), pack=pack, keys=keys, packing_counts=dict(counts)
        )

    @stateless
    def batch(self, samples: Sequence[PackedSample]) -> dict:
        """A ``layout="thd"`` batch (:func:`packwise.assemble.collate_packs`) plus the member ``keys``, the
        packs' ``packing_counts`` (summed) and ``__restore_key__`` (for ``loader.restore_sample``)."""
        if not samples:
            capacity, _, policy = self._settings()
            raise ValueError(
                f"packwise batch got no packs: the buffer was empty, or every sample of it was dropped by "
                f"packing_overflow={policy!r} at packing_capacity {capacity} "
                f"({self.packing_counts['samples_dropped']} dropped so far, see packing_counts); raise "
                "packing_capacity or use packing_overflow='truncate' or 'split'"
            )
        batch: dict[str, Any] = dict(collate_packs([s.pack for s in samples], **self._packwise()["collate"]))
        batch["keys"] = [s.keys for s in samples]
        batch["pack_restore_keys"] = [s.__restore_key__ for s in samples]
        batch["packing_counts"] = {k: sum(s.packing_counts[k] for s in samples) for k in zero_counts()}
        batch["__restore_key__"] = ()
        return batch


def _refuse_uncarried(sample, fields: dict, *, known: tuple) -> None:
    """Refuse a per-token tensor field (``(T, ...)``, T = len(input_ids)) that no packwise name carries."""
    n = len(fields["input_ids"]) if "input_ids" in fields else None
    for name, value in vars(sample).items():
        shape = getattr(value, "shape", None)
        if name.startswith("_") or name in known or not shape or n is None or shape[0] != n:
            continue
        raise ValueError(
            f"sample {sample.__key__!r} ({type(sample).__name__}) carries a per-token field {name!r} of shape "
            f"{tuple(shape)} that would not reach the packs; add it to packing_columns=({name!r},) to carry it"
        )


def _tensor(value) -> torch.Tensor:
    return value if isinstance(value, torch.Tensor) else torch.as_tensor(np.asarray(value))


__all__ = ["PackwiseTaskEncoderMixin"]
