"""Break-test findings in the offline pipeline / text / CLI that used to pass silently: each is refused by name."""

from __future__ import annotations

import pytest

from packwise.pipeline import pack_dataset

FIX = "remove or escape it in the text; a turn boundary comes from the chat template, an end of text from EOS"


def _literal(where: str, field: str, token: str) -> str:
    return (
        f"{where}: field '{field}' holds the literal special token {token}, which the tokenizer would encode as a "
        f"real special token (a forged turn or end of text); {FIX}"
    )


@pytest.mark.parametrize("token", ["<|object_ref_start|>", "<|object_ref_end|>", "<|box_start|>"])
def test_literal_tokens_at_the_omni_audio_ids_are_refused(token):
    """Qwen2.5's 151646-151648 (the ids Qwen2.5-Omni uses for audio) were left out of the literal check."""
    chat = [{"role": "user", "content": f"x {token} y"}, {"role": "assistant", "content": "ok"}]
    with pytest.raises(ValueError) as e:
        pack_dataset([{"messages": chat}], capacity=128)
    assert str(e.value) == _literal("list row 0", "messages[0].content", token)
    with pytest.raises(ValueError) as e:
        pack_dataset([{"prompt": f"a {token}", "completion": "b"}], capacity=128)
    assert str(e.value) == _literal("list row 0", "prompt", token)


def test_loss_on_all_over_carried_labels_is_refused():
    """loss_on='all' on rows with labels used to keep the labels' masks and report loss_on='labels'."""
    msg = (
        "list row 0: rows carry {0}; loss_on='all' (--loss-on all) would ignore them — drop the {0} column "
        "(drop_fields / --drop-field) or the flag"
    )
    with pytest.raises(ValueError) as e:
        pack_dataset([{"input_ids": [1, 2, 3, 4], "labels": [-100, -100, 3, 4]}], capacity=16, loss_on="all")
    assert str(e.value) == msg.format("labels")
    with pytest.raises(ValueError) as e:
        pack_dataset([{"input_ids": [1, 2], "loss_mask": [0, 1]}], capacity=16, loss_on="all")
    assert str(e.value) == msg.format("loss_mask")
    _, report = pack_dataset([{"input_ids": [1, 2, 3, 4]}], capacity=16, loss_on="all")  # ids only: all is true
    assert report.loss_on == "all"


@pytest.mark.parametrize("value", ["no", 0, None])
def test_skip_bad_rows_must_be_a_bool(value):
    """skip_bad_rows='no' used to be truthy, so bad rows were skipped."""
    from packwise.pipeline import PackOptions

    with pytest.raises(TypeError) as e:
        pack_dataset([{"input_ids": [1, 2]}], capacity=16, skip_bad_rows=value)
    assert str(e.value) == (
        f"skip_bad_rows must be True or False, got {value!r} ({type(value).__name__}); pass a bool "
        "(--skip-bad-rows on the command line)"
    )
    with pytest.raises(TypeError, match="skip_bad_rows must be True or False"):
        PackOptions(skip_bad_rows=value)
    assert PackOptions(skip_bad_rows=True).skip_bad_rows is True


