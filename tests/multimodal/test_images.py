"""Images end to end with real photos (scikit-image sample data): packing, Parquet, re-materialised pixel
values, MRoPE that matches the sample alone, image-safe truncation, order-independent batches, bad input."""

from __future__ import annotations

import itertools
import json

import numpy as np
import pytest
import torch
from PIL import Image

from packwise.assemble import collate_packs
from packwise.cli import main
from packwise.data import PackedParquetDataset
from packwise.multimodal import VisionSpec, mrope_position_ids
from packwise.pipeline import pack_dataset

SPEC = VisionSpec(max_pixels=112 * 112)  # 112x112 -> grid (1, 8, 8) -> 16 image tokens
PAD, VS, VE = 151655, 151652, 151653


@pytest.fixture(scope="module")
def images(tmp_path_factory):
    from skimage import data

    d = tmp_path_factory.mktemp("images")
    for name in ("astronaut", "coffee", "chelsea"):
        Image.fromarray(getattr(data, name)()).save(d / f"{name}.png")
    (d / "broken.png").write_bytes(b"not a png at all")
    return d


def chat(image=None, text="What is this?", answer="A photo."):
    content = [{"type": "image", "path": image}, {"type": "text", "text": text}] if image else text
    return {"messages": [{"role": "user", "content": content}, {"role": "assistant", "content": answer}]}


def write(path, rows):
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path


