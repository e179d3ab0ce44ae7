"""``PackingLoader``: a DataLoader over a PackingStream that keeps the canonical pack order and can resume.

Workers pack their windows in parallel; the loader buffers out-of-order packs (at most about one window
per worker) and releases them in window order, so the batches are identical for any ``num_workers`` and
``state_dict()`` is one position: the next ``(window, pack)``.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping
from functools import partial

from torch.utils.data import DataLoader

from ..assemble import as_int, collate_packs
from ._stream import POSITION, PackingStream


class PackingLoader:
    """Batches of packs from a :class:`PackingStream`, in the same order for any number of workers.

    Args:
        stream: the stream (its ``assemble`` must be True).
        batch_size: packs per batch.
        num_workers: DataLoader worker processes (windows are dealt round-robin to them).
        collate_fn: packs -> batch (default :func:`packwise.assemble.collate_packs`, with the stream's
            ``max_segments`` when it has one: every batch's ``cu_seqlens`` then has ``max_segments + 1`` entries).
        drop_last_batch: drop a final batch smaller than ``batch_size``; its packs, sequences and real tokens
            are counted in ``stats``, and an epoch in which every pack is dropped raises ``ValueError``.
        **dataloader_kwargs: forwarded to ``torch.utils.data.DataLoader`` (``batch_size`` is always None
            there: the loader batches in order itself).

    Attributes:
        stats: ``{"batches", "packs_dropped_last_batch", "sequences_dropped_last_batch",
            "tokens_dropped_last_batch"}`` summed over this loader's iterations (tokens: real, not padding).

    Example:
        >>> stream = PackingStream([{"input_ids": [1] * n} for n in (3, 5, 2, 6, 4)], capacity=8, buffer_size=5)
        >>> loader = PackingLoader(stream, batch_size=2)
        >>> [b["num_sequences"].tolist() for b in loader]
        [[2, 2], [1]]
        >>> stream = PackingStream([{"input_ids": [1] * n} for n in (3, 5, 2, 6, 4)], capacity=8, buffer_size=5)
        >>> dropping = PackingLoader(stream, batch_size=2, drop_last_batch=True)
        >>> len(list(dropping)), dropping.stats["packs_dropped_last_batch"], dropping.stats["tokens_dropped_last_batch"]
        (1, 1, 4)
        >>> loader.state_dict()["window"]
        1
    """

    def __init__(
        self,
        stream: PackingStream,
        *,
        batch_size: int = 1,
        num_workers: int = 0,
        collate_fn: Callable = collate_packs,
        drop_last_batch: bool = False,
        **dataloader_kwargs,
    ) -> None:
        if not stream.assemble:
            raise ValueError("PackingLoader needs PackingStream(assemble=True)")
        b, w = as_int(batch_size), as_int(num_workers)  # numpy ints are ints; bools, floats and strings are not
        if b is None or b < 1:
            raise ValueError(f"batch_size must be an integer >= 1, got {batch_size!r}")
        if w is None or w < 0:
            raise ValueError(f"num_workers must be an integer >= 0 (DataLoader worker processes), got {num_workers!r}")
        batch_size, num_workers = b, w
        m = stream.max_segments
        if collate_fn is collate_packs and m is not None:
            if batch_size > 1:
                raise ValueError(
                    f"PackingLoader(batch_size={batch_size}) over PackingStream(max_segments={m}): one THD row of "
                    f"{batch_size} packs holds up to {batch_size * m} segments, more than max_segments={m}; use "
                    f"batch_size=1, or collate_fn=PackCollator(layout='padded', max_segments={m}) (per row)"
                )
            collate_fn = partial(collate_packs, max_segments=m)
        self.stream, self.batch_size, self.num_workers = stream, batch_size, num_workers
        self.collate_fn, self.drop_last_batch, self.kwargs = collate_fn, drop_last_batch, dataloader_kwargs
        self._next = (stream.state_dict()["window"], stream.state_dict()["pack"])
        self.stats = {"batches": 0, "packs_dropped_last_batch": 0, "sequences_dropped_last_batch": 0,
                      "tokens_dropped_last_batch": 0}  # fmt: skip

    def state_dict(self) -> dict:
        """The next pack to deliver: ``{"epoch", "window", "pack", "settings", "source"}`` (the stream's settings
        and what it records of the source: see ``PackingStream.state_dict``)."""
        pos = {"version": 1, "epoch": self.stream.epoch, "window": self._next[0], "pack": self._next[1]}
        return {**pos, "settings": self.stream._settings(), "source": self.stream._source_print()}

    def load_state_dict(self, state: Mapping) -> None:
        """Continue from :meth:`state_dict` (same stream settings)."""
        self.stream.load_state_dict(state)
        self._next = (int(state["window"]), int(state["pack"]))

    def set_epoch(self, epoch: int) -> None:
        self.stream.set_epoch(epoch)
        self._next = (0, 0)

    def __iter__(self) -> Iterator:
        self.stream.load_state_dict(self.state_dict())
        self.stream._markers = True
        loader = DataLoader(self.stream, batch_size=None, num_workers=self.num_workers, **self.kwargs)
        waiting: dict[tuple[int, int], object] = {}
        sizes: dict[int, int] = {}
        batch: list = []
        yielded = self._next != (0, 0)  # resumed mid-epoch: batches were delivered before the state was saved
        for item in loader:
            if isinstance(item, dict) and "_packwise_empty_window" in item:
                sizes[item["_packwise_empty_window"][1]] = 0
            else:
                tag = item.metadata[POSITION][0]
                window, k, count = tag["window"], tag["pack"], tag["packs_in_window"]
                waiting[(window, k)] = item
                sizes[window] = count
            while True:
                window, k = self._next
                if sizes.get(window) == 0 or (window in sizes and k >= sizes[window]):
                    sizes.pop(window, None)
                    self._next = (window + 1, 0)
                    continue
                if (window, k) not in waiting:
                    break
                batch.append(waiting.pop((window, k)))
                if k + 1 < sizes[window]:
                    self._next = (window, k + 1)
                else:  # the window's last pack: a state saved now must point at the next window
                    del sizes[window]
                    self._next = (window + 1, 0)
                if len(batch) == self.batch_size:
                    yielded = True
                    self.stats["batches"] += 1
                    yield self.collate_fn(batch)
                    batch = []
        if batch and not self.drop_last_batch:
            self.stats["batches"] += 1
            yield self.collate_fn(batch)
        elif batch:
            self._drop_last(batch, whole_epoch=not yielded)

    def _drop_last(self, batch: list, *, whole_epoch: bool) -> None:
        """Count the packs of a dropped final batch; refuse an epoch in which every pack was dropped."""
        tokens = sum(int(p.cu_seqlens[-1]) for p in batch)
        sequences = sum(len(p.cu_seqlens) - 1 for p in batch)
        self.stats["packs_dropped_last_batch"] += len(batch)
        self.stats["sequences_dropped_last_batch"] += sequences
        self.stats["tokens_dropped_last_batch"] += tokens
        if whole_epoch:
            raise ValueError(
                f"PackingLoader(batch_size={self.batch_size}, drop_last_batch=True) dropped the whole epoch: it "
                f"made {len(batch)} packs ({sequences} sequences, {tokens} tokens), fewer than batch_size "
                f"{self.batch_size}; use batch_size <= {len(batch)} or drop_last_batch=False"
            )
