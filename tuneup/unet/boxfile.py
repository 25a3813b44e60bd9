"""Check that an HDF5 file holds an N-body/hydro box the trainer can read.

The data loaders, `tuneup data synth` and `tuneup data convert` all meet user files
here first, so a wrong path or layout becomes one line naming the problem and the fix
instead of an h5py traceback deep inside a loader worker.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

import h5py
import numpy as np

from tuneup.config.loaders import INPUT_CHANNELS, TARGET_CHANNELS
from tuneup.errors import DataFault

NBODY = "Nbody"
HYDRO = "Hydro"
NBODY_CHANNELS = INPUT_CHANNELS
HYDRO_CHANNELS = TARGET_CHANNELS
# What the generator writes and the loaders expect; other float types are accepted.
DTYPE = np.dtype(np.float32)

_LAYOUT = f"{NBODY} (4, L, L, L) and {HYDRO} (5, L, L, L), float32"
# HDF5's words for a file shorter than its superblock says it was written.
_TRUNCATED = re.compile(r"truncated file: eof = (\d+).*stored_eof = (\d+)")


@dataclass(frozen=True)
class BoxInfo:
    """What a checked box file holds.

    Attributes:
        path: The file.
        box: The side L of the cubic box, in voxels.
        nbody_shape: Shape of the input dataset, (4, L, L, L).
        hydro_shape: Shape of the target dataset, (5, L, L, L).
    """

    path: Path
    box: int
    nbody_shape: tuple[int, ...]
    hydro_shape: tuple[int, ...]


def inspect_box(path: Path) -> BoxInfo:
    """Open a box file read-only and check its layout.

    Args:
        path: HDF5 file expected to hold datasets `Nbody` (4, L, L, L) and
            `Hydro` (5, L, L, L) of a float type.

    Returns:
        The box size and dataset shapes.

    Raises:
        DataFault: The file is missing, not HDF5, cut short, or its datasets have the
            wrong names, ranks, channel counts, dtypes or spatial shapes.
    """
    path = Path(path)
    if not path.exists():
        raise DataFault(
            f"data file not found: {path} (make one with `tuneup data synth --out DIR`, "
            "or set train_path/val_path to your HDF5 files)"
        )
    if not path.is_file():
        raise DataFault(f"data path is not a file: {path} (give the path of an HDF5 file)")
    if not h5py.is_hdf5(path):
        raise DataFault(f"not an HDF5 file: {path} (give an HDF5 file holding datasets {_LAYOUT})")
    try:
        with h5py.File(path, "r") as f:
            nbody = _dataset_shape(f, NBODY, NBODY_CHANNELS, path)
            hydro = _dataset_shape(f, HYDRO, HYDRO_CHANNELS, path)
    except OSError as exc:
        cut = _TRUNCATED.search(str(exc))
        if cut is not None:
            have, made = (int(n) for n in cut.groups())
            raise DataFault(
                f"the data file {path} is cut short ({have:,} of {made:,} bytes): copy it "
                "again, or make it again with `tuneup data synth`"
            ) from exc
        raise DataFault(f"cannot read HDF5 file {path}: {_one_line(exc)}") from exc
    if nbody[1:] != hydro[1:]:
        raise DataFault(
            f"{path}: {NBODY} spatial shape {nbody[1:]} differs from {HYDRO} "
            f"spatial shape {hydro[1:]} (both must cover the same box)"
        )
    return BoxInfo(path=path, box=nbody[1], nbody_shape=nbody, hydro_shape=hydro)


def _dataset_shape(f: h5py.File, name: str, channels: int, path: Path) -> tuple[int, ...]:
    """Return a dataset's shape after checking rank, channels, dtype and cubicity."""
    obj = f.get(name)
    if not isinstance(obj, h5py.Dataset):
        have = ", ".join(sorted(f.keys())) or "nothing"
        raise DataFault(f"{path} has no dataset {name!r} (it has: {have}; expected {_LAYOUT})")
    shape = tuple(int(n) for n in obj.shape)
    if len(shape) != 4:
        raise DataFault(
            f"{path}: dataset {name} has shape {shape}, rank {len(shape)} "
            f"(expected rank 4: ({channels}, L, L, L))"
        )
    if shape[0] != channels:
        raise DataFault(
            f"{path}: dataset {name} has {shape[0]} channels in shape {shape} "
            f"(expected {channels} channels first: ({channels}, L, L, L))"
        )
    if obj.dtype.kind != "f":
        raise DataFault(
            f"{path}: dataset {name} has dtype {obj.dtype} (expected a float type, "
            "float32 preferred)"
        )
    if len(set(shape[1:])) != 1:
        raise DataFault(
            f"{path}: dataset {name} has spatial shape {shape[1:]}, not cubic (expected L x L x L)"
        )
    return shape


def _one_line(exc: BaseException) -> str:
    """Keep a library's message to one line so the CLI prints a single line."""
    return " ".join(str(exc).split()) or type(exc).__name__