def test_parquet_folder_with_a_jsonl_beside_is_refused(tmp_path, capsys):
    """`packwise pack DIR` with a.parquet and b.jsonl used to exit 0 without b.jsonl's rows."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    from packwise.cli import main

    folder = tmp_path / "data"
    folder.mkdir()
    pq.write_table(pa.table({"input_ids": [[1, 2, 3]]}), folder / "a.parquet")
    (folder / "b.jsonl").write_text('{"input_ids": [4, 5]}\n')
    (folder / "README.md").write_text("not data\n")
    assert main(["pack", str(folder), "-o", str(tmp_path / "out"), "--capacity", "8", "--no-report"]) == 1
    assert capsys.readouterr().err.strip() == (
        f"error: input {folder}: b.jsonl is a data file of another format beside the *.parquet files, whose rows "
        "would not be read; packwise reads one format per folder — move them into their own folder (or convert "
        "them to Parquet)"
    )
    (folder / "b.jsonl").unlink()
    assert pack_dataset(str(folder), capacity=8)[1].rows_read == 1


def test_a_seed_the_algorithm_does_not_read_is_refused():
    from packwise.pipeline import PackOptions

    with pytest.raises(ValueError) as e:
        pack_dataset([{"input_ids": [1, 2]}], capacity=16, seed=3)
    assert str(e.value) == (
        "seed=3 is not read by algorithm 'best_fit_decreasing', which is deterministic; only first_fit_shuffle "
        "reads a seed — drop the seed (--seed) or pick that algorithm"
    )
    assert PackOptions(algorithm="ffs", seed=3).seed == 3


def test_options_the_input_never_reads_are_refused(tmp_path, capsys):
    from packwise.cli import main

    rows = [{"input_ids": [1, 2, 3], "id": "a"}]
    with pytest.raises(ValueError) as e:
        pack_dataset(rows, capacity=16, drop_fields=["idd", "id"])
    assert str(e.value) == (
        "drop_fields names 'idd', which no row of list carries; fix the name or drop it from drop_fields (--drop-field)"
    )
    assert pack_dataset(rows, capacity=16, drop_fields=["id"])[1].field_values_dropped == 1
    with pytest.raises(ValueError) as e:
        pack_dataset(rows, capacity=16, chat_template="chatml")
    assert str(e.value) == (
        "chat_template is set but list holds pre-tokenized input_ids rows, which no template renders; drop "
        "chat_template (--chat-template)"
    )
    with pytest.raises(ValueError) as e:
        pack_dataset(rows, capacity=16, format="jsonl")
    assert str(e.value) == (
        "format='jsonl' is read only for a path (which file reader to use); the input is an in-memory list — drop "
        "format (--format)"
    )
    data = tmp_path / "d.jsonl"
    data.write_text('{"input_ids": [1, 2, 3]}\n')
    assert main(["pack", str(data), "-o", str(tmp_path / "o"), "--capacity", "8", "--drop-field", "meta"]) == 1
    assert capsys.readouterr().err.strip() == (
        f"error: drop_fields names 'meta', which no row of {data} carries; fix the name or drop it from drop_fields "
        "(--drop-field)"
    )


def _image_row(part: dict) -> dict:
    return {"messages": [{"role": "user", "content": [part]}, {"role": "assistant", "content": "ok"}]}


def test_unknown_keys_of_media_parts_are_refused(tmp_path):
    """{"type": "image", "path": ..., "detail": "high"} was accepted with detail ignored; a url-only part was
    refused as 'has a image path None'."""
    with pytest.raises(ValueError) as e:
        pack_dataset([_image_row({"type": "image", "path": str(tmp_path / "a.png"), "detail": "high"})], capacity=64)
    assert str(e.value) == (
        "list row 0: field 'messages[0].content[0].detail' is a key a image part does not take (packwise would "
        "ignore it); a image part holds path, type; drop the key"
    )
    with pytest.raises(ValueError) as e:
        pack_dataset([_image_row({"type": "image", "url": "https://x/a.png"})], capacity=64)
    assert str(e.value) == (
        "list row 0: field 'messages[0].content[0].url' is a URL key of a image part; URLs are not supported "
        "(packwise reads no network); download the file first and give its local path as {type: image, path}"
    )


def test_plan_packs_reads_a_generator():
    """plan_packs(generator) said 'lengths must be 1-D, got shape ()'."""
    from packwise.plan import plan_packs

    plan = plan_packs((n for n in [3, 5, 2]), capacity=8)
    got = [p.tolist() for p in plan.packs()]
    assert got == [p.tolist() for p in plan_packs([3, 5, 2], capacity=8).packs()] == [[1, 0], [2]]


def test_progress_and_algorithm_options_are_checked_up_front():
    """progress=lambda n: ... failed mid-run ('takes 1 positional argument but 2 were given'); algorithm_options=[1]
    said 'cannot convert dictionary update sequence element #0'."""
    rows = [{"input_ids": [1, 2]}]
    with pytest.raises(TypeError) as e:
        pack_dataset(rows, capacity=16, progress=lambda n: None)
    assert str(e.value) == (
        "progress(n) cannot be called as progress(stage: str, total: int) (too many positional arguments); pass a "
        "function of (stage, total) that returns advance(n: int), called with each n done"
    )
    calls = []
    pack_dataset(rows, capacity=16, progress=lambda stage, total: lambda n: calls.append((stage, total, n)))
    assert calls == [("read", 1, 1), ("plan", 2, 1), ("plan", 2, 1)]
    with pytest.raises(TypeError) as e:
        pack_dataset(rows, capacity=16, algorithm_options=[1])
    assert str(e.value) == (
        "algorithm_options must be a dict of option name to value (e.g. {'delta': 0.05} for "
        "balanced_greedy_knapsack), got [1]"
    )


def test_image_options_on_data_without_media_are_refused(tmp_path, capsys):
    from packwise.cli import main
    from packwise.multimodal import VisionSpec

    rows = [{"messages": [{"role": "user", "content": "hi"}, {"role": "assistant", "content": "yo"}]}]
    with pytest.raises(ValueError) as e:
        pack_dataset(rows, capacity=64, vision=VisionSpec(max_pixels=1000))
    assert str(e.value) == (
        "max_pixels=1000 set but list holds no images, videos or audio, so they would never be read; drop them "
        "(--min-pixels / --max-pixels / --media-root)"
    )
    assert pack_dataset(rows, capacity=64, vision=VisionSpec())[1].rows_read == 1  # the defaults: nothing set
    data = tmp_path / "d.jsonl"
    data.write_text('{"input_ids": [1, 2, 3]}\n')
    assert main(["pack", str(data), "-o", str(tmp_path / "o"), "--capacity", "8", "--min-pixels", "4096"]) == 1
    assert capsys.readouterr().err.strip() == (
        f"error: min_pixels=4096 set but {data} holds no images, videos or audio, so they would never be read; "
        "drop them (--min-pixels / --max-pixels / --media-root)"
    )
