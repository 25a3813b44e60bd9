"""The data a ladder reads: the user's file or tuneup's own synthetic box, made for the
loaders the ladder runs (`base_values`); checked before each probe, the box made again
when it went or was damaged, a user's file gone ending the ladder with the way on."""

from __future__ import annotations

import sys
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


def base_values(
    preset: ProbePreset, adapter: TrainerAdapter, data_path: Path | None, *, npy: bool
) -> dict[str, Any]:
    """The session's base config: the user's data file, else the preset's data or synthetic box.

    A data file is the tutorial's train.h5; its sibling val.h5 is the
    validation box when present (probes do not validate, so the train file
    stands in otherwise). The synthetic box is made on first use, with its .npy copies
    where a loader the session runs reads them (`npy`: `ladder_reads_npy`).
    """
    values = dict(preset.train)
    if data_path is not None:
        if not data_path.is_file():
            raise UsageError(f"no such data file: {data_path} (give the tutorial's train.h5)")
        val = data_path.with_name("val.h5")
        values["train_path"] = str(data_path.resolve())
        values["val_path"] = str((val if val.is_file() else data_path).resolve())
        return values
    synth = preset.synthetic_data
    needs_files = loader(str(values.get("data_loader_config", "lowmem"))).reads_files
    if synth and needs_files and not values.get("train_path") and adapter.data_files:
        # h5py: only when a synthetic box must be made
        from tuneup.unet.datacache import ensure_synthetic_data

        train, val, made = ensure_synthetic_data(
            synth["box"], synth["val_box"], synth.get("seed", 0), cache_dir(), npy=npy, say=_say
        )
        if made:
            print(
                f"tuneup: made a synthetic {synth['box']}^3 box in {train.parent}", file=sys.stderr
            )
        values["train_path"], values["val_path"] = str(train), str(val)
    return values


def _say(line: str) -> None:
    print(f"tuneup: {line}", file=sys.stderr)


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
