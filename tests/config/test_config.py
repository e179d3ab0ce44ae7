"""PackingConfig: one test per rule (the message names both keys), loading, CLI override, config show."""

from __future__ import annotations

import json

import pytest
from pydantic import ValidationError

from packwise import PackingConfig
from packwise.cli import main

RULES = [
    ({"consumer": {"mrope": True}, "emit": {"position_ids": False}}, ["consumer.mrope=True", "emit.position_ids"]),
    (
        {"consumer": {"multi_token_prediction": True}, "emit": {"position_ids": False}},
        ["consumer.multi_token_prediction=True", "emit.position_ids"],
    ),
    ({"topology": {"cp": 2}, "alignment": 2}, ["topology.cp=2", "alignment=2", "2*cp=4"]),
    (
        {"topology": {"tp": 4, "sequence_parallel": True}, "alignment": 2},
        ["topology.sequence_parallel=True", "tp=4", "alignment=2"],
    ),
    ({"topology": {"fp8": True}, "alignment": 8}, ["topology.fp8=True", "alignment=8"]),
    ({"fixed_width": True, "capacity": 4097, "alignment": 16}, ["fixed_width=True", "capacity=4097", "alignment=16"]),
    ({"topology": {"pp": 2}}, ["topology.pp=2", "fixed_width"]),
    (
        {"algorithm": "balanced_greedy_knapsack", "algorithm_options": {"delta": -1}},
        ["algorithm_options={'delta': -1}", "balanced_greedy_knapsack"],
    ),
    (
        {"algorithm": "bfd", "algorithm_options": {"delta": 3}},
        ["algorithm_options={'delta': 3}", "best_fit_decreasing", "takes no options"],
    ),
    ({"max_sequences_per_pack": 0}, ["max_sequences_per_pack=0"]),
    ({"min_packs": 8, "buffer_size": 1000}, ["min_packs=8", "buffer_size=1000"]),
    ({"pack_count_multiple": 8, "buffer_size": 1000}, ["pack_count_multiple=8", "buffer_size=1000"]),
    ({"layout": "padded", "consumer": {"varlen_only": True}}, ["layout='padded'", "consumer.varlen_only=True"]),
    (
        {"consumer": {"multi_token_prediction": True, "mrope": True}, "labels": "shifted"},
        ["consumer.multi_token_prediction=True", "consumer.mrope=True"],
    ),
    ({"topology": {"cp": 2}, "loss_reduction": "sequence_mean"}, ["topology.cp=2", "loss_reduction='sequence_mean'"]),
    ({"topology": {"cp": 2}, "layout": "padded"}, ["topology.cp=2", "layout='padded'"]),
    ({"emit": {"position_ids": False}}, ["emit.position_ids=False", "consumer.varlen_only"]),
]


@pytest.mark.parametrize(("options", "fragments"), RULES, ids=[str(i) for i in range(len(RULES))])
def test_each_rule_names_both_keys(options, fragments):
    with pytest.raises(ValidationError) as info:
        PackingConfig(**options)
    for fragment in fragments:
        assert fragment in str(info.value)


def test_valid_combinations_and_derived_alignment():
    assert PackingConfig().resolved_alignment == 1
    assert PackingConfig(topology={"tp": 4, "cp": 4, "sequence_parallel": True}).resolved_alignment == 16
    assert PackingConfig(topology={"cp": 2, "fp8": True}).resolved_alignment == 16
    assert PackingConfig(emit={"position_ids": False}, consumer={"varlen_only": True}).emit.position_ids is False
    assert PackingConfig(topology={"cp": 2}, labels="hf").topology.cp == 2  # correct by construction, not refused
    assert (
        PackingConfig(
            topology={"cp": 2}, consumer={"multi_token_prediction": True}, labels="shifted"
        ).resolved_alignment
        == 4
    )
    cfg = PackingConfig(topology={"pp": 2}, fixed_width=True, capacity=8192, labels="shifted")
    assert cfg.topology.pp == 2 and cfg.algorithm == "best_fit_decreasing"
    with pytest.raises(ValidationError):
        cfg.capacity = 1  # frozen
    with pytest.raises(ValidationError, match="Extra inputs are not permitted"):
        PackingConfig(capacty=4096)


@pytest.mark.parametrize("suffix", [".yaml", ".toml", ".json"])
def test_loading(tmp_path, suffix):
    text = {
        ".yaml": "capacity: 2048\nalgorithm: mffd\ntopology:\n  cp: 2\n",
        ".toml": 'capacity = 2048\nalgorithm = "mffd"\n[topology]\ncp = 2\n',
        ".json": json.dumps({"capacity": 2048, "algorithm": "mffd", "topology": {"cp": 2}}),
    }[suffix]
    path = tmp_path / f"cfg{suffix}"
    path.write_text(text)
    cfg = PackingConfig.from_file(path)
    assert (cfg.capacity, cfg.algorithm, cfg.resolved_alignment) == (2048, "modified_first_fit_decreasing", 4)
    assert PackingConfig.from_file(path, capacity=1024).capacity == 1024


def test_cli_config_with_flag_override(tmp_path, write_jsonl, capsys):
    cfg = tmp_path / "cfg.yaml"
    cfg.write_text("capacity: 4\nalgorithm: next_fit\n")
    data = write_jsonl([{"input_ids": [1, 2, 3]}, {"input_ids": [4, 5]}, {"input_ids": [6]}])
    assert main(["pack", str(data), "-o", str(tmp_path / "a"), "--config", str(cfg), "--json", "--no-report"]) == 0
    rep = json.loads(capsys.readouterr().out)
    assert (rep["capacity"], rep["algorithm"], rep["packs"]) == (4, "next_fit", 2)  # [3] [2, 1]
    assert (
        main(
            [
                "pack",
                str(data),
                "-o",
                str(tmp_path / "b"),
                "--config",
                str(cfg),
                "--capacity",
                "6",
                "--json",
                "--no-report",
            ]
        )
        == 0
    )
    rep = json.loads(capsys.readouterr().out)
    assert (rep["capacity"], rep["packs"]) == (6, 1)


def test_cli_rejects_a_broken_rule_before_any_work(tmp_path, write_jsonl, capsys):
    cfg = tmp_path / "cfg.yaml"
    cfg.write_text("topology:\n  pp: 4\n")
    data = write_jsonl([{"input_ids": [1, 2, 3]}])
    assert main(["pack", str(data), "-o", str(tmp_path / "out"), "--config", str(cfg)]) == 1
    err = capsys.readouterr().err
    assert "invalid configuration: topology.pp=4 needs fixed_width=True" in err
    assert not (tmp_path / "out").exists()


def test_config_show(tmp_path, capsys):
    cfg = tmp_path / "cfg.yaml"
    cfg.write_text("capacity: 8192\ntopology:\n  tp: 4\n  cp: 2\n  sequence_parallel: true\n")
    assert main(["config", "show", str(cfg), "--json"]) == 0
    shown = json.loads(capsys.readouterr().out)
    assert (shown["capacity"], shown["alignment"], shown["topology"]["tp"]) == (8192, 8, 4)