def test_image_tokens_match_grids(images):
    rows = [
        chat("astronaut.png"),
        chat(),
        {**chat(text="Compare <image> and <image>."), "images": ["chelsea.png", "coffee.png"]},
    ]
    table, report = pack_dataset(write(images / "a.jsonl", rows), capacity=256, vision=SPEC)
    for ids, grids, per_seq, lengths in zip(
        *(table.column(c).to_pylist() for c in ("input_ids", "image_grid_thw", "images_per_sequence", "seq_lengths"))
    ):
        ids = np.asarray(ids)
        assert (ids == PAD).sum() == sum(t * h * w // 4 for t, h, w in grids)
        start, img = 0, 0
        for n_img, n_tok in zip(per_seq, lengths):
            seq = ids[start : start + n_tok]
            need = sum(t * h * w // 4 for t, h, w in grids[img : img + n_img])
            assert (seq == PAD).sum() == need and (seq == VS).sum() == n_img == (seq == VE).sum()
            start, img = start + n_tok, img + n_img
    assert report.multimodal["images_packed"] == 3 and report.multimodal["images_dropped"] == 0
    assert (report.tokens_read, report.tokens_packed) == (
        report.tokens_packed,
        sum(map(len, table.column("input_ids").to_pylist())),
    )


def test_parquet_roundtrip_rematerialises_pixels_and_mrope(images, tmp_path):
    rows = [chat(), chat("astronaut.png"), chat("coffee.png", text="And this?")]
    out = tmp_path / "out"
    assert (
        main(
            [
                "pack",
                str(write(images / "b.jsonl", rows)),
                "-o",
                str(out),
                "--capacity",
                "512",
                "--max-pixels",
                str(112 * 112),
                "-q",
            ]
        )
        == 0
    )
    ds = PackedParquetDataset(out)
    pack = ds[0]
    grid = pack.media["image_grid_thw"]
    assert pack.media["pixel_values"].shape == (int(grid.prod(dim=1).sum()), 1176)
    assert pack.position_ids.shape == (3, pack.total_tokens)
    # every sequence's MRoPE positions equal the sequence alone (transformers' get_rope_index)
    from transformers import Qwen2_5_VLConfig
    from transformers.models.qwen2_5_vl.modeling_qwen2_5_vl import Qwen2_5_VLModel

    cu, img = pack.cu_seqlens.tolist(), 0
    per_seq = [(pack.columns["mm_token_type_ids"][a:b] == 1).sum() // 1 for a, b in zip(cu, cu[1:])]
    for k, (a, b) in enumerate(zip(cu, cu[1:])):
        ids = pack.input_ids[a:b]
        mm = pack.columns["mm_token_type_ids"][a:b].long()
        n = int((ids == VS).sum())
        g = grid[img : img + n]
        img += n
        alone = mrope_position_ids(ids, mm, g)
        assert torch.equal(pack.position_ids[:, a:b], alone), k
        if n:  # and equals the model class's own computation on the sample alone
            model = Qwen2_5_VLModel.__new__(Qwen2_5_VLModel)
            model.config = Qwen2_5_VLConfig()
            pos, _ = Qwen2_5_VLModel.get_rope_index(model, ids[None], mm[None], g)
            assert torch.equal(pos[:, 0], alone)
    assert sum(per_seq) > 0


def test_batches_mixing_text_and_image_packs_in_every_order(images, tmp_path):
    rows = [chat(), chat("astronaut.png"), chat(text="hello " * 40), chat("chelsea.png")]
    out = tmp_path / "out"
    assert (
        main(
            [
                "pack",
                str(write(images / "c.jsonl", rows)),
                "-o",
                str(out),
                "--capacity",
                "64",
                "--max-pixels",
                str(112 * 112),
                "-q",
            ]
        )
        == 0
    )
    ds = PackedParquetDataset(out)
    packs = [ds[i] for i in range(len(ds))]
    assert any("pixel_values" in p.media for p in packs) and any(not p.media for p in packs)

    def per_pack(batch, order):
        off, img, out = batch["cu_pack_tokens"].tolist(), 0, {}
        for pos, i in enumerate(order):
            g = packs[i].media.get("image_grid_thw", torch.zeros(0, 3, dtype=torch.int64))
            patches = int(g.prod(dim=1).sum())
            px = batch.get("pixel_values", torch.zeros(0, 1176))[img : img + patches]
            img += patches
            out[i] = (
                batch["input_ids"][0, off[pos] : off[pos + 1]],
                batch["mm_token_type_ids"][0, off[pos] : off[pos + 1]],
                batch["position_ids"][:, 0, off[pos] : off[pos + 1]],
                px,
            )
        return out

    base = per_pack(collate_packs(packs), range(len(packs)))
    for order in itertools.permutations(range(len(packs))):
        batch = collate_packs([packs[i] for i in order])
        assert isinstance(batch["mm_token_type_ids"], torch.Tensor)
        for i, got in per_pack(batch, order).items():
            assert all(torch.equal(a, b) for a, b in zip(base[i], got))


def test_truncation_never_cuts_an_image(images):
    # 112x112 image -> 16 pads + 2 markers; a long text first, so capacity 40 falls inside the image block
    row = chat(str(images / "astronaut.png"), text="x")
    row["messages"][0]["content"].insert(0, {"type": "text", "text": "word " * 20})
    table, report = pack_dataset([row], capacity=40, vision=SPEC)
    ids = np.asarray(table.column("input_ids").to_pylist()[0])
    assert (ids == PAD).sum() == 0 and (ids == VS).sum() == 0  # cut before the image: image dropped with its tokens
    assert table.column("image_paths").to_pylist() == [[]]
    assert report.multimodal["images_dropped"] == 1 and report.samples_truncated == 1
    assert report.tokens_read == report.tokens_packed + report.tokens_truncated


@pytest.mark.parametrize(
    ("row", "message"),
    [
        (chat("missing.png"), "field 'messages[0].content[0].path' names image"),
        (chat("broken.png"), "broken.png, which cannot be read"),
        (
            {**chat(text="Only <image> here."), "images": ["coffee.png", "chelsea.png"]},
            "has 2 entries but the messages hold 1 <image> placeholders",
        ),
        (
            chat("coffee.png", text="literal <|image_pad|> token"),
            "holds 13 <|image_pad|> tokens but its 1 image(s) need 12",
        ),
    ],
)
def test_bad_image_rows(images, row, message):
    path = write(images / "bad.jsonl", [row, chat()])
    with pytest.raises(ValueError) as info:
        pack_dataset(path, capacity=256, vision=SPEC)
    assert "bad.jsonl line 1" in str(info.value) and message in str(info.value)
    _, report = pack_dataset(path, capacity=256, vision=SPEC, skip_bad_rows=True)
    assert report.rows_skipped == 1 and report.samples == 1


def test_literal_vision_markers_in_text_are_rejected(images):
    row = chat(str(images / "astronaut.png"))
    row["messages"][0]["content"].insert(0, {"type": "text", "text": "<|vision_start|> hi <|vision_end|>"})
    with pytest.raises(ValueError, match=r"holds 2 <\|vision_start\|> tokens for 1 image\(s\)"):
        pack_dataset([row], capacity=256, vision=SPEC)


def test_images_only_in_messages_rows(images):
    rows = [{"prompt": "<image> what is it?", "completion": "red", "images": [str(images / "coffee.png")]}]
    with pytest.raises(ValueError, match="field 'images' holds images, which are supported in messages rows only"):
        pack_dataset(rows, capacity=256, vision=SPEC)
    rows = [
        {
            "prompt": [{"role": "user", "content": [{"type": "image", "path": "x.png"}]}],
            "completion": [{"role": "assistant", "content": "A"}],
        }
    ]
    with pytest.raises(ValueError, match="field 'prompt' holds images"):
        pack_dataset(rows, capacity=256, vision=SPEC)


def test_image_tokens_never_carry_loss(images):
    row = {
        "messages": [
            {"role": "user", "content": "Draw a cat"},
            {
                "role": "assistant",
                "content": [{"type": "image", "path": str(images / "chelsea.png")}, {"type": "text", "text": "done"}],
            },
        ]
    }
    table, _ = pack_dataset([row], capacity=256, vision=SPEC)
    ids, labels = (np.asarray(table.column(c).to_pylist()[0]) for c in ("input_ids", "labels"))
    assert (ids == PAD).sum() > 0 and (labels[ids == PAD] == -100).all()
    assert (labels != -100).sum() > 0  # the text of the reply still trains


def test_the_image_processor_is_the_pil_backend_without_a_torchvision_warning(capsys):
    """transformers 5 warns 'requires torchvision ... Install torchvision' when the default class is asked for
    without it; packwise asks for the PIL backend by name (the class the fallback gives anyway)."""
    import io
    import logging

    from packwise.multimodal._images import VisionSpec

    logging.Logger.warning_once.cache_clear()  # transformers warns once per process: let an earlier test not hide it
    buf = io.StringIO()
    handler = logging.StreamHandler(buf)
    logging.getLogger("transformers").addHandler(handler)
    try:
        proc = VisionSpec().processor()
    finally:
        logging.getLogger("transformers").removeHandler(handler)
    assert type(proc).__name__ == "Qwen2VLImageProcessorPil"
    assert "torchvision" not in buf.getvalue() + capsys.readouterr().err
