"""One home for the CLI's defaults and closed choices: :class:`~packwise.config.PackingConfig`'s fields and
the layers' ``Literal`` types.

A ``packwise`` option that is a PackingConfig field takes its default from the field (:func:`config_default`);
a closed choice is annotated with the layer's ``Literal``, which typer turns into a choice that ``--help``
lists (``<truncate|split|drop|error>``) and that refuses any other value as a usage error (exit 2) naming the
value and the choices. ``tests/cli/test_cli_defaults.py`` checks every default and choice list against the
config.

Example:
    >>> from packwise.cli._options import CHOICES, DEFAULTS
    >>> DEFAULTS["capacity"], DEFAULTS["max_pixels"]
    (4096, 12845056)
    >>> CHOICES["overflow"]
    ('truncate', 'split', 'drop', 'error')
"""

from __future__ import annotations

from typing import Any, Literal, get_args

from ..config import Multimodal, PackingConfig
from ..constants import MediaFamily
from ..files import Format
from ..pipeline import Overflow
from ..plan import ALGORITHMS, ALIASES
from ..text import LossOn

#: ``packwise pack --engine``: this process, or Ray Data + Ray tasks (integrations/ray).
Engine = Literal["local", "ray"]

#: The closed choices of the commands, by parameter name: the values each option's ``Literal`` allows.
CHOICES: dict[str, tuple[str, ...]] = {
    "overflow": get_args(Overflow),
    "loss_on": get_args(LossOn),
    "input_format": get_args(Format),
    "engine": get_args(Engine),
    "media_family": get_args(MediaFamily),
}

#: PackingConfig fields under ``multimodal`` that ``packwise pack`` takes as top-level flags.
MULTIMODAL_FLAGS = ("min_pixels", "max_pixels", "media_root", "media_family")

#: ``--algorithm`` help: every algorithm and alias the planner takes (case-insensitive, ``-`` for ``_``).
ALGORITHM_HELP = f"Packing algorithm ({', '.join(ALGORITHMS)}) or alias ({', '.join(ALIASES)})."


def config_default(name: str) -> Any:
    """The default of PackingConfig field ``name`` (or of ``multimodal.<name>`` for the image flags).

    Raises:
        KeyError: ``name`` is no PackingConfig (or multimodal) field.

    Example:
        >>> config_default("overflow"), config_default("seed")
        ('truncate', None)
    """
    fields = Multimodal.model_fields if name in MULTIMODAL_FLAGS else PackingConfig.model_fields
    if name not in fields:
        raise KeyError(f"{name!r} is no PackingConfig field; use one of {', '.join(PackingConfig.model_fields)}")
    return fields[name].get_default(call_default_factory=True)


#: The commands' defaults for PackingConfig fields, by flag name (``DEFAULTS["capacity"]``): read from the config.
DEFAULTS: dict[str, Any] = {name: config_default(name) for name in (*PackingConfig.model_fields, *MULTIMODAL_FLAGS)}
