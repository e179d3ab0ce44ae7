"""A deterministic train-mode comparison: every dropout of the model switched off for the check, and named.

Packed and alone forwards draw different dropout masks, so a model whose config has dropout (Seed-OSS:
``attention_dropout=0.1``, ``residual_dropout=0.1``) would fail every train-mode row on randomness, not on a
leak. :func:`no_dropout` sets, for the duration of the check, every ``torch.nn.Dropout``-family module's ``p``
and every float attribute of a module or config whose name holds ``dropout`` or ``drop`` (the forms
transformers 5.24 reads: ``self.attention_dropout``, ``self.residual_dropout``, ``self.dropout``,
``self.config.attention_dropout``, ...) to 0, and restores them afterwards. What it switched off is returned
for the report (``EquivalenceReport.dropout_off``).
"""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Iterator
from contextlib import contextmanager

import torch

_NAME = re.compile(r"drop", re.IGNORECASE)


def _float_attrs(obj) -> list[tuple[str, float]]:
    names = vars(obj) if hasattr(obj, "__dict__") else {}
    return [
        (k, float(v))
        for k, v in names.items()
        if _NAME.search(k) and isinstance(v, float) and not isinstance(v, bool) and v > 0
    ]


@contextmanager
def no_dropout(model) -> Iterator[list[str]]:
    """Switch off every dropout of ``model`` (modules, float attributes, its configs) inside the block.

    Yields the list of what was switched off, ``"Class.attr=value (xN)"`` sorted, filled on entry.

    Example:
        >>> import torch
        >>> m = torch.nn.Sequential(torch.nn.Linear(2, 2), torch.nn.Dropout(0.1))
        >>> with no_dropout(m) as off:
        ...     m[1].p, off
        (0.0, ['Dropout.p=0.1 (x1)'])
        >>> m[1].p
        0.1
    """
    saved: list[tuple[object, str, float]] = []
    seen: set[int] = set()
    targets = list(model.modules())
    config = getattr(model, "config", None)
    if config is not None:
        targets.append(config)
        subs = [getattr(config, k, None) for k in getattr(config, "sub_configs", None) or {}]
        targets += [sub for sub in subs if sub is not None]
    for obj in targets:
        if id(obj) in seen:
            continue
        seen.add(id(obj))
        if isinstance(obj, torch.nn.modules.dropout._DropoutNd) and obj.p > 0:
            saved.append((obj, "p", float(obj.p)))
        saved += [(obj, name, value) for name, value in _float_attrs(obj)]
    counts = Counter(f"{type(o).__name__}.{n}={v:g}" for o, n, v in saved)
    off = [f"{k} (x{c})" for k, c in sorted(counts.items())]
    try:
        for obj, name, _ in saved:
            setattr(obj, name, 0.0)
        yield off
    finally:
        for obj, name, value in saved:
            setattr(obj, name, value)
