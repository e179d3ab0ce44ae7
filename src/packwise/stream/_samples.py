"""The per-sample side of :class:`~packwise.stream.PackingStream`: a ``length_fn`` that under-reports, samples
without ``input_ids``, and the overflow policy (``truncate``/``split``/``drop``/``error``), with counts."""

from __future__ import annotations

from collections.abc import Mapping
from operator import itemgetter

import numpy as np

from ..assemble import MEDIA_KEYS
from ..pipeline import cut_points
from ._slice import _slice

_INPUT_IDS = itemgetter("input_ids")


class SampleRules:
    """Mixin of PackingStream: needs ``capacity``, ``alignment``, ``overflow``, ``length_fn`` and ``stats``."""

    def _check_reported(self, samples: list[Mapping], reported: np.ndarray, at) -> None:
        """A ``length_fn`` may over-report (wasted room) but never under-report: the plan would overfill packs."""
        types = set(map(type, samples))  # one C-level pass; the per-sample check only runs for mappings
        if not any(issubclass(t, Mapping) for t in types):
            return
        if types == {dict}:
            try:
                actual = np.fromiter(map(len, map(_INPUT_IDS, samples)), np.int64, len(samples))
            except (KeyError, TypeError):
                actual = None
            if actual is not None:
                self._raise_under(actual, reported, at)
                return
        actual = np.fromiter(
            (len(ids) if (ids := _ids(s)) is not None else -1 for s in samples), np.int64, len(samples)
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

    def _length(self, sample: Mapping, index: int) -> int:
        if self.length_fn is not None:
            try:
                return int(self.length_fn(sample))
            except Exception as e:
                raise ValueError(f"sample {index}: length_fn raised {type(e).__name__}: {e}") from e
        try:
            return len(sample["input_ids"])
        except (KeyError, TypeError) as e:
            raise ValueError(
                f"sample {index} has no input_ids ({type(sample).__name__}); pass length_fn= for other samples"
            ) from e

    @property
    def _limit(self) -> int:
        """The longest sequence that fits a pack after alignment."""
        return self.capacity // self.alignment * self.alignment

    def _overflow(self, sample: Mapping, index: int, n: int) -> list[Mapping]:
        fit_capacity = self._limit
        if n <= fit_capacity:
            return [sample]
        if self.overflow == "error":
            raise ValueError(
                f"sample {index} has {n} tokens > capacity {fit_capacity}; pass overflow='truncate'|'split'|'drop'"
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
            return []
        if self.overflow == "truncate":
            self.stats["truncated"] += 1
            self.stats["tokens_truncated"] += n - cuts[0][1]
        else:
            self.stats["split"] += 1
        return [_slice(sample, a, b, n) for a, b in cuts]


def _ids(sample):
    """A sample's ``input_ids`` when it is a mapping holding them (else None)."""
    return sample.get("input_ids") if isinstance(sample, Mapping) else None
