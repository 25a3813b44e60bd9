"""What the GPU suite's step scripts share: model sizes per mode, atomic JSON writes, peaks,
the checkout's commit.

Imports neither torch nor tuneup at module level, so the driver can use it too.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
from pathlib import Path
from typing import Any

# The tutorial's full-scale U-Net at batch 64 on a GPU; a tiny one for the CPU dry run.
MODEL = {
    "gpu": {"width": 64, "levels": 6, "data_size": 64, "global_batch_size": 64, "box": 128},
    "cpu": {"width": 4, "levels": 2, "data_size": 8, "global_batch_size": 4, "box": 32},
}


def model_values(mode: str) -> dict[str, Any]:
    """The model and batch knobs of `mode` ("gpu" or "cpu") as TrainConfig values."""
    shape = MODEL[mode]
    batch = shape["global_batch_size"]
    return {
        "device": "cuda" if mode == "gpu" else "cpu",
        "width": shape["width"],
        "levels": shape["levels"],
        "data_size": shape["data_size"],
        "global_batch_size": batch,
        "base_batch_size": batch,
        "Nsamples_val": 0,
    }


def write_json(path: Path, data: Any) -> None:
    """Write `data` to `path` through a temporary file, so a reader never sees half of it."""
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    tmp.write_text(json.dumps(data, indent=2, default=str) + "\n")
    os.replace(tmp, path)


def read_json(path: Path) -> Any:
    """The JSON in `path`; None when it is missing or not (yet) valid."""
    try:
        return json.loads(path.read_text())
    except (OSError, ValueError):
        return None


def last_json_line(text: str) -> dict[str, Any] | None:
    """The last line of `text` that is a JSON object."""
    for line in reversed(text.splitlines()):
        line = line.strip()
        if line.startswith("{"):
            try:
                value = json.loads(line)
            except ValueError:
                continue
            if isinstance(value, dict):
                return value
    return None


def slug(text: str) -> str:
    """A folder-safe lower-case name: "NVIDIA H100 80GB HBM3" -> "h100-80gb-hbm3"."""
    text = re.sub(r"^nvidia\s+", "", text.strip(), flags=re.IGNORECASE)
    return re.sub(r"[^a-z0-9]+", "-", text.lower()).strip("-") or "unknown"


def peak_tflops(gpu_name: str | None, precision: str) -> tuple[float | None, str]:
    """The dense peak TFLOP/s of `gpu_name` at `precision` from tuneup's table, and why not."""
    if not gpu_name:
        return None, "no GPU"
    from tuneup.unet.flops import peak_tflops as lookup

    value = lookup(gpu_name, precision)
    if value is None:
        return None, f"no peak for {gpu_name!r} at {precision}"
    return value, "tuneup.unet.flops.PEAK_TFLOPS"


_GIT: dict[str, Any] = {}


def git_info(root: Path) -> dict[str, Any]:
    """The commit of the checkout at `root`, whether it has uncommitted changes, in words
    (asked once a process: a run's figures and its prediction name the same commit)."""
    if not _GIT:
        try:
            head = _git(root, "rev-parse", "--short", "HEAD")
            dirty = _git(root, "status", "--porcelain", "--untracked-files=no")
            _GIT.update(commit=head or None, dirty=bool(dirty))
            _GIT["describe"] = f"{head}{' (with uncommitted changes)' if dirty else ''}" or "-"
        except (OSError, subprocess.SubprocessError):
            _GIT.update(commit=None, dirty=None, describe="not a git checkout")
    return _GIT


def _git(root: Path, *args: str) -> str:
    """A git command's output in the checkout at `root`."""
    done = subprocess.run(
        ["git", "-C", str(root), *args], capture_output=True, text=True, timeout=10
    )
    return done.stdout.strip()
