"""Convert an HDF5 box into two channels-last ``.npy`` files (``tuneup data convert``).

DALI's numpy reader and memory-mapped loaders want plain arrays with the
channels last, ``(L, L, L, C)``, while the tutorial's HDF5 stores them first,
``(C, L, L, L)``. The copy is streamed in slabs along the first spatial axis
into a memory-mapped output, so converting a 1024^3 box (36 GiB) needs a few
megabytes of RAM, not the box.
"""

from __future__ import annotations

import contextlib
import os
import secrets
from pathlib import Path

import h5py
import numpy as np

from tuneup.errors import UsageError
from tuneup.paths import make_output_folder, require_space
from tuneup.unet.boxfile import DTYPE, HYDRO, NBODY, inspect_box

# Voxels per channel in one slab (at least one plane of the box): a few MB per
# slab, whatever L is.
_SLAB_ELEMENTS = 2**16
# What `tuneup data convert` users change when the place is full or cannot be written.
FIX = "choose another --out"


def npy_paths(h5_path: Path, out_dir: Path) -> tuple[Path, Path]:
    """Where :func:`convert_box` writes the input and target arrays of ``h5_path``.

    Returns:
        ``(out_dir/<stem>_data.npy, out_dir/<stem>_label.npy)``.
    """
    stem = Path(h5_path).stem
    out_dir = Path(out_dir)
    return out_dir / f"{stem}_data.npy", out_dir / f"{stem}_label.npy"


def npy_damage(path: Path) -> str:
    """What is wrong with a .npy file, read from its header alone: "" when its header reads
    and its size holds the array it declares; else not a .npy file, or cut short."""
    try:
        with Path(path).open("rb") as file:
            version = np.lib.format.read_magic(file)
            if version == (1, 0):
                shape, _, dtype = np.lib.format.read_array_header_1_0(file)
            else:
                shape, _, dtype = np.lib.format.read_array_header_2_0(file)
            need = file.tell() + int(np.prod(shape, dtype=np.int64)) * dtype.itemsize
            size = os.fstat(file.fileno()).st_size
    except FileNotFoundError:
        return "gone"
    except (OSError, ValueError) as exc:
        return f"not a .npy file ({_one_line(exc)})"
    if size < need:
        return f"cut short ({size:,} of {need:,} bytes)"
    return ""


def slab_rows(box: int) -> int:
    """Planes along the first spatial axis copied at a time, keeping a slab small."""
    return max(1, min(box, _SLAB_ELEMENTS // (box * box)))


def convert_box(h5_path: Path, out_dir: Path, *, fix: str = FIX) -> tuple[Path, Path]:
    """Write ``Nbody`` and ``Hydro`` of an HDF5 box as channels-last float32 ``.npy`` files.

    Each file is written under a temporary name beside its target and renamed
    when complete, so an interrupted run never leaves a file that looks whole.

    Args:
        h5_path: HDF5 box with ``Nbody`` (4, L, L, L) and ``Hydro`` (5, L, L, L).
        out_dir: Folder for the outputs; created if missing.
        fix: what the user does when the place is full or cannot be written.

    Returns:
        The paths of the ``(L, L, L, 4)`` input and ``(L, L, L, 5)`` target arrays.

    Raises:
        UsageError: the file is missing or malformed, or the outputs cannot be written.
    """
    info = inspect_box(Path(h5_path))
    out_dir = Path(out_dir)
    need = (info.nbody_shape[0] + info.hydro_shape[0]) * info.box**3 * DTYPE.itemsize
    require_space(out_dir, need, fix)  # before the folder: a full disk leaves none behind
    make_output_folder(out_dir)
    data_path, label_path = npy_paths(info.path, out_dir)
    with h5py.File(info.path, "r") as f:
        _write_channels_last(f[NBODY], data_path, fix)
        _write_channels_last(f[HYDRO], label_path, fix)
    return data_path, label_path


def _write_channels_last(dataset: h5py.Dataset, path: Path, fix: str) -> None:
    channels, box = int(dataset.shape[0]), int(dataset.shape[1])
    rows = slab_rows(box)
    tmp = path.with_name(f".{path.name}.{os.getpid()}-{secrets.token_hex(4)}.tmp")
    try:
        out = np.lib.format.open_memmap(
            tmp, mode="w+", dtype=DTYPE, shape=(box, box, box, channels)
        )
        try:
            slab = np.empty((channels, rows, box, box), dtype=DTYPE)
            for start in range(0, box, rows):
                stop = min(box, start + rows)
                # read_direct converts float64 files while reading: no second copy.
                dataset.read_direct(slab, np.s_[:, start:stop], np.s_[:, : stop - start])
                out[start:stop] = np.moveaxis(slab[:, : stop - start], 0, -1)
            out.flush()
        finally:
            del out  # close the map before the rename (needed on Windows)
        os.replace(tmp, path)
    except OSError as exc:
        raise UsageError(f"cannot write {path}: {_one_line(exc)} ({fix})") from exc
    finally:
        with contextlib.suppress(FileNotFoundError):
            tmp.unlink()


def run_convert(path: Path, out: Path) -> int:
    """``tuneup data convert FILE.h5 --out DIR``: convert and print the two paths on stdout."""
    data_path, label_path = convert_box(Path(path), Path(out))
    print(data_path)
    print(label_path)
    return 0


def _one_line(exc: BaseException) -> str:
    return " ".join(str(exc).split()) or type(exc).__name__
