"""The data a verify's runs read: the user's own files where the session named them, else
a synthetic box of the real run's size, made once in tuneup's cache where the disk has
room for it, else the largest that fits, said.

Which boxes the real run reads is one function (`real_boxes`): the preset's `real_data`
as the session recorded it, else the tutorial's boxes on a GPU and the box the probes read
on a CPU (a smoke preset's run reads its own small box).
"""

from __future__ import annotations

import shutil
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from tuneup.bundled import cache_dir
from tuneup.config import box_bytes
from tuneup.errors import UsageError
from tuneup.export.tutorial import TUTORIAL_BOX
from tuneup.paths import space_text
from tuneup.tuning.session.datakeep import reads_npy

CACHE_FIX = "free some space there, or set TUNEUP_CACHE_DIR to a folder with room"


@dataclass(frozen=True)
class RunData:
    """What every run reads.

    Attributes:
        values: the data knobs each run's values take (paths, box sides, .npy copies).
        box: (train, validation) sides the runs read; probe_box: those the probes read.
        words: where the data came from, and any fallback, in words.
    """

    values: Mapping[str, Any] = field(default_factory=dict)
    box: tuple[int, int] = (0, 0)
    probe_box: tuple[int, int] | None = None
    words: str = ""


def real_boxes(
    session: Mapping[str, Any], values: Mapping[str, Any]
) -> tuple[tuple[int, int], str]:
    """The (train, validation) sides a real run of this session reads, and whose they are:
    the preset's `real_data` (session.json keeps the preset's document); where it says
    nothing, the tutorial's boxes on a GPU, and on a CPU the synthetic box it was probed
    on (a CPU preset is a smoke preset: its real run reads that box)."""
    document = session.get("preset_document")
    document = document if isinstance(document, Mapping) else {}
    stated = document.get("real_data")
    if isinstance(stated, Mapping) and isinstance(stated.get("box"), int):
        val = stated.get("val_box")
        side = int(stated["box"])
        return (side, int(val) if isinstance(val, int) and val > 0 else max(1, side // 2)), (
            "the preset's real_data"
        )
    if str(values.get("device") or "cuda") != "cpu":
        return TUTORIAL_BOX, "the tutorial's boxes"
    synth = document.get("synthetic_data")
    if isinstance(synth, Mapping) and synth.get("box") and synth.get("val_box"):
        return (int(synth["box"]), int(synth["val_box"])), "the preset's own synthetic box"
    return _probe_box(values) or TUTORIAL_BOX, "the box the probes read"


def fitting_box(
    wanted: tuple[int, int], floor: int, free: int, need: Callable[[tuple[int, int]], int]
) -> tuple[int, int] | None:
    """`wanted`, or the largest box halved from it (down to a side of `floor`) whose `need`
    fits in `free` bytes; None when none does."""
    box = wanted
    while need(box) > free:
        if box[0] // 2 < max(floor, 1):
            return None
        box = (box[0] // 2, max(1, box[1] // 2))
    return box


def run_data(
    session: Mapping[str, Any],
    values: Mapping[str, Any],
    box: int | None,
    say: Callable[[str], None],
    *,
    before_making: Callable[[int], None] = lambda _need: None,
) -> RunData:
    """The data for the runs (made where needed: this may take minutes for a large box).

    Args:
        box: the training box side asked for (`--box`); None: the real run's.
        before_making: hears the bytes to be made before a box is made (the budget's
            check: it may raise to refuse).

    Raises:
        UsageError: the session's own files are gone, or the box asked for (or the
            smallest fallback) does not fit the disk.
    """
    probe_box = _probe_box(values)
    crop = int(values.get("data_size") or 0)
    if box is not None and box < crop:
        raise UsageError(
            f"--box {box}: the runs crop {crop}^3 samples: give a box of {crop} or more"
        )
    if box is None:
        mine = _users_files(values)
        if mine is not None:
            return _users_data(mine, values, probe_box)
    seed = _seed(session)
    wanted, why = (
        ((box, max(1, box // 2)), "the box asked for (--box)")
        if box
        else real_boxes(session, values)
    )
    # h5py: only where a box is made or read
    from tuneup.unet.datacache import ensure_synthetic_data, synthetic_folder

    npy = reads_npy(values)
    # the baseline runs too, maybe on another loader: the copies are made for either
    copies = npy or reads_npy(session.get("base_config") or {})

    def need(sides: tuple[int, int]) -> int:
        made = synthetic_folder(cache_dir(), sides[0], sides[1], seed)
        if (made / "train.h5").is_file() and (made / "val.h5").is_file():
            return 0  # made before: read as it is
        return (box_bytes(sides[0]) + box_bytes(sides[1])) * (2 if copies else 1)

    free = _free_bytes(cache_dir())
    floor = box or (probe_box[0] if probe_box else 1)
    sides = fitting_box(wanted, floor, free, need)
    if sides is None:
        fix = "a smaller --box, or " + CACHE_FIX if box else CACHE_FIX
        raise UsageError(
            f"not enough free space in {cache_dir()} for a synthetic {wanted[0]}^3 box "
            f"(val {wanted[1]}^3): {space_text(need(wanted), free)} ({fix})"
        )
    words = f"a synthetic {sides[0]}^3 box (val {sides[1]}^3), {why}"
    if sides != wanted:
        words += (
            f", the largest that fits: {wanted[0]}^3 would "
            f"{space_text(need(wanted), free)} in {cache_dir()}"
        )
    if need(sides):
        before_making(need(sides))
        say(f"making a synthetic {sides[0]}^3 box (val {sides[1]}^3) in {cache_dir()} ...")
    train, val, _made = ensure_synthetic_data(
        sides[0], sides[1], seed, cache_dir(), npy=copies, thorough=False, say=say
    )
    return RunData(
        values=_data_values(train, val, sides, npy),
        box=sides,
        probe_box=probe_box,
        words=words,
    )


def _users_files(values: Mapping[str, Any]) -> tuple[Path, Path] | None:
    """The session's train and validation files where they are the user's (not tuneup's
    own synthetic box in its cache)."""
    paths = [values.get(key) for key in ("train_path", "val_path")]
    if not all(paths):
        return None
    train, val = (Path(str(p)).expanduser() for p in paths)
    cache = cache_dir().resolve()
    if any(p.resolve().is_relative_to(cache) for p in (train, val)):
        return None
    return train, val


def _users_data(
    files: tuple[Path, Path], values: Mapping[str, Any], probe_box: tuple[int, int] | None
) -> RunData:
    from tuneup.unet.boxfile import inspect_box  # h5py: only to read a user's box

    sides = []
    for path in files:
        if not path.is_file():
            raise UsageError(
                f"the session's data file {path} is gone: put it back, or verify on a "
                "synthetic box with --box L"
            )
        sides.append(inspect_box(path).box)
    box = (sides[0], sides[1])
    return RunData(
        values={"box_size": list(box)},
        box=box,
        probe_box=probe_box,
        words=f"your data files ({files[0].name} {box[0]}^3, {files[1].name} {box[1]}^3)",
    )


def _data_values(train: Path, val: Path, sides: tuple[int, int], npy: bool) -> dict[str, Any]:
    values: dict[str, Any] = {
        "train_path": str(train),
        "val_path": str(val),
        "box_size": list(sides),
    }
    for key, h5 in (("train", train), ("val", val)):
        data = h5.with_name(f"{h5.stem}_data.npy") if npy else None
        label = h5.with_name(f"{h5.stem}_label.npy") if npy else None
        values[f"{key}_path_npy_data"] = str(data) if data else None
        values[f"{key}_path_npy_label"] = str(label) if label else None
    return values


def _probe_box(values: Mapping[str, Any]) -> tuple[int, int] | None:
    sides = values.get("box_size")
    if isinstance(sides, (list, tuple)) and len(sides) == 2:
        return int(sides[0]), int(sides[1])
    return None


def _seed(session: Mapping[str, Any]) -> int:
    document = session.get("preset_document")
    synth = document.get("synthetic_data") if isinstance(document, Mapping) else None
    seed = synth.get("seed") if isinstance(synth, Mapping) else None
    return seed if isinstance(seed, int) else 0


def _free_bytes(folder: Path) -> int:
    existing = next((p for p in (folder, *folder.parents) if p.exists()), Path("/"))
    try:
        return shutil.disk_usage(existing).free
    except OSError:
        return 2**62  # the write itself will say what is wrong with the place
