"""The settings a :class:`~packwise.stream.PackingStream` state records: a state loads only into a stream whose
packs are the same (capacity, buffer_size, seed, ...), else it would resume at a position of other packs."""

from __future__ import annotations

from collections.abc import Mapping


def settings_of(stream) -> dict:
    """The constructor settings that decide the packs and their order, as plain JSON-safe values
    (``length_fn`` and the source are not comparable; a state from another source is caught by position where
    it can be).

    Example:
        >>> from packwise.stream import PackingStream
        >>> settings_of(PackingStream([], capacity=8, buffer_size=4, seed=1))["seed"]
        1
    """
    return {
        "capacity": stream.capacity, "buffer_size": stream.buffer_size, "seed": stream.seed,
        "algorithm": stream.algorithm, "overflow": stream.overflow, "shuffle": stream.shuffle,
        "drop_last": stream.drop_last, "alignment": int(stream.alignment),
        "algorithm_options": repr(sorted(stream.algorithm_options.items())),
        "max_segments": getattr(stream, "max_segments", None),
    }  # fmt: skip


def check_settings(state: Mapping, current: Mapping) -> None:
    """Refuse a state saved with other settings, naming the setting, both values and the fix. A state saved
    before settings were recorded has none and is not checked.

    Raises:
        ValueError: a setting differs, or ``settings`` is not a dict.
    """
    saved = state.get("settings")
    if saved is None:
        return
    if not isinstance(saved, Mapping):
        raise ValueError(f"not a PackingStream state: settings is {saved!r}, expected a dict")
    for name, value in current.items():
        if name in saved and saved[name] != value:
            raise ValueError(
                f"the restored state was saved with {name}={saved[name]!r} but this stream has {name}={value!r}; "
                f"the packs would differ — build the stream with {name}={saved[name]!r}, or start the epoch with "
                "set_epoch instead of loading the state"
            )
