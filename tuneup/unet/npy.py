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
import shutil
from pathlib import Path

import h5py
import numpy as np

from tuneup.errors import UsageError
from tuneup.paths import make_output_folder
from tuneup.unet.boxfile import DTYPE, HYDRO, NBODY, inspect_box

# Voxels per channel in one slab (at least one plane of the box): a few MB per
# slab, whatever L is.
_SLAB_ELEMENTS = 2**16


def npy_paths(h5_path: Path, out_dir: Path) -> tuple[Path, Path]:
    """Where :func:`convert_box` writes the input and target arrays of ``h5_path``.

    Returns:
        ``(out_dir/<stem>_data.npy, out_dir/<stem>_label.npy)``.
    """
    stem = Path(h5_path).stem
    out_dir = Path(out_dir)
    return out_dir / f"{stem}_data.npy", out_dir / f"{stem}_label.npy"


def slab_rows(box: int) -> int:
    """Planes along the first spatial axis copied at a time, keeping a slab small."""
    return max(1, min(box, _SLAB_ELEMENTS // (box * box)))


def convert_box(h5_path: Path, out_dir: Path) -> tuple[Path, Path]:
    """Write ``Nbody`` and ``Hydro`` of an HDF5 box as channels-last float32 ``.npy`` files.

    Each file is written under a temporary name beside its target and renamed
    when complete, so an interrupted run never leaves a file that looks whole.

    Args:
        h5_path: HDF5 box with ``Nbody`` (4, L, L, L) and ``Hydro`` (5, L, L, L).
        out_dir: Folder for the outputs; created if missing.

    Returns:
        The paths of the ``(L, L, L, 4)`` input and ``(L, L, L, 5)`` target arrays.

    Raises:
        UsageError: the file is missing or malformed, or the outputs cannot be written.
    """
    info = inspect_box(Path(h5_path))
    out_dir = Path(out_dir)
    make_output_folder(out_dir)
    need = (info.nbody_shape[0] + info.hydro_shape[0]) * info.box**3 * DTYPE.itemsize
    free = shutil.disk_usage(out_dir).free
    if need > free:
        raise UsageError(
            f"not enough free space in {out_dir}: need {need / 2**30:.2f} GiB, "
            f"have {free / 2**30:.2f} GiB (choose another --out)"
        )
    data_path, label_path = npy_paths(info.path, out_dir)
    with h5py.File(info.path, "r") as f:
        _write_channels_last(f[NBODY], data_path)
        _write_channels_last(f[HYDRO], label_path)
    return data_path, label_path


def _write_channels_last(dataset: h5py.Dataset, path: Path) -> None:
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
        raise UsageError(
            f"cannot write {path}: {_one_line(exc)} (choose a writable --out folder)"
        ) from exc
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
