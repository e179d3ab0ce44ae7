"""``PackCollator``: :func:`collate_packs` with its options fixed once (``PackingConfig.collator()``)."""

from __future__ import annotations

from collections.abc import Collection, Mapping, Sequence
from typing import Any, Literal

from ._batch import MEDIA_KEYS, PackedBatch
from ._collate import EMIT, Layout, collate_packs
from ._labels import Labels
from ._pack import PackedSequence
from ._static import check_max_segments


class PackCollator:
    """Packs -> batch, with fixed options: a ``collate_fn`` for ``DataLoader``, ``PackingLoader`` and Energon.

    Args (keyword-only): as :func:`collate_packs` (``layout``, ``labels``, ``pack_width``, ``emit``,
    ``mrope``, ``max_seqlen``, ``max_segments``, ``pad_to_multiple_of``, ``pad_values``, ``pad_token_id``), plus
    ``multi_token_prediction``: mark every batch ``multi_token_prediction=True`` (``to_packed_seq_params(batch)``
    then gives MTP's physical boundaries) and refuse packs with images or video (Megatron's MTP conditions on
    the token embeddings, not on the precomputed vision embeddings spliced into them; upstream Megatron-LM
    lacks that path, draft PR #7253).

    Example:
        >>> from packwise.assemble import assemble_pack
        >>> collate = PackCollator(labels="shifted", pack_width=4)
        >>> batch = collate([assemble_pack([{"input_ids": [5, 6, 7]}])])
        >>> batch["tokens"].tolist(), batch["labels"].tolist(), batch["loss_mask"].tolist()
        ([[5, 6, 7, 0]], [[6, 7, -100, -100]], [[1.0, 1.0, 0.0, 0.0]])
    """

    def __init__(
        self,
        *,
        layout: Layout = "thd",
        labels: Labels | None = None,
        pack_width: int | None = None,
        emit: Collection[str] = EMIT,
        mrope: bool | None = None,
        max_seqlen: Literal["int", "tensor"] = "int",
        multi_token_prediction: bool = False,
        pad_to_multiple_of: int = 1,
        pad_values: Mapping[str, float] | None = None,
        pad_token_id: int = 0,
        max_segments: int | None = None,
    ) -> None:
        self.options: dict[str, Any] = {
            "layout": layout, "labels": labels, "pack_width": pack_width, "emit": tuple(emit), "mrope": mrope,
            "max_seqlen": max_seqlen, "pad_to_multiple_of": pad_to_multiple_of, "pad_values": dict(pad_values or {}),
            "pad_token_id": pad_token_id, "max_segments": check_max_segments(max_segments),
        }  # fmt: skip
        self.multi_token_prediction = multi_token_prediction

    def __repr__(self) -> str:
        opts = ", ".join(f"{k}={v!r}" for k, v in self.options.items())
        return f"PackCollator({opts}, multi_token_prediction={self.multi_token_prediction})"

    def __call__(self, packs: Sequence[PackedSequence]) -> PackedBatch:
        if self.multi_token_prediction:
            for i, p in enumerate(packs):
                media = sorted(k for k in MEDIA_KEYS if k in p.media)
                if media:
                    raise ValueError(
                        f"pack {i} carries {media[0]} but consumer.multi_token_prediction=True: Megatron's MTP "
                        "layers embed the rolled token ids and never see the image embeddings (upstream "
                        "Megatron-LM draft #7253); train multimodal data without MTP"
                    )
        batch = collate_packs(packs, **self.options)
        if self.multi_token_prediction:  # to_packed_seq_params(batch) reads it: MTP's layout by default
            batch["multi_token_prediction"] = True
        return batch
