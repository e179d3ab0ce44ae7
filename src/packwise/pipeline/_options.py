"""``PackOptions``: the settings of one packing run, typed and checked once, shared by every engine."""

from __future__ import annotations

import dataclasses
import difflib
import numbers
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Literal, get_args

import numpy as np

from ..files import FORMATS, Format
from ._overflow import OVERFLOW_POLICIES, Overflow

if TYPE_CHECKING:
    from ..multimodal import VisionSpec

LossOn = Literal["assistant", "all"]
#: The tokenizer text rows get when none is given.
DEFAULT_TOKENIZER = "qwen2.5"


def _int_at_least(name: str, value, minimum: int, *, optional: bool = True) -> None:
    if value is None and optional:
        return
    if isinstance(value, bool) or not isinstance(value, int) or value < minimum:
        none = "None or " if optional else ""
        raise ValueError(f"{name} must be {none}an integer >= {minimum}, got {value!r}")


#: The fields that say what a row is: never dropped (``drop_fields``).
INPUT_FIELDS = ("messages", "prompt", "completion", "input_ids")


def _drop_fields(names) -> tuple[str, ...]:
    """``drop_fields`` as a sorted tuple of distinct names; an input-kind field or a non-string is refused."""
    if isinstance(names, str) or not isinstance(names, (list, tuple, set, frozenset)):
        raise ValueError(f"drop_fields must be a list of field names, got {names!r}")
    bad = next((n for n in names if not isinstance(n, str) or not n), None)
    if bad is not None:
        raise ValueError(f"drop_fields holds {bad!r}; each entry is a top-level field name (a non-empty string)")
    kind = sorted(set(names) & set(INPUT_FIELDS))
    if kind:
        raise ValueError(
            f"drop_fields holds {kind[0]!r}, an input field (a row's messages, prompt/completion or input_ids); "
            "remove it from drop_fields"
        )
    return tuple(sorted(set(names)))


