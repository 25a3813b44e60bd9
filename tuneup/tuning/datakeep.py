"""The data a ladder reads, checked before each probe: tuneup's own synthetic box made
again when it went, a user's file gone ending the ladder with the way on."""

from __future__ import annotations

import contextlib
from collections.abc import Callable
from pathlib import Path
from typing import Any

from tuneup.bundled import cache_dir
from tuneup.preset.load import ProbePreset
from tuneup.trainers.adapters import load_trainer
from tuneup.tuning.control import DataGone
from tuneup.tuning.journal import quoted


def data_keeper(
    preset: ProbePreset, trainer: str, base: dict[str, Any], folder: Path
) -> Callable[[], str | None] | None:
    """The check run before each probe that the data files it reads are still there.

    The synthetic box tuneup made in its cache is made again when it went (a cache
    cleaned mid-ladder), and the check says so; a file of the user's that went ends the
    ladder (DataGone: partial summary, and how to continue once it is back). None: the
    trainer reads no files.
    """
    if not load_trainer(trainer).data_files:
        return None
    files = [Path(str(base[k])) for k in ("train_path", "val_path") if base.get(k)]
    if not files:
        return None
    synth = preset.synthetic_data
    cache = cache_dir()
    ours = synth is not None and all(
        f.parent.parent == cache and f.parent.name.startswith("synth-") for f in files
    )
    made: list[Path] = []
    with contextlib.suppress(OSError):
        made = sorted(p for p in files[0].parent.iterdir() if p.is_file()) if ours else []

    def check() -> str | None:
        missing = [f for f in (made or files) if not f.is_file()]
        if not missing:
            return None
        if ours and synth is not None:
            from tuneup.unet.datacache import ensure_synthetic_data  # h5py: only now

            ensure_synthetic_data(synth["box"], synth["val_box"], synth.get("seed", 0), cache)
            return (
                f"the synthetic box in {files[0].parent} was gone ({missing[0].name} and "
                f"{len(missing) - 1} more deleted since the ladder began): made it again"
            )
        raise DataGone(
            f"the data file {missing[0]} is gone (since the ladder began): put it back, then "
            f"continue with: tuneup probe --resume {quoted(folder)}"
        )

    return check
