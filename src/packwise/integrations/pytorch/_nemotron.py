"""Nemotron-Omni media of a packed Parquet row (``media_family: nemotron-omni`` in metadata.json) back into
per-sequence tensors, for :class:`PackedParquetDataset`: RADIO ``pixel_values (patches, 3·p²)`` with
``image_grid_hw (I_i, 2)`` from ``image_paths``/``image_grid_thw`` (``(1, grid_h, grid_w)``), Parakeet
``input_features (A_i, frames, mel)`` with ``input_features_mask (A_i, frames)`` from ``audio_paths``/
``audio_frames``, and 1-D ``position_ids`` from 0 per sequence (the NemotronH LM has no rotary embedding)."""

from __future__ import annotations

from dataclasses import fields

import torch

from ...multimodal import AudioSpec, NemotronOmniSpec, load_audio, load_image, nemotron_audio, nemotron_images
from ._media import _full


def omni_spec(multimodal: dict) -> NemotronOmniSpec:
    """The :class:`NemotronOmniSpec` recorded in metadata.json's ``multimodal.nemotron_omni`` (default sizes
    when absent)."""
    names = {f.name for f in fields(NemotronOmniSpec)}
    return NemotronOmniSpec(**{k: v for k, v in (multimodal.get("nemotron_omni") or {}).items() if k in names})


def add_nemotron(row, sequences: list[dict], multimodal: dict, *, where: str) -> None:
    """Give every sequence its Nemotron-Omni media tensors and 1-D positions (see the module docstring).

    Raises:
        ValueError: an image or clip missing or undecodable, or whose grid / mel frames differ from what was
            recorded at pack time (the file changed), naming ``where`` and the fix.
    """
    spec = omni_spec(multimodal)
    for seq in sequences:
        seq["position_ids"] = torch.arange(seq["input_ids"].numel(), dtype=torch.int64)
    if "image_paths" in row.column_names:
        paths = row.column("image_paths")[0].as_py()
        recorded = [g[1:] for g in row.column("image_grid_thw")[0].as_py()]
        images = [load_image(_full(p, multimodal), where) for p in paths]
        grids = [list(spec.grid(im.height, im.width)) for im in images]
        if grids != recorded:
            raise ValueError(
                f"{where}: images changed since packing (grids {grids} vs recorded {recorded}); re-run packwise pack"
            )
        _split(sequences, row.column("images_per_sequence")[0].as_py(), images, where, "images",
               lambda ims: dict(zip(("pixel_values", "image_grid_hw"), nemotron_images(ims, spec))))  # fmt: skip
    if "audio_paths" in row.column_names:
        paths = row.column("audio_paths")[0].as_py()
        waves = [load_audio(_full(p, multimodal), AudioSpec(sampling_rate=spec.sampling_rate), where) for p in paths]
        frames = [len(w) // spec.hop_length for w in waves]
        if frames != row.column("audio_frames")[0].as_py():
            raise ValueError(
                f"{where}: audio clips changed since packing (mel frames {frames} vs recorded "
                f"{row.column('audio_frames')[0].as_py()}); re-run packwise pack"
            )
        _split(sequences, row.column("audios_per_sequence")[0].as_py(), waves, where, "clips",
               lambda ws: dict(zip(("input_features", "input_features_mask"), nemotron_audio(ws, spec))))  # fmt: skip


def _split(sequences: list[dict], per_seq: list[int], items: list, where: str, name: str, encode) -> None:
    first = 0
    for seq, n in zip(sequences, per_seq):
        if n:
            seq.update(encode(items[first : first + n]))
        first += n
    if first != len(items) or len(per_seq) != len(sequences):
        raise ValueError(
            f"{where}: the per-sequence counts sum to {first} but the pack lists {len(items)} {name}; the data was "
            "modified — re-run packwise pack"
        )
