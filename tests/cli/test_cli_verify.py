"""``packwise verify`` in-process on the tiny random Llama (fast settings)."""

from __future__ import annotations

import json

import pytest

from packwise.cli import main


def test_verify_tiny_llama_json(capsys):
    rc = main(
        [
            "verify",
            "--model",
            "tiny-llama",
            "--attn",
            "sdpa,eager",
            "--num-docs",
            "2",
            "--max-tokens",
            "24",
            "--raw",
            "--json",
        ]
    )
    payload = json.loads(capsys.readouterr().out)
    assert rc == 0 and payload["isolated"] is True
    assert len(payload["packwise"]) == 8  # 2 paths x use_cache on/off x eval/train
    assert all(r["max_abs_diff"] <= 1e-5 for r in payload["packwise"])
    # the plain HF path with default settings leaks, and is reported, without failing the command
    assert [r["isolated"] for r in payload["raw"]] == [False, False]
    assert all(r["max_abs_diff"] > 1e-3 for r in payload["raw"])


def test_verify_rejects_unknown_path(capsys):
    assert main(["verify", "--attn", "magic"]) == 1
    assert "unknown path(s) ['magic']" in capsys.readouterr().err


def test_verify_tiny_qwen25_vl_mixes_text_and_image_documents(capsys):
    rc = main(
        ["verify", "--model", "tiny-qwen2.5-vl", "--attn", "sdpa", "--num-docs", "4", "--max-tokens", "48", "--json"]
    )
    payload = json.loads(capsys.readouterr().out)
    assert rc == 0 and payload["isolated"] is True
    assert all(r["max_abs_diff"] <= 1e-5 for r in payload["packwise"])
    assert all(r["grad_max_rel_diff"] is None or r["grad_max_rel_diff"] <= 1e-4 for r in payload["packwise"])


def test_verify_exits_1_when_a_path_is_not_isolated(monkeypatch, capsys):
    """A failed check must fail the command (exit 1), not only print NOT ISOLATED."""
    import dataclasses

    import packwise.verify as verify_mod

    real = verify_mod.check_equivalence

    def leaky(*args, **kwargs):
        return dataclasses.replace(real(*args, **kwargs), isolated=False)

    monkeypatch.setattr(verify_mod, "check_equivalence", leaky)
    rc = main(["verify", "--attn", "sdpa", "--num-docs", "2", "--max-tokens", "16", "--no-grads"])
    assert rc == 1
    assert "NOT ISOLATED" in capsys.readouterr().out


def test_verify_rejects_bad_numbers(capsys):
    assert main(["verify", "--atol", "-1"]) == 1
    assert "--atol -1.0: must be a finite number >= 0" in capsys.readouterr().err
    assert main(["verify", "--atol", "inf"]) == 1  # a tolerance that passes anything proves nothing
    assert "--atol inf: must be a finite number >= 0" in capsys.readouterr().err
    assert main(["verify", "--num-docs", "1"]) == 1
    assert "--num-docs 1: a pack needs 2 to 64 documents" in capsys.readouterr().err
    assert main(["verify", "--num-docs", "100000"]) == 1
    assert "--num-docs 100000: a pack needs 2 to 64 documents" in capsys.readouterr().err
    assert main(["verify", "--attn", ","]) == 1
    assert "--attn ',': no path named; use any of eager, sdpa, flex, packwise" in capsys.readouterr().err


def test_verify_data_rows_checked_like_pack(tmp_path, capsys):
    path = tmp_path / "ids.jsonl"
    path.write_text('{"input_ids": [1, 2, 3]}\n\n{"input_ids": [999999, 2, 3]}\n{"input_ids": "x"}\n')
    base = ["verify", "--attn", "sdpa", "--max-tokens", "16", "--no-grads", "--data", str(path)]
    assert main([*base, "--num-docs", "2"]) == 1  # the model's embedding has 151,665 rows
    assert (
        f"{path} line 3: field 'input_ids' has token id 999999 at position 0 outside the vocabulary [0, 151665)"
        in capsys.readouterr().err
    )
    path.write_text('{"input_ids": [1, 2, 3]}\n{"input_ids": "x"}\n')
    assert main([*base, "--num-docs", "2"]) == 1
    assert f"{path} line 2: field 'input_ids' is str, expected a list of token ids" in capsys.readouterr().err
    assert main([*base, "--num-docs", "3"]) == 1
    assert f"--data {path}: need 3 documents (--num-docs), found 2" in capsys.readouterr().err
    path.write_text('{"input_ids": [1, 2, 3]}\n{"input_ids": [4, 5, 6, 7]}\n')
    assert main([*base, "--num-docs", "2", "--json"]) == 0
    payload = json.loads(capsys.readouterr().out)
    assert (payload["documents"], payload["isolated"]) == ([3, 4], True)


def test_verify_refusals_name_paths_and_fixes_in_its_own_terms(capsys):
    """A backend refusal's fix names ``--attn`` paths (not the API's backend 'dense'), and a refused path shows
    the backend it runs."""
    from packwise.cli._verify import _refusal
    from packwise.hf import PackingRefused
    from packwise.integrations.hf._guard import check_model
    from packwise.verify import family_model

    with pytest.raises(PackingRefused) as e:
        check_model(family_model("gemma2", 64), "sdpa")
    assert e.value.reason.endswith("; use backend 'auto' or one of flash, dense")  # the API's own terms
    assert e.value.backends == ("auto", "flash", "dense")
    assert _refusal(e.value) == (
        "Gemma2Config.attn_logit_softcapping=5.0: backend 'sdpa' cannot apply logit softcapping; "
        "use --attn eager or packwise"
    )
    assert main(["verify", "--model", "kimi_linear", "--attn", "eager,packwise", "--num-docs", "2", "--no-grads"]) == 3
    [line] = [x for x in capsys.readouterr().out.splitlines() if x.startswith("REFUSED")]
    assert line.startswith(
        "REFUSED packwise/eager (backend dense), packwise/packwise (backend auto): KimiLinearDeltaAttention"
    )


def test_verify_table_says_which_rows_compare_gradients_and_help_lists_exit_3(monkeypatch, capsys):
    """The table's caption says Δgrad is compared once per path (– elsewhere) and why flex has none on CPU; a
    progress bar counts the comparisons (stderr, a terminal only); ``--help`` lists every exit code."""
    import torch

    steps = []
    import packwise.cli._verify as cli_verify

    real = cli_verify.progress_bars

    def counted(quiet):
        import contextlib

        @contextlib.contextmanager
        def bars():
            with real(quiet) as start:
                assert start is not None  # --json off: bars on (drawn only on a terminal)
                yield lambda stage, total: steps.append(total) or (lambda n: steps.append(-n))

        return bars()

    monkeypatch.setattr(cli_verify, "progress_bars", counted)
    assert main(["verify", "--attn", "sdpa,flex", "--num-docs", "2", "--max-tokens", "16"]) == 0
    text = " ".join(capsys.readouterr().out.split())  # the caption wraps at the table's width
    assert "Δgrad: every parameter gradient, compared once per path (cache off, eval); – where not compared" in text
    assert ("flex: no gradient on CPU" in text) == (not torch.cuda.is_available())
    assert steps[0] == 8 and sum(-s for s in steps[1:]) == 8  # 2 paths x 4 comparisons, each advanced once
    assert main(["verify", "--help"]) == 0
    assert "3 every path refused" in " ".join(capsys.readouterr().out.split())
