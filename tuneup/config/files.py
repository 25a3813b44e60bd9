"""Configs from files and the command line: tuneup's flat YAML, the tutorial's own
format (named blocks, ``<<: *base`` merge keys) unchanged, and `--set key=value`."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

import yaml

from tuneup.bounded import OutOfBounds, yaml_load
from tuneup.bounded import read_yaml as bounded_yaml
from tuneup.config.coerce import _ALIAS_OF, build_config
from tuneup.config.knobs import _NESTED_DEFAULTS, TrainConfig, _deep_copy, knob_names
from tuneup.errors import UsageError, did_you_mean


def parse_override(text: str) -> tuple[str, Any]:
    """Split one `--set key=value` (value in YAML syntax; `a.b=v` reaches a nested key)."""
    key, sep, raw = text.partition("=")
    key = key.strip()
    if not sep or not key:
        raise UsageError(f"--set expects key=value, got {text!r} (e.g. --set amp_mode=bf16)")
    try:
        value = yaml_load(raw) if raw.strip() else None
    except OutOfBounds as exc:
        raise UsageError(f"--set {key}: the value {exc}") from None
    except yaml.YAMLError:
        value = raw
    return key, value


def apply_overrides(values: dict[str, Any], overrides: Iterable[str]) -> dict[str, Any]:
    """Return a copy of `values` with every `--set key=value` applied in order."""
    merged = _deep_copy(dict(values))
    for text in overrides:
        key, value = parse_override(text)
        head, dot, sub = key.partition(".")
        if head not in knob_names():
            raise UsageError(
                f"unknown config key '{head}' in --set: {did_you_mean(head, knob_names())}"
                "`tuneup train --help` lists every key"
            )
        if dot:
            if head not in _NESTED_DEFAULTS:
                raise UsageError(f"'{key}': only lr_schedule.* and weight_init.* have sub-keys")
            block = dict(merged.get(head) or {})
            block[sub] = value
            merged[head] = block
        else:
            merged[key] = value
            if key in _ALIAS_OF:  # an explicit modern knob beats the file's enable_* switch
                merged[_ALIAS_OF[key]] = False
    return merged


def read_yaml(path: Path) -> Any:
    """Read a YAML file within bounds (tuneup.bounded: its size, its aliases' expansion,
    text not binary); a missing, malformed or unreadable file is a one-line UsageError."""
    if not path.is_file():
        raise UsageError(f"config file not found: {path}")
    try:
        return bounded_yaml(path)
    except OutOfBounds as exc:
        raise UsageError(f"config file {path} {exc}") from None
    except OSError as exc:
        raise UsageError(f"cannot read config file {path}: {exc.strerror or exc}") from None
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f" line {mark.line + 1}" if mark is not None else ""
        problem = getattr(exc, "problem", None) or "invalid YAML"
        raise UsageError(f"{path}{where}: {problem}") from None


def _looks_like_named_blocks(data: Mapping[str, Any]) -> bool:
    names = set(knob_names())
    return bool(data) and all(k not in names and isinstance(v, Mapping) for k, v in data.items())


def load_values(path: Path, name: str | None = None) -> dict[str, Any]:
    """Knob values from a tuneup YAML file, or from block `name` of a tutorial-format file.

    The tutorial's files hold named blocks (``base: &base``, ``short: <<: *base``);
    PyYAML resolves the merge keys, so a block arrives complete.
    """
    data = read_yaml(path)
    if data is None:
        data = {}
    if not isinstance(data, Mapping):
        raise UsageError(f"{path}: expected a mapping of config keys at the top level")
    if name is not None:
        if name not in data:
            blocks = ", ".join(str(k) for k in data) or "none"
            raise UsageError(f"no config named '{name}' in {path}: it has {blocks}")
        block = data[name]
        if not isinstance(block, Mapping):
            raise UsageError(f"config '{name}' in {path} is not a mapping of keys")
        return dict(block)
    if _looks_like_named_blocks(data):
        blocks = ", ".join(str(k) for k in data)
        raise UsageError(
            f"{path} holds named configs ({blocks}): pick one with "
            f"--yaml_config {path} --config NAME"
        )
    return dict(data)


def load_config(
    path: Path | None = None,
    name: str | None = None,
    overrides: Iterable[str] = (),
    base: Mapping[str, Any] | None = None,
) -> TrainConfig:
    """Load, override and validate: the whole path from files and flags to a TrainConfig."""
    values: dict[str, Any] = dict(base or {})
    source = "config"
    if path is not None:
        values.update(load_values(path, name))
        source = f"{path}" + (f" [{name}]" if name else "")
    return build_config(apply_overrides(values, overrides), source=source)
