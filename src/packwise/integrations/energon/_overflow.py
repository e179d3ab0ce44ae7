"""Overflow for one Energon sample with media: where a cut may fall, and what a slice of the sample keeps.

A sample is a dict of fields (``input_ids (L,)``, ``labels (L,)``, ``loss_mask (L,)``, ``position_ids (L,)`` or
``(3, L)``, per-token columns ``(L, ...)``) plus per-item media: ``image_grid_thw (I, 3)`` with
``pixel_values (Σ t·h·w, D)``; ``video_grid_thw (V, 3)`` with ``pixel_values_videos`` and
``second_per_grid_ts (V,)``; audio clips ``input_features (A, mel, frames)`` with ``feature_attention_mask (A,
frames)``. Media spans are found in the tokens: a maximal run of the image / video / audio placeholder token is
one item (in order), widened by one token on each side when that token is a start/end marker
(``<|vision_start|>``, ``<|audio_bos|>`` ...). A cut never falls inside a span (``packwise.pipeline.cut_points``,
the one overflow kernel, decides the cuts); the items whose spans lie wholly
in a slice go with it, the others are dropped and counted (``media_dropped``).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import numpy as np
import torch

from ...constants import IGNORE_INDEX

#: Per-item media fields per kind: (grid field names — the first present is used —, per-row fields sliced by
#: patches, per-item fields). Nemotron-Omni: ``image_grid_hw (I, 2)`` and ``input_features_mask (A, frames)``.
MEDIA_BY_KIND = {
    "image": (("image_grid_thw", "image_grid_hw"), ("pixel_values",), ()),
    "video": (("video_grid_thw",), ("pixel_values_videos",), ("second_per_grid_ts",)),
    "audio": ((), (), ("input_features", "feature_attention_mask", "input_features_mask")),
}


def _grid(fields: Mapping, kind: str):
    """``(name, (items, 2|3) grid)`` of ``kind`` in ``fields``: the first grid field present (else the first
    name and None); ``(None, None)`` for kinds without a grid."""
    names = MEDIA_BY_KIND[kind][0]
    found = [(n, fields[n]) for n in names if fields.get(n) is not None]
    return found[0] if found else (names[0] if names else None, None)


COUNT_FIELDS = (
    "samples_truncated", "tokens_truncated", "loss_tokens_truncated", "samples_split", "pieces_added",
    "samples_dropped", "tokens_dropped", "loss_tokens_dropped", "media_dropped", "loss_tokens_masked_at_boundary",
)  # fmt: skip


def zero_counts() -> dict[str, int]:
    """Every overflow count at 0 (the names of ``packwise.pipeline`` ``OverflowCounts``, ``media_dropped`` for
    images + videos + audio clips, and the ``PackReport`` name ``loss_tokens_masked_at_boundary``: the target
    each later piece of a split sample loses at its start)."""
    return dict.fromkeys(COUNT_FIELDS, 0)


def media_spans(ids: np.ndarray, media_tokens: Mapping[str, int], bounds: Sequence[int]) -> list[tuple[int, int, str]]:
    """``[(start, end, kind), ...]`` token spans of the media items in text order (end exclusive).

    Example:
        >>> media_spans(np.array([5, 9, 1, 1, 8, 5, 2, 2]), {"image": 1, "audio": 2}, (9, 8))
        [(1, 5, 'image'), (6, 8, 'audio')]
    """
    spans = []
    bound_ids = {int(b) for b in bounds}
    n = ids.shape[0]
    for kind, token in media_tokens.items():
        hit = np.concatenate([[False], ids == token, [False]])
        edges = np.flatnonzero(hit[1:] != hit[:-1])
        for s, e in zip(edges[::2].tolist(), edges[1::2].tolist()):
            if s > 0 and int(ids[s - 1]) in bound_ids:
                s -= 1
            if e < n and int(ids[e]) in bound_ids:
                e += 1
            spans.append((s, e, kind))
    return sorted(spans)


def check_media(
    fields: Mapping, spans: list, *, merge_size: int, where: str, media_tokens: Mapping | None = None
) -> None:
    """Raise ``ValueError`` when the media items disagree with the placeholder runs: their count, or (with
    ``media_tokens``) the placeholder tokens of each image/video, ``t·h·w / merge²``."""
    for kind, (_, _, item_fields) in MEDIA_BY_KIND.items():
        runs = [s for s in spans if s[2] == kind]
        grid_name, grid = _grid(fields, kind)
        if grid_name is not None:
            items = 0 if grid is None else int(grid.shape[0])
            if media_tokens is not None and grid is not None and items == len(runs):
                ids = fields["input_ids"]
                g_all = torch.as_tensor(grid).reshape(items, -1).tolist()
                for k, ((s, e, _), g) in enumerate(zip(runs, g_all)):
                    got, need = int((ids[s:e] == media_tokens[kind]).sum()), int(np.prod(g)) // merge_size**2
                    if got != need:
                        raise ValueError(
                            f"{where}: {kind} {k} has {got} placeholder tokens but its grid {g} needs {need} "
                            f"(t·h·w / merge_size²); the tokens and {grid_name} disagree"
                        )
        else:
            present = [fields[f] for f in item_fields if fields.get(f) is not None]
            items = int(present[0].shape[0]) if present else 0
        if items != len(runs):
            raise ValueError(
                f"{where}: {len(runs)} {kind} placeholder run(s) in input_ids but {items} {kind} item(s) in the "
                f"sample; every {kind} needs one contiguous run of its placeholder tokens (set packing_media_tokens "
                "to your model's token ids)"
            )


def _item_rows(fields: Mapping, kind: str) -> list[int]:
    _, grid = _grid(fields, kind)
    if grid is None:
        return []
    return [int(np.prod(g)) for g in torch.as_tensor(grid).reshape(int(grid.shape[0]), -1).tolist()]


def slice_sample(fields: Mapping, start: int, end: int, spans: list, token_names: Sequence[str]) -> tuple[dict, int]:
    """The tokens ``[start, end)`` of a sample and the media items whose spans lie inside; returns
    ``(fields, media items left out)``."""
    out = {}
    for name in token_names:
        value = fields.get(name)
        if value is not None:
            out[name] = value[..., start:end] if name == "position_ids" else value[start:end]
    dropped = 0
    for kind, (_, row_fields, item_fields) in MEDIA_BY_KIND.items():
        runs = [s for s in spans if s[2] == kind]
        if not runs:
            continue
        grid_name, _ = _grid(fields, kind)
        keep = [k for k, (s, e, _) in enumerate(runs) if start <= s and e <= end]
        dropped += len(runs) - len(keep)
        if not keep:
            continue
        first, last = keep[0], keep[-1] + 1
        if grid_name is not None:
            rows = np.concatenate([[0], np.cumsum(_item_rows(fields, kind))]).astype(np.int64)
            out[grid_name] = fields[grid_name][first:last]
            for f in row_fields:
                if fields.get(f) is not None:
                    out[f] = fields[f][int(rows[first]) : int(rows[last])]
        for f in item_fields:
            if fields.get(f) is not None:
                out[f] = fields[f][first:last]
    return out, dropped


def loss_tokens(fields: Mapping, start: int, end: int) -> int:
    """Loss-carrying tokens in ``[start, end)`` (labels != -100, else ``loss_mask``, else every token)."""
    labels = fields.get("labels")
    if labels is not None:
        return int((torch.as_tensor(labels[start:end]) != IGNORE_INDEX).sum())
    mask = fields.get("loss_mask")
    if mask is not None:
        return int(torch.as_tensor(mask[start:end]).bool().sum())
    return end - start


def boundary_target(fields: Mapping, start: int) -> int:
    """1 when the token at ``start`` is a target that a piece starting there loses, else 0.

    A piece is its own sequence: its first token is never predicted (no earlier token in the piece). HF rows
    (``labels`` alone, ``loss_mask`` alone, neither) lose the target of that token; a Megatron row (``labels`` +
    ``loss_mask``, ``labels = text[1:]``) loses nothing: the previous piece keeps the target of its last token.

    Example:
        >>> boundary_target({"input_ids": torch.arange(4)}, 2)
        1
        >>> boundary_target({"input_ids": torch.arange(4), "labels": torch.tensor([-100, -100, -100, 3])}, 2)
        0
    """
    labels, mask = fields.get("labels"), fields.get("loss_mask")
    if labels is not None and mask is not None:
        return 0
    if labels is not None:
        return int(int(labels[start]) != IGNORE_INDEX)
    if mask is not None:
        return int(bool(mask[start]))
    return 1


def piece_group(samples: list) -> int | None:
    """``k`` when the group is ``k + 1`` references to one sample (same ``__key__`` and restore key), else None:
    the mixin's selector asks for piece ``k`` of a split sample that way (one pack per Energon group)."""
    if len(samples) < 1:
        return None
    head = samples[0]
    ident = (getattr(head, "__key__", None), getattr(head, "__restore_key__", None))
    if len(samples) > 1 and any((getattr(x, "__key__", None), getattr(x, "__restore_key__", None)) != ident
                                for x in samples[1:]):  # fmt: skip
        return None
    return len(samples) - 1


def trl_loss_mask(fields: dict, masks: Mapping[str, torch.Tensor], *, where: str) -> dict:
    """``fields`` with TRL's ``completion_mask`` / ``assistant_masks`` (``masks``) read as one ``loss_mask``.

    Raises:
        ValueError: ``labels`` or ``loss_mask`` next to them (ambiguous targets), or a mask that is not one
            0/1 per input id.
    """
    given = [k for k in ("labels", "loss_mask") if k in fields]
    if given:
        raise ValueError(
            f"{where} has {next(iter(masks))!r} and {given[0]!r}: which tokens are targets is ambiguous; keep one "
            f"of them ({given[0]!r}, or {' + '.join(masks)} read as loss_mask)"
        )
    keep = torch.ones(fields["input_ids"].numel(), dtype=torch.bool)
    for name, m in masks.items():
        m = m.reshape(-1)
        if m.shape[0] != keep.shape[0] or not bool(((m == 0) | (m == 1)).all()):
            raise ValueError(
                f"{where}: {name} must hold one 0/1 per input id ({m.shape[0]} values, {keep.shape[0]} input ids)"
            )
        keep &= m.bool()
        fields.pop(name, None)
    fields["loss_mask"] = keep
    return fields
