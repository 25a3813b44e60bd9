"""Presets for probing: the base training config, the stage ladder and the probe budget.

A preset is YAML: `name`, `description`, `train` (TrainConfig knobs),
optionally `synthetic_data` (a box made on first use when no data path is
given) and `probe` (`stages`, `budget`, `hints`). Bundled presets ship in
the wheel; a path to a YAML file works too.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from tuneup.bundled import bundled_preset_names, read_bundled_preset
from tuneup.errors import UsageError
from tuneup.probe.types import Budget

DEFAULT_STAGES = (
    "workers",
    "data",
    "tf32",
    "amp",
    "optimizer",
    "jit",
    "cuda_graphs",
    "channels_last",
    "batch_size",
)
PRESET_KEYS = ("name", "description", "train", "synthetic_data", "probe")
PROBE_KEYS = ("stages", "budget", "hints")


@dataclass(frozen=True)
class ProbePreset:
    """A validated preset, ready for a probe session."""

    name: str
    description: str
    train: dict[str, Any]
    synthetic_data: dict[str, Any] | None = None
    stages: tuple[str, ...] = DEFAULT_STAGES
    budget: Budget = field(default_factory=Budget)
    hints: dict[str, Any] = field(default_factory=dict)
    source: str = ""  # the bundled name, or the file's absolute path: what --resume reloads


def load_preset(name_or_path: str) -> ProbePreset:
    """A bundled preset by name, or a preset file by path."""
    path = Path(name_or_path).expanduser()
    if path.suffix in (".yaml", ".yml") or path.is_file():
        if not path.is_file():
            raise UsageError(f"preset file not found: {path}")
        data = yaml.safe_load(path.read_text(encoding="utf-8"))
        source = str(path.resolve())
    else:
        if name_or_path not in bundled_preset_names():
            known = ", ".join(bundled_preset_names())
            raise UsageError(f"no preset named '{name_or_path}': known presets are {known}")
        data = read_bundled_preset(name_or_path)
        source = f"preset {name_or_path}"
    preset = parse_preset(data, source)
    return dataclasses.replace(preset, source=source if path.suffix else name_or_path)


def parse_preset(data: Any, source: str) -> ProbePreset:
    """Check a preset mapping; every problem is a one-line UsageError naming the key."""
    if not isinstance(data, dict):
        raise UsageError(f"{source}: a preset must be a mapping")
    for key in data:
        if key not in PRESET_KEYS:
            raise UsageError(
                f"{source}: unknown preset key '{key}' (valid: {', '.join(PRESET_KEYS)})"
            )
    probe = data.get("probe") or {}
    for key in probe:
        if key not in PROBE_KEYS:
            raise UsageError(
                f"{source}: unknown key 'probe.{key}' (valid: {', '.join(PROBE_KEYS)})"
            )
    budget_values = probe.get("budget") or {}
    known_budget = set(Budget.__dataclass_fields__)
    for key in budget_values:
        if key not in known_budget:
            valid = ", ".join(sorted(known_budget))
            raise UsageError(f"{source}: unknown key 'probe.budget.{key}' (valid: {valid})")
    from tuneup.config import build_config

    train = dict(data.get("train") or {})
    build_config(train, source=f"{source} train")  # every knob checked once, here
    return ProbePreset(
        name=str(data.get("name") or source),
        description=str(data.get("description") or ""),
        train=train,
        synthetic_data=data.get("synthetic_data"),
        stages=tuple(probe.get("stages") or DEFAULT_STAGES),
        budget=Budget(**budget_values),
        hints=dict(probe.get("hints") or {}),
    )


def default_preset_name(cuda: bool) -> str:
    """`tuneup probe` with no --preset: the CPU smoke ladder without CUDA, else generic-cuda."""
    return "generic-cuda" if cuda else "cpu-smoke"
