"""Data tuneup makes once and keeps in its cache: the synthetic boxes and their .npy copies.

The cache folder itself is `tuneup.bundled.cache_dir`; this module fills it.
"""

from __future__ import annotations

import importlib.util
from pathlib import Path

from tuneup.paths import output_folder, writing
from tuneup.unet.npy import convert_box, npy_paths
from tuneup.unet.synth import synthesize

# The cache's place is the environment's to choose: the fix names the variables.
CACHE_FLAG = "TUNEUP_CACHE_DIR (or XDG_CACHE_HOME)"
CACHE_FIX = "free some space there, or set TUNEUP_CACHE_DIR to a folder with room you can write to"


def ensure_synthetic_data(box: int, val_box: int, seed: int, root: Path) -> tuple[Path, Path, bool]:
    """A synthetic dataset under `root`, made on first use; returns (train, val, made_now)."""
    folder = root / f"synth-{box}-{val_box}-seed{seed}"
    train, val = folder / "train.h5", folder / "val.h5"
    made = False
    with writing(folder, "tuneup's cache", then=CACHE_FIX):
        if not (train.is_file() and val.is_file()):
            output_folder(root, CACHE_FLAG, "tuneup's cache")
            result = synthesize(folder, box=box, val_box=val_box, seed=seed)
            train, val, made = result.train_path, result.val_path, True
        if _dali_installed():
            _ensure_npy_copies((train, val))  # so the data stage can probe DALI too
    return train, val, made


def _ensure_npy_copies(boxes: tuple[Path, ...]) -> None:
    """The channels-last .npy copies the DALI loader reads, next to each box."""
    for h5 in boxes:
        if not all(p.is_file() for p in npy_paths(h5, h5.parent)):
            convert_box(h5, h5.parent)


def _dali_installed() -> bool:
    """Whether DALI is importable, without importing it (no `nvidia` package: not installed)."""
    try:
        return importlib.util.find_spec("nvidia.dali") is not None
    except (ImportError, ValueError):
        return False
