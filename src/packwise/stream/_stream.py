"""``PackingStream``: pack a stream of samples window by window, with bounded memory and exact resume.

The stream reads ``buffer_size`` samples (a *window*), plans them with :func:`packwise.plan.plan_packs`,
and emits the window's packs (in a seeded shuffled order, so consecutive packs are not sorted by size)
before reading the next window — windows never overlap, as in Megatron-Energon's packing dataset.
Nothing of a window is emitted before the whole window was read, so a source that raises mid-stream
never leaves a half-emitted window.

Epochs: ``set_epoch(e)`` changes which samples share a window — a seeded permutation of map-style sources
(``len`` + indexing), a seeded shift of the window boundaries for plain iterables — so neighbours are not
fixed across epochs. Same ``(seed, epoch)`` → same packs.

Position: a pack is identified by ``(window, pack)``; ``state_dict()`` holds the next one, and a restored
stream re-plans that window (deterministically) and continues from it — also in a new process. Inside a
``DataLoader`` worker the windows are dealt round-robin to the workers; :class:`PackingLoader` restores the
canonical window order, so the packs are the same whatever the number of workers.
"""

from __future__ import annotations

import dataclasses
import itertools
import operator
from collections.abc import Callable, Iterable, Iterator, Mapping

import numpy as np
from torch.utils.data import IterableDataset, get_worker_info

from ..assemble import assemble_pack, check_max_segments
from ..pipeline import OVERFLOW_POLICIES, Overflow
from ..plan import (
    ITEM_PATH_MAX,
    MAX_CAPACITY,
    align_lengths,
    check_algorithm_options,
    plan_packs,
    plan_window,
    resolve_algorithm,
)
from ._options import check_padding, segment_cap
from ._samples import _INPUT_IDS, SampleRules, one_dim
from ._state import check_settings, settings_of

OVERFLOW = OVERFLOW_POLICIES
POSITION = "stream_position"  # metadata key: per sequence, {"epoch", "window", "pack", "packs_in_window"}


def _plain_int(value):
    """A numpy integer as a Python int (JSON-safe settings); anything else unchanged, for the caller to check."""
    return int(value) if isinstance(value, np.integer) else value


class StreamSourceError(RuntimeError):
    """The source raised while producing a sample; ``sample`` is its index in the epoch's order."""

    def __init__(self, sample: int, error: BaseException) -> None:
        self.sample = sample
        super().__init__(f"source failed at sample {sample} of this epoch: {type(error).__name__}: {error}")


