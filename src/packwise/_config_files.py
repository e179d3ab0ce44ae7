"""Reading ``PackingConfig`` files (yaml/toml/json) with bounded cost: aliases and duplicate keys refused, a
size cap, and validation errors that name the file and the closest option without echoing the input."""

from __future__ import annotations

import json
from pathlib import Path

#: Largest config file read (bytes): a PackingConfig is a few hundred bytes.
MAX_CONFIG_BYTES = 1 << 20


def _load_yaml(text: str, path: Path):
    """``yaml.safe_load`` without aliases: ``*name`` references are refused, so a small file cannot expand
    into a huge structure ("billion laughs"); a PackingConfig never needs them."""
    import yaml

    class NoAliases(yaml.SafeLoader):
        def compose_node(self, parent, index):
            if self.check_event(yaml.AliasEvent):
                mark = self.peek_event().start_mark
                raise ValueError(
                    f"config file {path} line {mark.line + 1}: YAML aliases (*name) are not allowed in a packwise "
                    "config; write the value out"
                )
            return super().compose_node(parent, index)

        def construct_mapping(self, node, deep=False):
            if isinstance(node, yaml.MappingNode):
                seen: dict = {}
                for key_node, _ in node.value:
                    key = self.construct_object(key_node, deep=True)
                    line = key_node.start_mark.line + 1
                    if isinstance(key, str | int | float | bool) and key in seen:
                        raise ValueError(
                            f"config file {path} line {line}: duplicate key {key!r} (first on line {seen[key]}); "
                            "YAML would silently keep the last value — keep one"
                        )
                    seen.setdefault(key, line)
            return super().construct_mapping(node, deep=deep)

    return yaml.load(text, Loader=NoAliases)  # a SafeLoader subclass


def _json_no_duplicates(path: Path):
    def hook(pairs):
        seen = set()
        for key, _ in pairs:
            if key in seen:
                raise ValueError(
                    f"config file {path}: duplicate key {key!r}; JSON would silently keep the last value — keep one"
                )
            seen.add(key)
        return dict(pairs)

    return hook


def read_config_file(p: Path) -> dict:
    """The options a ``.yaml``/``.yml``/``.toml``/``.json`` config file holds (``PackingConfig.from_file``).

    Raises:
        ValueError: the file is missing, a directory, over :data:`MAX_CONFIG_BYTES`, of an unknown extension,
            cannot be parsed (aliases and duplicate keys included), or does not hold a mapping; naming the file.
    """
    if p.is_dir():
        raise ValueError(f"config file {p} is a directory; pass a .yaml, .toml or .json file")
    if not p.is_file():
        raise ValueError(f"config file {p} does not exist")
    if p.suffix not in (".yaml", ".yml", ".toml", ".json"):
        raise ValueError(f"config file {p}: unknown extension {p.suffix!r}; use .yaml, .toml or .json")
    if p.stat().st_size > MAX_CONFIG_BYTES:
        raise ValueError(
            f"config file {p} is {p.stat().st_size} bytes, over the {MAX_CONFIG_BYTES} byte limit; is it a config?"
        )
    try:
        text = p.read_text()
        if p.suffix in (".yaml", ".yml"):
            data = _load_yaml(text, p) or {}
        elif p.suffix == ".toml":
            import tomllib

            data = tomllib.loads(text)
        else:
            data = json.loads(text, object_pairs_hook=_json_no_duplicates(p))
    except ModuleNotFoundError as e:  # tomllib on Python 3.10
        raise ValueError("TOML configs need Python >= 3.11 (tomllib); use YAML") from e
    except ValueError as e:
        if str(e).startswith(f"config file {p}"):
            raise
        raise ValueError(f"config file {p} cannot be parsed: {type(e).__name__}: {_one_line(e)}") from None
    except RecursionError:
        raise ValueError(f"config file {p} cannot be parsed: nested too deep") from None
    except Exception as e:  # yaml.YAMLError, tomllib.TOMLDecodeError, UnicodeDecodeError
        raise ValueError(f"config file {p} cannot be parsed: {type(e).__name__}: {_one_line(e)}") from None
    if not isinstance(data, dict):
        raise ValueError(f"config file {p} must hold a mapping of options, got {type(data).__name__}")
    return data


def _config_error(path: Path, e, model) -> ValueError:
    """A pydantic ValidationError as one ValueError naming the config file, each broken option and, for an
    unknown option, the closest valid name (difflib)."""
    import difflib

    lines = []
    for x in e.errors(include_url=False)[:10]:
        loc = [str(p) for p in x.get("loc", ())]
        msg = str(x.get("msg", x)).removeprefix("Value error, ")
        if x.get("type") == "extra_forbidden" and loc:
            fields = model.model_fields
            for part in loc[:-1]:  # nested sections (multimodal.*, consumer.*)
                ann = fields[part].annotation if part in fields else None
                fields = getattr(ann, "model_fields", {}) if isinstance(ann, type) else {}
            close = difflib.get_close_matches(loc[-1], list(fields), n=1)
            msg = f"unknown option {'.'.join(loc)!r}" + (f"; did you mean {close[0]!r}?" if close else "")
            lines.append(msg)
        else:
            value = x.get("input")  # containers summarised, never expanded (as cli._short)
            if isinstance(value, dict | list | tuple | set):
                value = f"<{type(value).__name__} of {len(value)} items>"
            else:
                value = repr(value)
                value = value if len(value) <= 80 else value[:77] + "..."
            lines.append(f"{'.'.join(loc)}={value}: {msg}" if loc else msg)
    return ValueError(f"config file {path}: invalid configuration: {'; '.join(lines)}")


def _one_line(e: Exception, limit: int = 300) -> str:
    text = " ".join(str(e).split())
    return text if len(text) <= limit else text[: limit - 3] + "..."


def _merge(base: dict, overrides: dict) -> dict:
    """``overrides`` on top of ``base``, nested mappings merged key by key (a CLI flag changes one field)."""
    out = dict(base)
    for key, value in overrides.items():
        if isinstance(value, dict) and isinstance(out.get(key), dict):
            out[key] = _merge(out[key], value)
        else:
            out[key] = value
    return out
