"""Ray Data / Ray tasks: ``pack_ray`` packs offline across a cluster with the same packs and files as
``packwise pack`` (``--engine ray``); ``pack_dataset`` is its ``PackingConfig`` front door."""

from ._engine import GROUP_BYTES, IN_FLIGHT_PER_CPU, WRITER_WAIT_S, pack_dataset, pack_ray  # noqa: F401

__all__ = ["pack_ray"]