@dataclass(frozen=True)
class PackOptions:
    """What to pack and how, checked when built (before any input is read), so every engine refuses the
    same bad option with the same message.

    ``capacity`` is C, tokens per pack; ``alignment`` plans each sequence at its length rounded up to this
    multiple (so the longest sequence that fits is :attr:`fit_capacity`). ``drop_fields``: top-level fields
    removed from every row before it is read (metadata such as ``id``, ``source``; counted in the report). The
    other fields are the keywords of :func:`packwise.pipeline.pack_dataset` (``PackingConfig.pipeline_kwargs()``
    gives them all).

    Raises:
        ValueError: a value out of range or an unknown choice, naming the value and what is allowed.
        TypeError: an algorithm option the algorithm does not take.

    Example:
        >>> opts = PackOptions(capacity=100, alignment=8, overflow="split")
        >>> opts.fit_capacity, opts.algorithm_name
        (96, 'best_fit_decreasing')
        >>> PackOptions(capacity=0)
        Traceback (most recent call last):
        ...
        ValueError: capacity must be an integer >= 1 (tokens per pack), got 0
    """

    capacity: int = 4096
    tokenizer: object = None
    algorithm: str = "best_fit_decreasing"
    seed: int | None = None
    overflow: Overflow = "truncate"
    loss_on: LossOn = "assistant"
    chat_template: str | None = None
    skip_bad_rows: bool = False
    max_sequences_per_pack: int | None = None
    format: Format | None = None
    vision: VisionSpec | None = None
    min_packs: int | None = None
    pack_count_multiple: int | None = None
    alignment: int = 1
    algorithm_options: dict = field(default_factory=dict)
    drop_fields: tuple[str, ...] = ()

    def __post_init__(self) -> None:
        # check_algorithm_options is plan/'s own check of **algorithm_options (private: plan/ exports only
        # planners; this is the one place above plan/ that validates options without planning).
        from ..plan import MAX_CAPACITY, RANDOMIZED, check_algorithm_options, resolve_algorithm

        for name in ("capacity", "alignment", "seed", "max_sequences_per_pack", "min_packs", "pack_count_multiple"):
            value = getattr(self, name)  # numpy integers (np.int64 from an array) are integers: store plain ints
            if isinstance(value, numbers.Integral) and not isinstance(value, (bool, np.bool_, int)):
                object.__setattr__(self, name, int(value))
        capacity, alignment = self.capacity, self.alignment
        if isinstance(capacity, bool) or not isinstance(capacity, int) or capacity < 1:
            raise ValueError(f"capacity must be an integer >= 1 (tokens per pack), got {capacity!r}")
        if capacity > MAX_CAPACITY:
            raise ValueError(
                f"capacity {capacity} is above {MAX_CAPACITY:,} tokens, the largest packwise plans (its histogram "
                "planners keep state per token of capacity); use a smaller capacity"
            )
        if isinstance(alignment, bool) or not isinstance(alignment, int) or not 1 <= alignment <= capacity:
            raise ValueError(f"alignment must be an integer in [1, capacity={capacity}], got {alignment!r}")
        if not isinstance(skip := self.skip_bad_rows, (bool, np.bool_)):  # "no" is truthy: never read it as True
            raise TypeError(
                f"skip_bad_rows must be True or False, got {skip!r} ({type(skip).__name__}); "
                "pass a bool (--skip-bad-rows on the command line)"
            )
        object.__setattr__(self, "skip_bad_rows", bool(self.skip_bad_rows))
        if self.loss_on not in get_args(LossOn):
            raise ValueError(f"loss_on must be 'assistant' or 'all', got {self.loss_on!r}")
        if self.overflow not in OVERFLOW_POLICIES:
            raise ValueError(f"unknown overflow policy {self.overflow!r}; use one of {', '.join(OVERFLOW_POLICIES)}")
        if self.format not in (None, *FORMATS):
            raise ValueError(f"unknown --format {self.format!r}; use one of {', '.join(FORMATS)}")
        if self.seed is not None and (isinstance(self.seed, bool) or not isinstance(self.seed, int)):
            raise TypeError(f"seed must be an integer or None, got {self.seed!r}")
        if self.seed is not None and self.seed < 0:
            raise ValueError(f"seed must be >= 0, got {self.seed}; pass --seed 0 or any non-negative integer")
        if self.seed is not None and resolve_algorithm(self.algorithm) not in RANDOMIZED:
            raise ValueError(
                f"seed={self.seed} is not read by algorithm {resolve_algorithm(self.algorithm)!r}, which is "
                f"deterministic; only {', '.join(sorted(RANDOMIZED))} reads a seed — drop the seed (--seed) or "
                "pick that algorithm"
            )
        _int_at_least("max_sequences_per_pack", self.max_sequences_per_pack, 1)
        _int_at_least("min_packs", self.min_packs, 0)
        _int_at_least("pack_count_multiple", self.pack_count_multiple, 1)
        if self.algorithm_options is not None and not isinstance(self.algorithm_options, Mapping):
            raise TypeError(
                "algorithm_options must be a dict of option name to value (e.g. {'delta': 0.05} for "
                f"balanced_greedy_knapsack), got {self.algorithm_options!r}"
            )
        object.__setattr__(self, "algorithm_options", dict(self.algorithm_options or {}))
        object.__setattr__(self, "drop_fields", _drop_fields(self.drop_fields))
        check_algorithm_options(resolve_algorithm(self.algorithm), self.algorithm_options)

    @classmethod
    def of(cls, options: PackOptions | None = None, **fields) -> PackOptions:
        """``options`` with ``fields`` replacing its values (``PackOptions(**fields)`` when None).

        Raises:
            TypeError: ``options`` is not a PackOptions, or a field name is unknown.
        """
        unknown = sorted(set(fields) - {f.name for f in dataclasses.fields(cls)})
        if unknown:
            known = [f.name for f in dataclasses.fields(cls)]
            hints = [f"{u!r}" + (f" (did you mean {m[0]!r}?)" if (m := difflib.get_close_matches(u, known, 1)) else "")
                     for u in unknown]  # fmt: skip
            raise TypeError(f"unknown packing option {', '.join(hints)}; the options are: {', '.join(known)}")
        if options is None:
            return cls(**fields)
        if not isinstance(options, PackOptions):
            raise TypeError(f"options must be a PackOptions, got {type(options).__name__}")
        return dataclasses.replace(options, **fields) if fields else options

    def replace(self, **fields) -> PackOptions:
        """A copy with ``fields`` changed (checked again)."""
        return dataclasses.replace(self, **fields)

    @property
    def algorithm_name(self) -> str:
        """The canonical name of :attr:`algorithm` (aliases resolved)."""
        from ..plan import resolve_algorithm

        return resolve_algorithm(self.algorithm)

    @property
    def fit_capacity(self) -> int:
        """The longest sequence that still fits a pack once aligned: what the overflow policy cuts at."""
        return self.capacity // self.alignment * self.alignment

    def plan_kwargs(self) -> dict:
        """Keyword arguments of :func:`packwise.plan.plan_packs` (and, without ``seed``, ``plan_histogram``)."""
        return {
            "capacity": self.capacity,
            "algorithm": self.algorithm,
            "seed": self.seed,
            "max_sequences_per_pack": self.max_sequences_per_pack,
            "min_packs": self.min_packs,
            "pack_count_multiple": self.pack_count_multiple,
            "alignment": self.alignment,
            **self.algorithm_options,
        }

    def report_loss_on(self, kind: str, *, every_token: bool = False) -> str:
        """``loss_on`` as the report names it: pre-tokenized rows carry their own ``labels``/``loss_mask``
        (``"labels"``), or, when every token of them is a target (``every_token``: ids only, or labels that mask
        nothing but each sample's first token), ``"all"``."""
        if kind == "tokens":
            return "all" if every_token else "labels"
        return self.loss_on
