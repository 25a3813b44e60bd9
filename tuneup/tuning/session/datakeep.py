"""The data a ladder reads, checked before each probe: tuneup's own synthetic box made
again when it went or was damaged, a user's file gone ending the ladder with the way on."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

from tuneup.bundled import cache_dir
from tuneup.config import loader
from tuneup.errors import UsageError
from tuneup.preset.load import ProbePreset
from tuneup.probe.stages import current
from tuneup.trainers.adapters import TrainerAdapter
from tuneup.tuning.results.journal import quoted
from tuneup.tuning.session.control import DataGone


def reads_npy(values: Mapping[str, Any]) -> bool:
    """Whether the loader `values` run reads the boxes' channels-last .npy copies."""
    return loader(str(current(values, "data_loader_config"))).reads == "npy"


def data_keeper(
    preset: ProbePreset,
    adapter: TrainerAdapter,
    base: dict[str, Any],
    folder: Path,
    *,
    npy: bool,
) -> Callable[[], str | None] | None:
    """The check run before each probe that the data files it reads are still there.

    The synthetic box tuneup made in its cache is made again when it went (a cache
    cleaned mid-ladder) or was damaged (cut short, changed since it was made), and the
    check says so, its .npy copies too where a loader the ladder runs reads them (`npy`);
    a file of the user's that went ends the ladder (DataGone: partial summary, and how to
    continue once it is back). None: the trainer reads no files.
    """
    if not adapter.data_files:
        return None
    files = [Path(str(base[k])) for k in ("train_path", "val_path") if base.get(k)]
    if not files:
        return None
    synth = preset.synthetic_data
    cache = cache_dir()
    ours = synth is not None and all(
        f.parent.parent == cache and f.parent.name.startswith("synth-") for f in files
    )

    def check() -> str | None:
        if ours and synth is not None:
            return _mend(synth, cache, npy)
        missing = [f for f in files if not f.is_file()]
        if not missing:
            return None
        raise DataGone(
            f"the data file {missing[0]} is gone (since the ladder began): put it back, then "
            f"continue with: tuneup probe --resume {quoted(folder)}"
        )

    return check


def _mend(synth: dict[str, Any], cache: Path, npy: bool) -> str | None:
    """tuneup's own box checked by size and time (a stat a file), made again where it went
    or was damaged; what was done, in one line."""
    from tuneup.unet.datacache import ensure_synthetic_data  # h5py: only with a box of ours

    said: list[str] = []
    args = (synth["box"], synth["val_box"], synth.get("seed", 0), cache)
    try:
        train, _, made = ensure_synthetic_data(*args, npy=npy, thorough=False, say=said.append)
    except UsageError:  # it went while it was being checked or mended (a cache cleaned then)
        said.clear()
        train, _, made = ensure_synthetic_data(*args, npy=npy, thorough=False, say=said.append)
    if made:
        return (
            f"the synthetic box in {train.parent} was gone (deleted since the ladder began): "
            "made it again"
        )
    return said[0] if said else None
