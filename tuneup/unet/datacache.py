"""Data tuneup makes once and keeps in its cache: the synthetic boxes and their .npy copies.

The cache folder itself is `tuneup.bundled.cache_dir`; this module fills it, and mends
it: what it made is recorded when made (unet/made.py: size, time, checksum) and checked
before use, and a file found gone, cut short or changed is made again, and said. A box
made before the record existed is read once (its layout, its size) and recorded.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable
from pathlib import Path

from tuneup.bundled import read_cache_record
from tuneup.errors import UsageError
from tuneup.paths import output_folder, require_space, writing
from tuneup.unet.boxfile import inspect_box
from tuneup.unet.made import RECORD, UNRECORDED, damage, record_made
from tuneup.unet.npy import convert_box, npy_damage, npy_paths
from tuneup.unet.synth import TRAIN_STREAM, VAL_STREAM, box_bytes, synthesize, write_box

# The cache's place is the environment's to choose: the fix names the variables.
CACHE_FLAG = "TUNEUP_CACHE_DIR (or XDG_CACHE_HOME)"
CACHE_FIX = "free some space there, or set TUNEUP_CACHE_DIR to a folder with room you can write to"


def ensure_synthetic_data(
    box: int,
    val_box: int,
    seed: int,
    root: Path,
    *,
    npy: bool,
    thorough: bool = True,
    say: Callable[[str], None] | None = None,
) -> tuple[Path, Path, bool]:
    """A synthetic dataset under `root`, made on first use, checked and mended after.

    Args:
        box, val_box, seed: the dataset (`tuneup data synth`'s arguments).
        root: tuneup's cache folder.
        npy: a loader the caller will run reads the channels-last .npy copies
            (`loader(name).reads == "npy"`): they are made (and mended) beside each box.
            The caller knows which loaders it runs; what this process can import does not.
        thorough: read every file for its checksum; else only those whose size or time
            changed since they were made (a stat each: the check before each probe).
        say: hears one line when a damaged file was made again.

    Returns:
        (train, val, made_now): made_now when neither box was there.
    """
    folder = synthetic_folder(root, box, val_box, seed)
    train, val = folder / "train.h5", folder / "val.h5"
    with writing(folder, "tuneup's cache", then=CACHE_FIX):
        if not (train.exists() or val.exists()):
            _make(folder, root, box, val_box, seed, npy)
            return train, val, True
        mended = [
            f"{h5.name} was {why}"
            for h5, side, stream in ((train, box, TRAIN_STREAM), (val, val_box, VAL_STREAM))
            if (why := _mend_box(h5, side, seed, stream, thorough))
        ]
        if npy:
            mended += _mend_npy_copies((train, val), thorough)
    if mended and say is not None:
        say(f"the synthetic box in {folder}: {', '.join(mended)}: made it again")
    return train, val, False


def synthetic_folder(root: Path, box: int, val_box: int, seed: int) -> Path:
    """Where the cache under `root` keeps the synthetic dataset (box, val_box, seed)."""
    return root / f"synth-{box}-{val_box}-seed{seed}"


def _make(folder: Path, root: Path, box: int, val_box: int, seed: int, npy: bool) -> None:
    """Make the dataset (and its .npy copies where `npy`) on first use; a full disk is
    said before anything is made, and a failure leaves no empty folder."""
    need = (box_bytes(box) + box_bytes(val_box)) * (2 if npy else 1)
    require_space(folder, need, CACHE_FIX)
    new_root = not root.exists()
    output_folder(root, CACHE_FLAG, "tuneup's cache")
    try:
        made = synthesize(folder, box=box, val_box=val_box, seed=seed, fix=CACHE_FIX)
        record_made((made.train_path, made.val_path))
        if npy:
            _mend_npy_copies((made.train_path, made.val_path), thorough=False)
    except BaseException:
        for empty in (folder, root) if new_root else (folder,):
            with contextlib.suppress(OSError):
                empty.rmdir()  # only if nothing is in it
        raise


def _mend_box(h5: Path, side: int, seed: int, stream: int, thorough: bool) -> str:
    """Why the box at `h5` had to be made again ("" when it is whole)."""
    why = damage([h5], thorough=thorough).get(h5, "")
    if why == UNRECORDED:  # made before records were kept: its layout decides
        why = _unrecorded_box_damage(h5, side)
        if not why:
            record_made([h5])
    if why:
        write_box(h5, side, seed, stream=stream, fix=CACHE_FIX)
        record_made([h5])
    return why


def _unrecorded_box_damage(h5: Path, side: int) -> str:
    """What is wrong with a box no record vouches for, from its layout (HDF5 finds a file
    cut short when it opens it)."""
    try:
        info = inspect_box(h5)
    except UsageError as exc:
        return f"unreadable ({exc})"
    return "" if info.box == side else f"a {info.box}^3 box, not {side}^3"


def _mend_npy_copies(boxes: tuple[Path, ...], thorough: bool) -> list[str]:
    """The channels-last .npy copies a loader that `reads` "npy" needs, next to each box:
    made where never made (a box made for loaders that read none), made again where
    damaged; what was wrong with each, in words."""
    said = []
    for h5 in boxes:
        copies = npy_paths(h5, h5.parent)
        if _never_made(copies):
            convert_box(h5, h5.parent, fix=CACHE_FIX)
            record_made(copies)
            continue
        found = damage(copies, thorough=thorough)
        for path in [p for p, why in found.items() if why == UNRECORDED]:
            found[path] = npy_damage(path)  # its header and size decide
            if not found[path]:
                del found[path]
                record_made([path])
        if found:
            convert_box(h5, h5.parent, fix=CACHE_FIX)  # both copies, whole or not at all
            record_made(copies)
            said += [f"{path.name} was {why}" for path, why in found.items()]
    return said


def _never_made(copies: tuple[Path, ...]) -> bool:
    """None of `copies` is there, nor in the record: never made, so nothing to say."""
    known = read_cache_record(copies[0].parent / RECORD)
    return not any(path.exists() or path.name in known for path in copies)
