"""Files that ship inside the wheel (the bundled presets), and where made-once data is cached."""

from __future__ import annotations

import os
from importlib import resources
from pathlib import Path
from typing import Any

import yaml

from tuneup.errors import UsageError

DEFAULT_PRESET = "cpu-smoke"


def bundled_preset_names() -> list[str]:
    """Names of the presets shipped with tuneup (the YAML files of `tuneup_presets`)."""
    folder = resources.files("tuneup_presets")
    return sorted(p.name[: -len(".yaml")] for p in folder.iterdir() if p.name.endswith(".yaml"))


def read_bundled_preset(name: str) -> dict[str, Any]:
    """The raw mapping of a bundled preset; an unknown name lists the known ones."""
    entry = resources.files("tuneup_presets") / f"{name}.yaml"
    if not entry.is_file():
        known = ", ".join(bundled_preset_names())
        raise UsageError(f"no bundled preset '{name}': known presets are {known}")
    data = yaml.safe_load(entry.read_text(encoding="utf-8"))
    if not isinstance(data, dict):
        raise UsageError(f"bundled preset '{name}' is not a mapping")
    return data


def cache_dir(environ: dict[str, str] | None = None) -> Path:
    """Where tuneup keeps data it makes once: $TUNEUP_CACHE_DIR, else the XDG cache."""
    env = os.environ if environ is None else environ
    if env.get("TUNEUP_CACHE_DIR"):
        return Path(env["TUNEUP_CACHE_DIR"]).expanduser()
    base = env.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base).expanduser() / "tuneup"