class PackingStream(IterableDataset, SampleRules):
    """Pack samples from a stream window by window (see the module docstring).

    Args:
        source: a map-style sequence of samples (``len`` + indexing), an iterable (iterated again every
            epoch), or a zero-argument callable returning an iterable. A sample is a mapping with
            ``input_ids (L,)`` and optionally ``labels``/``loss_mask``/``position_ids``/per-token columns
            (see :func:`packwise.assemble.assemble_pack`).
        capacity: tokens per pack.
        buffer_size: samples per window (memory is bounded by one window).
        algorithm: planner (any of ``packwise.plan.ALGORITHMS`` or an alias).
        seed: seeds the epoch order, the planners that use randomness and the pack order.
        overflow: samples longer than ``capacity``: ``truncate``, ``split`` (pieces, each its own
            sequence), ``drop`` (counted), or ``error``.
        length_fn: ``sample -> tokens``, a Python or numpy int >= 1 (default ``len(sample["input_ids"])``).
            It may over-report up to ``capacity`` (wasted room), never under-report; over ``capacity`` it must
            be the sample's token count, which ``overflow`` cuts by.
        drop_last: drop the final window when it is not full (counted in ``stats``); by default leftover
            samples are packed.
        shuffle: change window membership every epoch (see the module docstring).
        assemble: yield :class:`~packwise.assemble.PackedSequence` objects (default) or, with False, the
            planned lists of samples (for custom assembly or planning-only benchmarks).
        alignment, pad_to, pad_token_id, labels_shifted: forwarded to
            :func:`~packwise.assemble.assemble_pack`; planning uses aligned lengths.
        max_segments: a pack holds at most this many segments: ``max_segments`` documents, one fewer with
            ``pad_to`` (its tail padding is a segment) — what ``collate_packs(max_segments=...)`` pads to.
        multi_token_prediction: mark every pack for Megatron MTP (``consumer.multi_token_prediction``): then
            ``to_packed_seq_params(pack)`` and the collated batches give MTP's physical boundaries by default.
        **algorithm_options: options of the planner (``delta`` for ``balanced_greedy_knapsack``).

    Attributes:
        stats: samples read, truncated, split and dropped (and their tokens) by *this object's* iterations.
            Not part of :meth:`state_dict`: after a resume it counts from the window the stream resumes in
            (that window's samples are read again to rebuild its plan), so sum it over a run's processes only
            when none resumed mid-window.

    Raises:
        ValueError: ``buffer_size < 1``, ``capacity < 1`` (numpy integers are taken; bools and floats are not),
            ``pad_to > capacity``, ``pad_to`` or ``alignment`` over ``2**31 - 1``, a negative ``pad_token_id``,
            an unknown overflow policy or algorithm; while iterating, a ``length_fn`` value that is not an int
            ``>= 1``, under-reports, or over ``capacity`` disagrees with the sample's ``input_ids``; without
            ``length_fn``, ``input_ids`` that are not 1-D or a sample whose ``["input_ids"]`` raises (all named).
            A pack that fails to assemble leaves :meth:`state_dict` AT that pack: a resume raises again.
        TypeError: a source that is neither iterable nor callable, or an option the algorithm does not take.

    Example:
        >>> samples = [{"input_ids": list(range(n))} for n in (3, 5, 2, 6, 4)]
        >>> stream = PackingStream(samples, capacity=8, buffer_size=5, shuffle=False)
        >>> sorted(p.cu_seqlens.diff().tolist() for p in stream)
        [[4], [5, 3], [6, 2]]
    """

    _cur: tuple[int, int, Iterator[int]] | None  # the window being emitted: (window, packs, pack starts left)
    _seen: tuple[int, int] | None  # (windows, samples) of a plain iterable, once read to its end
    _last_iterator: Iterator | None  # what the source callable returned last (refused if returned again)

    def __init__(
        self,
        source,
        *,
        capacity: int,
        buffer_size: int,
        algorithm: str = "best_fit_decreasing",
        seed: int = 0,
        overflow: Overflow = "truncate",
        length_fn: Callable[[Mapping], int] | None = None,
        drop_last: bool = False,
        shuffle: bool = True,
        assemble: bool = True,
        alignment: int = 1,
        pad_to: int | None = None,
        pad_token_id: int = 0,
        labels_shifted: bool = False,
        max_segments: int | None = None,
        multi_token_prediction: bool = False,
        **algorithm_options,
    ) -> None:
        buffer_size, capacity = _plain_int(buffer_size), _plain_int(capacity)  # numpy integers as plan_packs takes
        if isinstance(buffer_size, bool) or not isinstance(buffer_size, int) or buffer_size < 1:
            raise ValueError(f"buffer_size must be an integer >= 1 (samples per window), got {buffer_size!r}")
        if isinstance(capacity, bool) or not isinstance(capacity, int) or capacity < 1:
            raise ValueError(f"capacity must be an integer >= 1 (tokens per pack), got {capacity!r}")
        if isinstance(seed, bool) or not isinstance(seed, (int, np.integer)) or seed < 0:
            raise ValueError(f"seed must be an integer >= 0, got {seed!r}")
        check_padding(capacity, alignment=alignment, pad_to=pad_to, pad_token_id=pad_token_id)
        if overflow not in OVERFLOW:
            raise ValueError(f"unknown overflow policy {overflow!r}; use one of {', '.join(OVERFLOW)}")
        map_style = hasattr(source, "__len__") and hasattr(source, "__getitem__")
        if not (callable(source) or isinstance(source, Iterable) or map_style):
            raise TypeError(f"source must be iterable or a callable returning an iterable, got {type(source).__name__}")
        if isinstance(source, Iterator):
            raise TypeError(
                f"source is a one-shot iterator ({type(source).__name__}); every epoch reads the source again — pass "
                "a list, a map-style dataset, or a function returning a fresh iterator (lambda: my_generator())"
            )
        self.algorithm = resolve_algorithm(algorithm)
        check_algorithm_options(self.algorithm, algorithm_options)
        self.source, self.capacity, self.buffer_size = source, capacity, buffer_size
        self.seed, self.overflow, self.length_fn = int(seed), overflow, length_fn
        self.drop_last, self.shuffle, self.assemble = drop_last, shuffle, assemble
        self.alignment, self.pad_to, self.pad_token_id = alignment, pad_to, pad_token_id
        self.labels_shifted, self.max_segments = bool(labels_shifted), check_max_segments(max_segments)
        self.multi_token_prediction = bool(multi_token_prediction)
        self._max_docs = segment_cap(self.max_segments, pad_to)
        self.algorithm_options = algorithm_options
        self.epoch = 0
        self._next = (0, 0)  # (window, pack) of the next pack to emit (see the ``_next`` property)
        self._markers = False  # set by PackingLoader: report windows without packs
        self._last_iterator = None
        self.stats = {"samples": 0, "truncated": 0, "tokens_truncated": 0, "split": 0, "dropped": 0,
                      "tokens_dropped": 0, "dropped_last": 0}  # fmt: skip

    # -- epoch and position ---------------------------------------------------------------------------
    def set_epoch(self, epoch: int) -> None:
        """Start epoch ``epoch`` from its first pack."""
        self.epoch = int(epoch)
        self._next = (0, 0)

    def state_dict(self) -> dict:
        """``{"epoch", "window", "pack", "settings", "source"}``: where iteration continues (plain values).
        ``settings`` records what decides the packs (capacity, buffer_size, seed, ...): a load into a stream
        with other settings is refused."""
        pos = {"version": 1, "epoch": self.epoch, "window": self._next[0], "pack": self._next[1]}
        return {**pos, "settings": self._settings(), "source": self._source_print()}

    def _settings(self) -> dict:
        return settings_of(self)

    def _source_print(self) -> dict:
        """What a state records of the source: its number of samples when it has a length (else nothing)."""
        n = self._map_size()
        return {} if n is None else {"samples": n}

    def load_state_dict(self, state: Mapping) -> None:
        """Continue from a :meth:`state_dict` (same source, settings and seed).

        Raises:
            ValueError: a state that is not from a PackingStream, or one saved with other settings (named).
        """
        try:
            epoch, window, pack = int(state["epoch"]), int(state["window"]), int(state["pack"])
        except (KeyError, TypeError, ValueError) as e:
            raise ValueError(f"not a PackingStream state: {state!r} ({e})") from e
        if min(epoch, window, pack) < 0:
            raise ValueError(f"not a PackingStream state: {state!r} (epoch, window and pack must be >= 0)")
        check_settings(state, self._settings())
        saved, now = state.get("source") or {}, self._source_print()
        if "samples" in saved and "samples" in now and saved["samples"] != now["samples"]:
            raise ValueError(
                f"the restored state was saved over a source of {saved['samples']} samples but this stream's source "
                f"has {now['samples']}; the state is from another dataset — restore the matching state or start "
                "the epoch with set_epoch"
            )
        n = self._map_size()
        if n is not None:
            self._check_position(state, window, pack, -(-n // self.buffer_size), f"{n} samples")
        self.epoch, self._next = epoch, (window, pack)

    def _map_size(self) -> int | None:
        src = self.source
        if hasattr(src, "__len__") and hasattr(src, "__getitem__") and not isinstance(src, (str, bytes, Mapping)):
            return len(src)
        return None

    def _check_position(self, state, window: int, pack: int, windows: int, size: str) -> None:
        """A restored position must lie inside the epoch: window ``< windows``, or exactly the end
        (``windows, 0``: the epoch was finished)."""
        if window > windows or (window == windows and pack > 0):
            raise ValueError(
                f"the restored state {dict(state)!r} points at window {window}, but the source has {size} = "
                f"{windows} windows of buffer_size {self.buffer_size}; the state is from another stream or dataset "
                "(source, buffer_size or seed differ) — restore the matching state or start the epoch with set_epoch"
            )

    @property
    def _next(self) -> tuple[int, int]:
        """``(window, pack)`` of the next pack to emit. While a window is being emitted it is read off that
        window's pack iterator (packs left = its length hint), so emitting a pack costs no bookkeeping."""
        cur = self._cur
        if cur is None:
            return self._pos
        window, count, left = cur
        k = count - operator.length_hint(left)
        return (window, k) if k < count else (window + 1, 0)

    @_next.setter
    def _next(self, value: tuple[int, int]) -> None:
        self._pos, self._cur = value, None

    def __getstate__(self) -> dict:
        """Pickled (DataLoader workers) with the position only, not the current window's packs."""
        state = dict(self.__dict__)
        state["_pos"], state["_cur"] = self._next, None
        return state

    # -- iteration ------------------------------------------------------------------------------------
    def __iter__(self) -> Iterator:
        info = get_worker_info()
        worker, workers = (info.id, info.num_workers) if info is not None else (0, 1)
        start_window, start_pack = self._next
        self._seen = None  # (windows, samples) of a plain iterable, once read to its end
        for window, position, samples, last in self._windows(worker, workers, start_window):
            if self.drop_last and last and len(samples) < self.buffer_size:
                self.stats["dropped_last"] += len(samples)
                yield from self._empty(window)
                continue
            flat, starts, ends = self._plan(window, position, samples)
            count = len(starts)
            first = start_pack if window == start_window else 0
            if first and first >= count:
                raise ValueError(
                    f"the restored state points at pack {first} of window {window}, which has {count} packs; "
                    "the state is from another stream (source, capacity, buffer_size, algorithm or seed differ)"
                )
            if not count:
                yield from self._empty(window)
                continue
            left = iter(starts[first:] if first else starts)  # packs are sliced as they are emitted: none outlives
            packs = map(flat.__getitem__, map(slice, left, ends[first:] if first else ends))  # its use (C-level)
            self._cur = (window, count, left)  # the position is read off ``left`` (see ``_next``)
            try:
                if self.assemble:
                    yield from map(self._emit, packs, itertools.repeat(window), itertools.count(first),
                                   itertools.repeat(count))  # fmt: skip
                else:  # no per-pack Python: the packs are slices of the planned order
                    yield from packs
            except GeneratorExit:  # closed at a yield: the yielded pack was delivered, the position is right
                raise
            except BaseException:  # raised making pack k: ``left`` already moved past it — point back AT it,
                self._next = (window, count - operator.length_hint(left) - 1)  # so a resume raises again
                raise
            del flat, packs, left, samples, position  # not kept while the next window is read
            self._next = (window + 1, 0)
        if (self._seen is not None and self._seen[1] == 0) or self._map_size() == 0:
            raise ValueError(
                f"PackingStream epoch {self.epoch}: the source yielded no samples (an empty dataset, or a one-shot "
                "iterator already consumed); pass a non-empty source, or a callable that returns a fresh iterable"
            )
        if self._seen is not None and (start_window, start_pack) != (0, 0):  # a plain iterable: its size is now known
            state = {"epoch": self.epoch, "window": start_window, "pack": start_pack}
            windows, samples = self._seen
            self._check_position(state, start_window, start_pack, windows, f"{samples} samples (read this epoch)")

    def _empty(self, window: int) -> Iterator:
        """Tell a PackingLoader that a window produced no pack (plain iteration skips it silently)."""
        self._next = (window + 1, 0)
        if self._markers or get_worker_info() is not None:
            yield {"_packwise_empty_window": (self.epoch, window)}

    def _emit(self, group: list[Mapping], window: int, k: int, count: int):
        if not self.assemble:
            return group
        tag = {"epoch": self.epoch, "window": window, "pack": k, "packs_in_window": count}
        seqs = [{**s, POSITION: tag} for s in group]
        pack = assemble_pack(
            seqs, alignment=self.alignment, pad_to=self.pad_to, pad_token_id=self.pad_token_id,
            labels_shifted=self.labels_shifted,
        )  # fmt: skip
        if self.multi_token_prediction:  # to_packed_seq_params(pack) reads the mark: MTP's layout by default
            pack = dataclasses.replace(pack, multi_token_prediction=True)
        used = int(pack.cu_seqlens_padded[-1])
        if used > self.capacity:  # only a length_fn that under-reports samples without input_ids gets here
            raise ValueError(
                f"pack {k} of window {window} holds {used} tokens > capacity {self.capacity} (sequence lengths "
                f"{pack.lengths.tolist()}); length_fn under-reports these samples' tokens — make it return at least "
                "the tokens each sample places"
            )
        return pack

    def _source_iter(self) -> Iterable:
        src = self.source() if callable(self.source) and not isinstance(self.source, Iterable) else self.source
        if isinstance(src, Iterator) and src is self._last_iterator:
            raise TypeError("the source callable returned the same iterator again; return a fresh one every call")
        self._last_iterator = src if isinstance(src, Iterator) else None
        if not isinstance(src, Iterable):
            raise TypeError(f"the source callable returned {type(src).__name__}, not an iterable")
        return src

    def _windows(
        self, worker: int, workers: int, start_window: int
    ) -> Iterator[tuple[int, int | list[int], list, bool]]:
        """Yield ``(window, first sample position or the samples' source indices, samples, is_last)``."""
        ss = np.random.SeedSequence([self.seed, self.epoch])
        src = self.source
        if hasattr(src, "__len__") and hasattr(src, "__getitem__") and not isinstance(src, (str, bytes, Mapping)):
            n = len(src)
            order = np.random.default_rng(ss).permutation(n) if self.shuffle else np.arange(n)
            n_windows = -(-n // self.buffer_size)
            for w in range(start_window, n_windows):
                if w % workers != worker:
                    continue
                idx = order[w * self.buffer_size : (w + 1) * self.buffer_size].tolist()
                samples: list = []
                try:
                    samples.extend(map(src.__getitem__, idx))  # keeps what it read if the source raises
                except Exception as e:  # report which sample failed; nothing of this window is emitted
                    raise StreamSourceError(w * self.buffer_size + len(samples), e) from e
                yield w, idx, samples, w == n_windows - 1  # source indices: errors name the real sample
            return
        phase = int(np.random.default_rng(ss).integers(self.buffer_size)) if self.shuffle else 0
        it = iter(self._source_iter())
        position, window = 0, 0
        while True:
            size = phase if window == 0 and phase else self.buffer_size
            samples, first = [], position
            try:
                samples.extend(itertools.islice(it, size))  # keeps what it read if the source raises
            except Exception as e:
                raise StreamSourceError(position + len(samples), e) from e
            position += len(samples)
            if not samples:
                self._seen = (window, position)
                return
            last = len(samples) < size
            if window >= start_window and window % workers == worker:
                yield window, first, samples, last
            if last:
                self._seen = (window + 1, position)
                return
            window += 1

    def _plan(self, window: int, base: int | list[int], samples: list[Mapping]) -> tuple[list, list[int], list[int]]:
        """Plan one window -> ``(flat, starts, ends)``: the samples in plan order and each pack's slice of them,
        packs in emission order (a seeded permutation: part of the resume position)."""
        at = base.__getitem__ if isinstance(base, list) else base.__add__  # sample j's index in the source
        if self.length_fn is not None:
            lengths = self._reported_lengths(samples, at)  # ints >= 1, checked without per-sample Python
        else:
            fast: np.ndarray | None
            try:  # C-level maps: no per-sample Python frame
                ids = list(map(_INPUT_IDS, samples))
                fast = np.fromiter(map(len, ids), np.int64, len(ids))
                if not one_dim(ids):  # (1, L) arrays have len 1: refuse them, named below
                    fast = None
                del ids
            except Exception:  # find and name the bad sample
                fast = None
            if fast is None:
                fast = np.asarray([self._length(s, at(j)) for j, s in enumerate(samples)], dtype=np.int64)
            lengths = fast
            if lengths.size and lengths.min() < 1:
                j = int(np.flatnonzero(lengths < 1)[0])
                raise ValueError(f"sample {at(j)} has {int(lengths[j])} tokens; every sample needs at least one")
        self.stats["samples"] += len(samples)
        if self.length_fn is not None:
            self._check_reported(samples, lengths, at)
        kept = samples
        if lengths.size and lengths.max() > self._limit:  # rare: rebuild the window with the overflow policy applied
            kept, lengths = self._apply_overflow(samples, lengths, at)
        if not kept:
            return [], [], []
        ss = np.random.SeedSequence([self.seed, self.epoch, window])
        plan_seed, order_seed = (int(x) for x in ss.generate_state(2))
        costs = align_lengths(lengths, self.alignment)
        if (
            self.algorithm == "best_fit_decreasing"
            and self._max_docs is None
            and costs.shape[0] <= ITEM_PATH_MAX
            and self.capacity <= MAX_CAPACITY
            and costs.max() <= self.capacity
        ):  # else plan_packs, which also refuses what the window planner does not take
            order, offsets = plan_window(costs, self.capacity)  # plan_packs' plan, less Python (see _window)
        else:
            plan = plan_packs(
                lengths, capacity=self.capacity, algorithm=self.algorithm, seed=plan_seed,
                alignment=self.alignment, max_sequences_per_pack=self._max_docs, **self.algorithm_options,
            )  # fmt: skip
            order, offsets = plan.order, plan.offsets
        flat = np.fromiter(kept, object, len(kept))[order].tolist()  # samples in plan order: C-level passes
        perm = np.random.default_rng(order_seed).permutation(offsets.shape[0] - 1)
        return flat, offsets[perm].tolist(), offsets[perm + 1].tolist()
