"""Golden: three conversations, hand-checked ids, labels and seq_lengths (qwen2.5, our ChatML)."""

from __future__ import annotations

from packwise.files import read_input
from packwise.pipeline import pack_dataset

S, E, NL, USER, ASSISTANT, SYSTEM = 151644, 151645, 198, 872, 77091, 8948
X = -100

CONVERSATIONS = [
    [{"role": "user", "content": "Hi"}, {"role": "assistant", "content": "Hello"}],
    [{"role": "user", "content": "2+2?"}, {"role": "assistant", "content": "4"}],
    [
        {"role": "system", "content": "Be brief."},
        {"role": "user", "content": "Bye"},
        {"role": "assistant", "content": "Ciao"},
    ],
]
# "Hi" 13048, "Hello" 9707, "2+2?" 17 10 17 30, "4" 19, "Be brief." 3430 9814 13, "Bye" 1359 68, "Ciao" 34 22516
A = [S, USER, NL, 13048, E, NL, S, ASSISTANT, NL, 9707, E, NL]  # 12 tokens
B = [S, USER, NL, 17, 10, 17, 30, E, NL, S, ASSISTANT, NL, 19, E, NL]  # 15 tokens
C = [S, SYSTEM, NL, 3430, 9814, 13, E, NL, S, USER, NL, 1359, 68, E, NL, S, ASSISTANT, NL, 34, 22516, E, NL]  # 22
# Loss only on the assistant reply and its <|im_end|>; the first label of every sequence is -100.
A_LABELS = [X] * 9 + [9707, E, X]
B_LABELS = [X] * 12 + [19, E, X]
C_LABELS = [X] * 18 + [34, 22516, E, X]


def test_three_conversation_golden(write_jsonl):
    path = write_jsonl([{"messages": c} for c in CONVERSATIONS])
    # BFD at capacity 32: C (22) opens pack 0 (free 10); B (15) does not fit -> pack 1 (free 17);
    # A (12) best fit: pack 1.
    table, report = pack_dataset(path, capacity=32)
    assert table.column("input_ids").to_pylist() == [C, B + A]
    assert table.column("labels").to_pylist() == [C_LABELS, B_LABELS + A_LABELS]
    assert table.column("seq_lengths").to_pylist() == [[22], [15, 12]]
    assert table.column("source_index").to_pylist() == [[2], [1, 0]]
    assert (report.tokens_read, report.tokens_packed, report.loss_tokens_read, report.packs) == (49, 49, 7, 2)
    assert read_input(path).kind == "messages"


def test_loss_on_all_keeps_every_target_but_boundaries(write_jsonl):
    path = write_jsonl([{"messages": CONVERSATIONS[0]}])
    table, report = pack_dataset(path, capacity=32, loss_on="all")
    assert table.column("labels").to_pylist() == [[X, *A[1:]]]
    assert report.loss_tokens_masked_at_boundary == 0  # the first label of a sample is never a target


def test_prompt_completion_strings(write_jsonl):
    path = write_jsonl([{"prompt": "2+2?", "completion": "4"}])
    table, _ = pack_dataset(path, capacity=32)
    # prompt ids + completion ids + EOS (<|im_end|>); loss on completion and EOS.
    assert table.column("input_ids").to_pylist() == [[17, 10, 17, 30, 19, E]]
    assert table.column("labels").to_pylist() == [[X, X, X, X, 19, E]]


def test_prompt_completion_messages(write_jsonl):
    row = {"prompt": [CONVERSATIONS[0][0], CONVERSATIONS[0][1], {"role": "user", "content": "Bye"}],
           "completion": [{"role": "assistant", "content": "Ciao"}]}  # fmt: skip
    table, _ = pack_dataset(write_jsonl([row]), capacity=64)
    labels = table.column("labels").to_pylist()[0]
    # the assistant turn inside the prompt carries no loss; the completion's does
    assert [t for t in labels if t != X] == [34, 22516, E]


def test_pretokenized_with_loss_mask_and_carried_column(write_jsonl):
    rows = [
        {"input_ids": [1, 2, 3], "loss_mask": [0, 1, 1], "mm": [-1, -2, -3]},
        {"input_ids": [4, 5], "loss_mask": [1, 1], "mm": [-4, -5]},
    ]
    table, report = pack_dataset(write_jsonl(rows), capacity=5)
    assert table.column("input_ids").to_pylist() == [[1, 2, 3, 4, 5]]
    assert table.column("labels").to_pylist() == [[X, 2, 3, X, 5]]
    assert table.column("mm").to_pylist() == [[-1, -2, -3, -4, -5]]  # mirrored sign: stays aligned
    assert report.tokenizer is None


def test_overflow_split_keeps_every_token():
    # 121 tokens at capacity 60 -> pieces 60 + 60 + 1, each its own sequence.
    table, report = pack_dataset([{"input_ids": list(range(1, 122))}], capacity=60, overflow="split")
    assert sorted(x for row in table.column("seq_lengths").to_pylist() for x in row) == [1, 60, 60]
    assert (report.samples_split, report.pieces_added, report.tokens_packed) == (1, 2, 121)
    assert sorted(x for row in table.column("input_ids").to_pylist() for x in row) == list(range(1, 122))
    # later pieces lose their first target to the boundary rule; counted
    assert report.loss_tokens_masked_at_boundary == 2


def test_overflow_truncate_recomputes_length_before_planning():
    rows = [{"input_ids": list(range(1, 11))}, {"input_ids": [1, 2]}]
    table, report = pack_dataset(rows, capacity=8, overflow="truncate")
    # the truncated sample plans at 8 tokens (not 10): packs [8] and [2]
    assert table.column("seq_lengths").to_pylist() == [[8], [2]]
    assert (report.samples_truncated, report.tokens_truncated, report.tokens_packed) == (1, 2, 10)


def test_overflow_drop_and_error():
    rows = [{"input_ids": list(range(1, 11))}, {"input_ids": [1, 2]}]
    table, report = pack_dataset(rows, capacity=8, overflow="drop")
    assert table.column("source_index").to_pylist() == [[1]]
    assert (report.samples_dropped, report.tokens_dropped) == (1, 10)
    try:
        pack_dataset(rows, capacity=8, overflow="error")
    except ValueError as e:
        assert "list row 0: sequence has 10 tokens > capacity 8; pass --overflow" in str(e)
    else:
        raise AssertionError("expected ValueError")


def test_hf_dataset_in_hf_dataset_out():
    datasets = __import__("pytest").importorskip("datasets")
    ds = datasets.Dataset.from_list([{"input_ids": [1, 2, 3]}, {"input_ids": [4, 5]}])
    packed, report = pack_dataset(ds, capacity=5)
    assert isinstance(packed, datasets.Dataset)
    assert packed["input_ids"] == [[1, 2, 3, 4, 5]]


def test_hf_dataset_read_without_a_progress_bar_and_its_selection_applied(capsys):
    """A plain Dataset is read as its table (no 'Flattening the indices' bar on stderr); a shuffled or
    selected one through its indices mapping, so the packs hold exactly the selected rows."""
    datasets = __import__("pytest").importorskip("datasets")
    ds = datasets.Dataset.from_list([{"input_ids": [1, 2, 3]}, {"input_ids": [4, 5]}, {"input_ids": [6]}])
    packed, _ = pack_dataset(ds, capacity=8)
    assert "Flattening" not in capsys.readouterr().err
    assert packed["input_ids"] == [[1, 2, 3, 4, 5, 6]]
    packed, report = pack_dataset(ds.select([2, 0]), capacity=8)
    assert packed["input_ids"] == [[1, 2, 3, 6]] and report.samples == 2
