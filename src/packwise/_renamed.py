"""Old import paths of renamed modules (issue 17): they keep working and warn ``DeprecationWarning`` naming the
new home. No file stays at an old path, so ``packwise/tokenize`` and ``packwise/torch.py`` no longer shadow the
standard library's ``tokenize`` or PyTorch when Python runs from inside ``src/packwise``.

Example:
    >>> import warnings
    >>> with warnings.catch_warnings(record=True) as caught:
    ...     warnings.simplefilter("always")
    ...     from packwise.io import load_packed
    >>> import packwise.files
    >>> load_packed is packwise.files.load_packed, caught[0].category.__name__
    (True, 'DeprecationWarning')
"""

from __future__ import annotations

import importlib
import importlib.abc
import importlib.util
import sys
import types
import warnings

#: old dotted path -> (module it now is, the public home to name in the warning)
RENAMED = {
    "packwise.tokenize": ("packwise.text", "packwise.text"),
    "packwise.io": ("packwise.files", "packwise.files"),
    "packwise.torch": ("packwise.data", "packwise.data"),
    "packwise.integrations.torch_data": ("packwise.integrations.pytorch._data", "packwise.data"),
    # integrations/ by system (issue 30): hf/, energon/, ray/, pytorch/
    "packwise.integrations._hf_attention": ("packwise.integrations.hf._attention", "packwise.integrations.hf"),
    "packwise.integrations._hf_features": ("packwise.integrations.hf._features", "packwise.integrations.hf"),
    "packwise.integrations._hf_guard": ("packwise.integrations.hf._guard", "packwise.integrations.hf"),
    "packwise.integrations._hf": ("packwise.integrations.hf._api", "packwise.hf"),
    "packwise.integrations._energon_overflow": (
        "packwise.integrations.energon._overflow",
        "packwise.integrations.energon",
    ),
    "packwise.integrations._torch_data": ("packwise.integrations.pytorch._data", "packwise.data"),
    "packwise.integrations._torch_media": ("packwise.integrations.pytorch._media", "packwise.data"),
    "packwise.integrations._ray_data": ("packwise.integrations.ray._data", "packwise.integrations.ray"),
    "packwise.integrations._ray_driver": ("packwise.integrations.ray._driver", "packwise.integrations.ray"),
    "packwise.integrations._ray_fs": ("packwise.integrations.ray._fs", "packwise.integrations.ray"),
    "packwise.integrations._ray_io": ("packwise.integrations.ray._io", "packwise.integrations.ray"),
    "packwise.integrations._ray_spill": ("packwise.integrations.ray._spill", "packwise.integrations.ray"),
    "packwise.integrations._ray_workers": ("packwise.integrations.ray._workers", "packwise.integrations.ray"),
}


def _target(fullname: str) -> tuple[str, str] | None:
    for old, (new, home) in RENAMED.items():
        if fullname == old or fullname.startswith(old + "."):
            return new + fullname[len(old) :], home + fullname[len(old) :]
    return None


class _Alias(types.ModuleType):
    """The old module: every attribute read from the new one (same objects, so ``is`` and isinstance hold)."""

    def __getattr__(self, name: str):
        if name.startswith("__") and name.endswith("__"):  # module attributes the import system probes
            raise AttributeError(name)
        return getattr(importlib.import_module(self.__dict__["_packwise_new"]), name)

    def __dir__(self):
        return dir(importlib.import_module(self.__dict__["_packwise_new"]))


class _RenamedFinder(importlib.abc.MetaPathFinder, importlib.abc.Loader):
    def find_spec(self, fullname, path, target=None):
        if _target(fullname) is None:
            return None
        new = importlib.util.find_spec(_target(fullname)[0])
        return importlib.util.spec_from_loader(fullname, self, is_package=bool(new and new.submodule_search_locations))

    def create_module(self, spec):
        module = _Alias(spec.name)
        module.__dict__["_packwise_new"] = _target(spec.name)[0]
        return module

    def exec_module(self, module):
        new, home = _target(module.__name__)
        warnings.warn(
            f"{module.__name__} was renamed: import from {home} (the old path goes away in a later release)",
            DeprecationWarning,
            stacklevel=2,
        )
        real = importlib.import_module(new)
        if hasattr(real, "__path__"):
            module.__path__ = []  # a package: its submodules resolve through this finder too
        # ``from old import *`` gives what it gives from the new module: its ``__all__``, else its public names
        module.__all__ = list(getattr(real, "__all__", [n for n in vars(real) if not n.startswith("_")]))


if not any(isinstance(f, _RenamedFinder) for f in sys.meta_path):
    sys.meta_path.insert(0, _RenamedFinder())
