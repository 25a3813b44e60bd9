"""Files that ship inside the wheel: bundled presets, and the cache of made-once data."""

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


def ensure_synthetic_data(box: int, val_box: int, seed: int, root: Path) -> tuple[Path, Path, bool]:
    """A synthetic dataset under `root`, made on first use; returns (train, val, made_now)."""
    folder = root / f"synth-{box}-{val_box}-seed{seed}"
    train, val = folder / "train.h5", folder / "val.h5"
    made = False
    if not (train.is_file() and val.is_file()):
        from tuneup.trainer.synth import synthesize

        result = synthesize(folder, box=box, val_box=val_box, seed=seed)
        train, val, made = result.train_path, result.val_path, True
    from tuneup.hardware.machine import has_module

    if has_module("nvidia.dali"):
        _ensure_npy_copies((train, val))  # so the data stage can probe DALI too
    return train, val, made


def _ensure_npy_copies(boxes: tuple[Path, ...]) -> None:
    """The channels-last .npy copies the DALI loader reads, next to each box."""
    from tuneup.trainer.npy import convert_box, npy_paths

    for h5 in boxes:
        if not all(p.is_file() for p in npy_paths(h5, h5.parent)):
            convert_box(h5, h5.parent)
