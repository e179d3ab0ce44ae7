"""One home per default and per choice: every CLI default of a PackingConfig field is the config's default, and
every closed choice a command takes is its ``Literal``'s values (typer turns the ``Literal`` into the choice)."""

from __future__ import annotations

from typing import Literal, get_args, get_origin

import typer
import typer.testing

from packwise.cli import app
from packwise.cli._options import CHOICES, DEFAULTS, MULTIMODAL_FLAGS, Engine
from packwise.cli._pack import CONFIG_FLAGS
from packwise.config import Multimodal, PackingConfig
from packwise.files import FORMATS
from packwise.pipeline import OVERFLOW_POLICIES

#: Options named like a PackingConfig field that mean something else: (command, option) -> what they are.
NOT_CONFIG = {
    ("plan", "capacity"): "a comma list of capacities to compare (2048,4096,8192)",
    ("plan", "algorithm"): "a comma list of algorithms to compare, or all",
}


def _commands() -> dict:
    group = typer.main.get_command(app)
    commands = dict(group.commands)
    config = commands.pop("config")
    commands.update({f"config {name}": cmd for name, cmd in config.commands.items()})
    return commands


def test_commands_listed():
    assert sorted(_commands()) == ["config show", "inspect", "pack", "plan", "report", "verify"]


def test_every_config_default_is_the_configs():
    fields = {**PackingConfig.model_fields, **{k: Multimodal.model_fields[k] for k in MULTIMODAL_FLAGS}}
    seen = []
    for command_name, command in _commands().items():
        for param in command.params:
            if param.name in fields and (command_name, param.name) not in NOT_CONFIG:
                default = fields[param.name].get_default(call_default_factory=True)
                assert param.default == default, (command_name, param.name, param.default, default)
                seen.append((command_name, param.name))
    pack_fields = sorted(name for command_name, name in seen if command_name == "pack")
    assert pack_fields == sorted(CONFIG_FLAGS)  # every flag that reaches the config has the config's default
    assert (DEFAULTS["capacity"], DEFAULTS["overflow"], DEFAULTS["algorithm"]) == (
        4096,
        "truncate",
        "best_fit_decreasing",
    )
    assert (DEFAULTS["min_pixels"], DEFAULTS["max_pixels"]) == (56 * 56, 28 * 28 * 16384)


def test_every_choice_is_its_literal():
    choices = {}
    for command_name, command in _commands().items():
        for param in command.params:
            annotation = param.type_descriptor.annotation  # typer 0.29: the option's type, Optional unwrapped
            if get_origin(annotation) is Literal:
                choices[(command_name, param.name)] = get_args(annotation)
    assert choices == {
        ("pack", "overflow"): ("truncate", "split", "drop", "error"),
        ("pack", "loss_on"): ("assistant", "all"),
        ("pack", "input_format"): ("jsonl", "parquet", "hf"),
        ("pack", "engine"): ("local", "ray"),
        ("pack", "media_family"): ("qwen2.5-vl", "nemotron-omni"),
    }
    assert {name: values for (_, name), values in choices.items()} == CHOICES
    assert CHOICES["overflow"] == get_args(PackingConfig.model_fields["overflow"].annotation) == OVERFLOW_POLICIES
    assert CHOICES["loss_on"] == get_args(PackingConfig.model_fields["loss_on"].annotation)
    assert CHOICES["input_format"] == FORMATS
    assert CHOICES["engine"] == get_args(Engine)
    assert CHOICES["media_family"] == get_args(Multimodal.model_fields["media_family"].annotation)


def test_help_lists_the_choices_and_defaults():
    text = typer.testing.CliRunner().invoke(app, ["pack", "--help"], terminal_width=400, env={"COLUMNS": "400"}).output
    for values in CHOICES.values():
        assert f"<{'|'.join(values)}>" in text
    assert "[default: 4096]" in text and "[default: truncate]" in text and "[default: assistant]" in text
