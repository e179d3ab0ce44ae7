"""The per-sample side of :class:`~packwise.stream.PackingStream`: a ``length_fn`` that under-reports, samples
without ``input_ids``, and the overflow policy (``truncate``/``split``/``drop``/``error``), with counts."""

from __future__ import annotations

from collections.abc import Mapping
from itertools import repeat
from operator import itemgetter
from typing import TYPE_CHECKING, cast

import numpy as np

from ..assemble import MEDIA_KEYS
from ..pipeline import cut_points
from ._slice import _slice

if TYPE_CHECKING:
    from collections.abc import Callable

    from ..pipeline import Overflow

_INPUT_IDS = itemgetter("input_ids")
_INT64_MAX = int(np.iinfo(np.int64).max)


class SampleRules:
    """Mixin of PackingStream: needs ``capacity``, ``alignment``, ``overflow``, ``length_fn``, ``assemble`` and
    ``stats``."""

    if TYPE_CHECKING:  # set by PackingStream.__init__
        capacity: int
        alignment: int
        overflow: Overflow
        length_fn: Callable[[Mapping], int] | None
        assemble: bool
        stats: dict[str, int]

    def _check_reported(self, samples: list[Mapping], reported: np.ndarray, at) -> None:
        """A ``length_fn`` may over-report (wasted room) but never under-report: the plan would overfill packs.
        Samples assembled into packs must be mappings; ``input_ids`` they hold must be 1-D with a length."""
        types = set(map(type, samples))  # one C-level pass; the per-sample check only runs for mappings
        if self.assemble and not all(issubclass(t, Mapping) for t in types):
            j = next(j for j, s in enumerate(samples) if not isinstance(s, Mapping))
            raise ValueError(
                f"sample {at(j)} ({type(samples[j]).__name__}) is not a mapping; assemble=True builds packs from "
                "mappings with input_ids (and labels, ...) — give the stream such samples, or pass assemble=False to "
                "get the samples of each pack as they are"
            )
        if not any(issubclass(t, Mapping) for t in types):
            return
        if types == {dict}:
            try:
                ids = list(map(_INPUT_IDS, samples))
                actual = np.fromiter(map(len, ids), np.int64, len(samples))
            except (KeyError, TypeError):
                actual = None
            if actual is not None and one_dim(ids):  # (1, L) arrays have len 1: named below
                self._raise_under(actual, reported, at)
                return
        actual = np.fromiter(
            (-1 if (ids := _ids(s)) is None else self._ids_length(ids, at(j)) for j, s in enumerate(samples)),
            np.int64,
            len(samples),
        )
        self._raise_under(actual, reported, at)

    def _raise_under(self, actual: np.ndarray, reported: np.ndarray, at) -> None:
        under = np.flatnonzero(actual > reported)
        if under.size:
            j = int(under[0])
            raise ValueError(
                f"sample {at(j)}: length_fn says {int(reported[j])} tokens but its input_ids hold {int(actual[j])}; "
                f"packs planned on it would exceed capacity {self.capacity} — length_fn must return at least the "
                "tokens assemble_pack will place (len(sample['input_ids']) after any transform)"
            )

    def _reported_lengths(self, samples: list[Mapping], at) -> np.ndarray:
        """``length_fn`` over a window as ``(N,)`` int64, every value an int >= 1 — checked in C-level passes (the
        values' set of types unless ``length_fn`` is ``int`` or ``len``, one conversion); only a bad window is
        scanned in Python, to name its sample."""
        fn = cast("Callable[[Mapping], int]", self.length_fn)  # _plan calls this only when length_fn is set
        try:
            values = list(map(fn, samples))
        except Exception:  # find and name the sample it raised on
            values = [self._call_length_fn(s, at(j)) for j, s in enumerate(samples)]
        if _exact_int(self.length_fn) or all(map(_is_count_type, set(map(type, values)))):
            try:
                lengths = np.fromiter(values, np.int64, len(values))
            except OverflowError:  # an int beyond int64: named below
                lengths = None
            if lengths is not None and (not lengths.size or lengths.min() >= 1):
                return lengths
        j = next(j for j, v in enumerate(values) if not _is_count(v))
        raise self._bad_count(at(j), values[j])

    def _bad_count(self, index: int, value) -> ValueError:
        return ValueError(
            f"sample {index}: length_fn returned {value!r} ({type(value).__name__}); length_fn must return an int in "
            f"[1, capacity={self._limit}] — the sample's token count (len(sample['input_ids'])); a longer count is "
            f"cut by overflow={self.overflow!r}"
        )

    def _call_length_fn(self, sample: Mapping, index: int):
        fn = cast("Callable[[Mapping], int]", self.length_fn)  # called only from _reported_lengths: it is set
        try:
            return fn(sample)
        except Exception as e:
            raise ValueError(f"sample {index}: length_fn raised {type(e).__name__}: {e}") from e

    def _length(self, sample: Mapping, index: int) -> int:
        if self.length_fn is not None:
            value = self._call_length_fn(sample, index)
            if not _is_count(value):
                raise self._bad_count(index, value)
            return int(value)
        try:
            ids = sample["input_ids"]
        except (KeyError, TypeError) as e:
            raise ValueError(
                f"sample {index} has no input_ids ({type(sample).__name__}); pass length_fn= for other samples"
            ) from e
        except Exception as e:  # the sample's own __getitem__ failed: name the sample
            raise ValueError(f"sample {index}: reading its input_ids raised {type(e).__name__}: {e}") from e
        return self._ids_length(ids, index)

    def _ids_length(self, ids, index: int) -> int:
        """``len(ids)`` of a 1-D ``input_ids``; ValueError naming sample ``index`` otherwise."""
        ndim = getattr(ids, "ndim", 1)
        if ndim != 1:
            raise ValueError(
                f"sample {index}: input_ids has shape {tuple(ids.shape)} ({ndim}-D); input_ids must be 1-D (L,) — "
                + (
                    "wrap a scalar as [id]"
                    if ndim == 0
                    else "flatten it (ids.reshape(-1)) or drop the batch dim (ids[0])"
                )
            )
        try:
            return len(ids)
        except TypeError as e:
            raise ValueError(
                f"sample {index}: input_ids ({type(ids).__name__}) has no length; input_ids must be a 1-D sequence "
                "(L,) of token ids" + ("" if self.length_fn is not None else ", or pass length_fn= for other samples")
            ) from e

    @property
    def _limit(self) -> int:
        """The longest sequence that fits a pack after alignment."""
        return self.capacity // self.alignment * self.alignment

    def _apply_overflow(self, samples: list[Mapping], lengths: np.ndarray, at) -> tuple[list[Mapping], np.ndarray]:
        """The window with the overflow policy applied to its samples over :attr:`_limit`, and their lengths."""
        kept: list[Mapping] = []
        out: list[int] = []
        for j, s in enumerate(samples):
            n = int(lengths[j])
            pieces, sizes = self._cut(s, at(j), n) if n > self._limit else ([s], [n])
            kept.extend(pieces)
            out.extend(sizes)
        return kept, np.asarray(out, dtype=np.int64)

    def _overflow(self, sample: Mapping, index: int, n: int) -> list[Mapping]:
        """What the overflow policy keeps of a sample of ``n`` tokens (itself when it fits), counted in ``stats``."""
        return self._cut(sample, index, n)[0]

    def _cut(self, sample: Mapping, index: int, n: int) -> tuple[list[Mapping], list[int]]:
        """:meth:`_overflow`, with the kept pieces' planned lengths."""
        fit_capacity = self._limit
        if n <= fit_capacity:
            return [sample], [n]
        ids = _ids(sample) if self.length_fn is not None else None
        if ids is not None and len(ids) != n:  # cuts are token positions: they need the true count
            raise ValueError(
                f"sample {index}: length_fn returned {n} (> capacity {fit_capacity}) but its input_ids hold {len(ids)} "
                f"tokens, so overflow={self.overflow!r} cannot be applied by that count — length_fn must return the "
                f"sample's token count (len(sample['input_ids'])); overflow brings it to <= capacity {fit_capacity}"
            )
        if self.overflow == "error":
            raise ValueError(
                f"sample {index} has {n} tokens > capacity {fit_capacity}; pass overflow='truncate'|'split'|'drop'"
            )
        if self.overflow in ("truncate", "split") and not isinstance(sample, Mapping):
            raise ValueError(
                f"sample {index} has {n} tokens > capacity {fit_capacity} but is a {type(sample).__name__}, not a "
                f"mapping with input_ids, so overflow={self.overflow!r} cannot cut it — use overflow='drop' or "
                "'error', or give the stream mappings"
            )
        if self.overflow in ("truncate", "split") and any(sample.get(k) is not None for k in MEDIA_KEYS):
            raise ValueError(
                f"sample {index} has {n} tokens > capacity {fit_capacity} and images; a stream cannot cut it without "
                "cutting an image — pack it offline (packwise pack truncates before images) or use overflow='drop'"
            )
        cuts = cut_points(n, fit_capacity, self.overflow)  # the pipeline's kernel: no media here, so plain slices
        if not cuts:
            self.stats["dropped"] += 1
            self.stats["tokens_dropped"] += n
            return [], []
        pieces: list[Mapping] = [_slice(sample, a, b, n) for a, b in cuts]
        sizes = [self._piece_length(p, index, a, b, n) for p, (a, b) in zip(pieces, cuts)]
        if self.overflow == "truncate":
            self.stats["truncated"] += 1
            self.stats["tokens_truncated"] += n - cuts[0][1]
        else:
            self.stats["split"] += 1
        return pieces, sizes

    def _piece_length(self, piece: Mapping, index: int, a: int, b: int, n: int) -> int:
        """A cut piece's planned length: ``length_fn`` must agree that it holds ``b - a`` tokens (at most the
        limit; more is allowed room, fewer would overfill a pack)."""
        m = self._length(piece, index)
        if self.length_fn is not None and not b - a <= m <= self._limit:
            raise ValueError(
                f"sample {index}: overflow={self.overflow!r} cut it (length_fn returned {n}) to tokens {a}:{b}, but "
                f"length_fn returned {m} for that piece of {b - a} tokens; length_fn must return the sample's token "
                f"count (len(sample['input_ids'])), <= capacity {self._limit} after overflow"
            )
        return m


def _exact_int(fn) -> bool:
    """``int`` or ``len``: builtins whose every result is an exact ``int`` (never a subclass, a bool or a float), so
    their values need no pass over the values' types (compared by identity: any callable may be a length_fn)."""
    return fn is int or fn is len


def _is_count_type(t: type) -> bool:
    """An integer type length_fn may return (Python or numpy int; not bool)."""
    return issubclass(t, (int, np.integer)) and not issubclass(t, bool)


def _is_count(value) -> bool:
    return _is_count_type(type(value)) and 1 <= value <= _INT64_MAX


_PLAIN = frozenset((list, tuple))


def one_dim(ids: list) -> bool:
    """Whether every sample's ``input_ids`` in ``ids`` is 1-D: one C-level pass over their types; an ``ndim`` check
    only when some are not plain lists/tuples (arrays/tensors of shape ``(1, L)`` would have ``len`` 1)."""
    if _PLAIN.issuperset(set(map(type, ids))):
        return True
    return all(map((1).__eq__, map(getattr, ids, repeat("ndim"), repeat(1))))


def _ids(sample):
    """A sample's ``input_ids`` when it is a mapping holding them (else None)."""
    return sample.get("input_ids") if isinstance(sample, Mapping) else None
