"""Synthetic N-body/hydro boxes in the tutorial's layout, generated and written in slabs.

The real data (a 1024^3 dark-matter box and its hydrodynamic twin) cannot be downloaded
here, so tuneup makes stand-ins with the same HDF5 layout and I/O pattern:

* Inputs (`Nbody`, 4 channels): a log-normal "dark-matter density" and three
  "velocities", each built from smooth Gaussian random fields. A field is a sum of
  two octaves of i.i.d. normal values on coarse lattices (spacings 8 and 4 voxels)
  interpolated with a separable cubic B-spline, scaled to unit variance per voxel.
  The spacings are fixed in voxels, so a 64^3 crop looks alike whatever the box size.
* Targets (`Hydro`, 5 channels): `nbody_to_hydro`, a fixed pointwise nonlinear map,
  so a conv net can learn it and an L1 loss really falls.

Lattice planes are drawn from generators seeded by (seed, stream, octave, plane), and
every step after that is elementwise, so a box is built slab by slab along axis 1 with
bounded memory, and the bytes do not depend on the slab size.
"""

from __future__ import annotations

import contextlib
import math
import os
import secrets
import time
from dataclasses import dataclass
from pathlib import Path

import h5py
import numpy as np

from tuneup.config.loaders import box_bytes  # a box's fields in float32: one declaration
from tuneup.errors import UsageError
from tuneup.paths import make_output_folder, require_space
from tuneup.unet.boxfile import DTYPE, HYDRO, HYDRO_CHANNELS, NBODY, NBODY_CHANNELS

MIN_BOX = 16
TRAIN_STREAM = 0
VAL_STREAM = 1

# Lattice spacing of each octave in voxels, and the share of variance each carries.
_SPACINGS = (8, 4)
_VARIANCE_SHARES = (0.7, 0.3)
# Log-normal width of the density: skewness about 3, like a mildly nonlinear density.
_DENSITY_SIGMA = 0.7
# Voxels per channel in one slab (256 KiB of float32; at least one row of the box):
# small slabs keep the working set near the CPU caches, which measured fastest, and
# peak memory to tens of MB even for L = 1024.
_SLAB_ELEMENTS = 2**16
# Targets are scaled inside (-1, 1) so the model's tanh output can reach them.
_TARGET_SCALE = np.float32(0.98)
_DENSITY_FLOOR = np.float32(1e-6)
# What `tuneup data synth` users change when the place is full or cannot be written.
FIX = "use a smaller --box/--val-box or another --out"


@dataclass(frozen=True)
class SynthResult:
    """What `synthesize` wrote and how long it took.

    Attributes:
        train_path: The training box file.
        val_path: The validation box file.
        box: Side of the training box, in voxels.
        val_box: Side of the validation box, in voxels.
        seconds: Wall time spent generating and writing both files.
    """

    train_path: Path
    val_path: Path
    box: int
    val_box: int
    seconds: float


def nbody_to_hydro(nbody: np.ndarray) -> np.ndarray:
    """Map the 4 N-body channels to the 5 hydro channels, voxel by voxel.

    A fixed stand-in for the physics the U-Net learns. With x = log(density) and
    k = |v|^2 / 2 (kinetic energy per unit mass, mean 1.5 for unit velocities):

    * gas density   = 0.98 tanh(0.8 x - 0.15 (k - 1.5)): follows the dark matter,
      thinned where flows are fast;
    * temperature   = 0.98 tanh(0.5 x + 0.4 (k - 1.5)): heated by compression and by
      fast flows;
    * gas velocity i = 0.98 tanh(0.6 v_i (1 + 0.5 tanh x)): follows the dark matter,
      more tightly in dense regions.

    Every output lies strictly inside (-1, 1) and each channel has a standard deviation
    near 0.3-0.5 on the synthetic inputs, so the targets are neither saturated nor flat.

    Args:
        nbody: Array of shape (4, ...): density (positive; floored at 1e-6 before the
            log) and three velocities.

    Returns:
        float32 array of shape (5, ...).

    Raises:
        ValueError: The first axis does not have 4 channels.
    """
    if nbody.ndim < 1 or nbody.shape[0] != NBODY_CHANNELS:
        raise ValueError(f"nbody must have shape (4, ...), got {nbody.shape}")
    x = np.log(np.maximum(nbody[0].astype(DTYPE, copy=False), _DENSITY_FLOOR))
    v = nbody[1:].astype(DTYPE, copy=False)
    # Written out term by term (no reductions) so each voxel's value does not depend
    # on how the array is split into slabs.
    k = v[0] * v[0]
    k += v[1] * v[1]
    k += v[2] * v[2]
    k *= np.float32(0.5)
    k -= np.float32(1.5)
    out = np.empty((HYDRO_CHANNELS, *x.shape), dtype=DTYPE)
    np.tanh(np.float32(0.8) * x - np.float32(0.15) * k, out=out[0])
    np.tanh(np.float32(0.5) * x + np.float32(0.4) * k, out=out[1])
    coupling = np.tanh(x)
    coupling *= np.float32(0.3)  # 0.6 * 0.5
    coupling += np.float32(0.6)
    for i in range(3):
        np.tanh(v[i] * coupling, out=out[2 + i])
    out *= _TARGET_SCALE
    return out


def write_box(
    path: Path,
    box: int,
    seed: int,
    *,
    stream: int = 0,
    chunk: int | None = None,
    fix: str = "choose a writable --out folder",
) -> None:
    """Generate one box and write it as `Nbody` (4, L, L, L) and `Hydro` (5, L, L, L).

    The file is written under a temporary name in the same folder and renamed at the
    end, so an interrupted run never leaves a file that looks complete. Datasets are
    contiguous float32 without timestamps: the same (box, seed, stream) gives the same
    bytes on the same machine and numpy build, whatever `chunk` is.

    Args:
        path: Output file; replaced if it exists.
        box: Side L of the cubic box, in voxels (at least 16).
        seed: Non-negative seed.
        stream: Independent random stream for this seed (train 0, validation 1).
        chunk: Slab thickness along axis 1, in voxels; default keeps a slab near
            2^16 voxels per channel (at least one row). Only memory and speed depend on it.
        fix: what the user does when the file cannot be written.

    Raises:
        UsageError: box, seed or stream is invalid, or the file cannot be written.
        ValueError: chunk is below 1.
    """
    _check_int("box", box, MIN_BOX, f"pass a box of {MIN_BOX} or more")
    _check_int("seed", seed, 0, "pass --seed 0 or above")
    _check_int("stream", stream, 0, "pass a stream of 0 or above")
    rows = default_chunk(box) if chunk is None else int(chunk)
    if rows < 1:
        raise ValueError(f"chunk must be at least 1, got {chunk}")
    path = Path(path)
    fields = _NbodyField(box, seed, stream)
    # A unique hidden name beside the target (so the rename stays on one file system),
    # created by h5py itself so the final file gets the usual umask permissions.
    tmp = path.with_name(f".{path.name}.{os.getpid()}-{secrets.token_hex(4)}.tmp")
    try:
        with h5py.File(tmp, "w-", track_order=False) as f:
            f.attrs["generator"] = "tuneup data synth"
            f.attrs["seed"] = seed
            f.attrs["stream"] = stream
            spatial = (box, box, box)
            nbody_ds = f.create_dataset(
                NBODY, shape=(NBODY_CHANNELS, *spatial), dtype=DTYPE, track_times=False
            )
            hydro_ds = f.create_dataset(
                HYDRO, shape=(HYDRO_CHANNELS, *spatial), dtype=DTYPE, track_times=False
            )
            for start in range(0, box, rows):
                stop = min(box, start + rows)
                nbody = fields.slab(start, stop)
                nbody_ds[:, start:stop] = nbody
                hydro_ds[:, start:stop] = nbody_to_hydro(nbody)
        os.replace(tmp, path)
    except OSError as exc:
        raise UsageError(f"cannot write {path}: {_one_line(exc)} ({fix})") from exc
    finally:
        with contextlib.suppress(FileNotFoundError):
            tmp.unlink()


def synthesize(
    out_dir: Path, box: int = 128, val_box: int | None = None, seed: int = 0, *, fix: str = FIX
) -> SynthResult:
    """Write a training box and a validation box into a folder.

    Args:
        out_dir: Folder for `train.h5` and `val.h5`; created if missing.
        box: Side of the training box, in voxels (at least 16).
        val_box: Side of the validation box; default `max(16, box // 2)`, the
            tutorial's ratio (1024 train, 512 validation).
        seed: Non-negative seed; train and validation use different streams of it.
        fix: what the user does when the place is full or cannot be written (the default
            names the command's flags; tuneup's cache names its variable).

    Returns:
        The paths, sizes and time taken.

    Raises:
        UsageError: An argument is invalid, the folder cannot be created or written, or
            the disk has too little free space.
    """
    _check_int("box", box, MIN_BOX, f"pass --box {MIN_BOX} or more")
    if val_box is None:
        val_box = max(MIN_BOX, box // 2)
    _check_int("val_box", val_box, MIN_BOX, f"pass --val-box {MIN_BOX} or more")
    _check_int("seed", seed, 0, "pass --seed 0 or above")
    out_dir = Path(out_dir)
    require_space(out_dir, box_bytes(box) + box_bytes(val_box), fix)  # before the folder
    make_output_folder(out_dir)
    began = time.perf_counter()
    train_path = out_dir / "train.h5"
    val_path = out_dir / "val.h5"
    write_box(train_path, box, seed, stream=TRAIN_STREAM, fix=fix)
    write_box(val_path, val_box, seed, stream=VAL_STREAM, fix=fix)
    return SynthResult(
        train_path=train_path,
        val_path=val_path,
        box=box,
        val_box=val_box,
        seconds=time.perf_counter() - began,
    )


def default_chunk(box: int) -> int:
    """Slab thickness (voxels along axis 1) that keeps a slab near 2^16 voxels a channel."""
    return max(1, min(box, _SLAB_ELEMENTS // (box * box)))


class _NbodyField:
    """The 4 input channels of one box, produced slab by slab."""

    def __init__(self, box: int, seed: int, stream: int) -> None:
        self._octaves = [
            _Octave(box, spacing, (seed, stream, i)) for i, spacing in enumerate(_SPACINGS)
        ]
        self._amplitudes = [np.float32(math.sqrt(s)) for s in _VARIANCE_SHARES]

    def slab(self, start: int, stop: int) -> np.ndarray:
        """Rows start:stop along axis 1: density and three velocities, (4, r, L, L)."""
        out: np.ndarray | None = None
        for octave, amplitude in zip(self._octaves, self._amplitudes, strict=True):
            part = octave.slab(start, stop)
            part *= amplitude
            if out is None:
                out = part
            else:
                out += part
        assert out is not None
        rho = out[0]
        rho *= np.float32(_DENSITY_SIGMA)
        rho -= np.float32(_DENSITY_SIGMA**2 / 2)  # so the mean density is 1
        np.exp(rho, out=rho)
        return out


class _Octave:
    """One octave: a coarse lattice of normal values, B-spline interpolated.

    Lattice planes along axis 1 are drawn on demand from a generator seeded by their
    index and dropped once no later slab needs them, so memory stays a few planes.
    """

    def __init__(self, box: int, spacing: int, key: tuple[int, int, int]) -> None:
        self._index, self._weight = _bspline_taps(box, spacing)
        self._size = int(self._index.max()) + 1
        self._key = key
        self._planes: dict[int, np.ndarray] = {}

    def slab(self, start: int, stop: int) -> np.ndarray:
        """Unit-variance Gaussian field on rows start:stop of axis 1, (4, r, L, L)."""
        index = self._index[:, start:stop]
        low, high = int(index.min()), int(index.max())
        for j in [j for j in self._planes if j < low]:
            del self._planes[j]
        block = np.stack([self._plane(j) for j in range(low, high + 1)], axis=1)
        field = _interpolate(block, index - low, self._weight[:, start:stop], axis=1)
        field = _interpolate(field, self._index, self._weight, axis=3)
        return _interpolate(field, self._index, self._weight, axis=2)

    def _plane(self, j: int) -> np.ndarray:
        if j not in self._planes:
            rng = np.random.default_rng([*self._key, j])
            shape = (NBODY_CHANNELS, self._size, self._size)
            self._planes[j] = rng.standard_normal(shape, dtype=DTYPE)
        return self._planes[j]


def _bspline_taps(box: int, spacing: int) -> tuple[np.ndarray, np.ndarray]:
    """Lattice indices and weights of the 4 cubic B-spline taps of each voxel.

    Weights are divided by the root of their sum of squares, so interpolating i.i.d.
    unit normals gives unit variance at every voxel, not only between lattice nodes.

    Returns:
        (index, weight), each of shape (4, box); indices start at 0.
    """
    t = np.arange(box, dtype=np.float64) / spacing
    base = np.floor(t)
    u = t - base
    weight = np.stack(
        [
            (1 - u) ** 3 / 6,
            (3 * u**3 - 6 * u**2 + 4) / 6,
            (-3 * u**3 + 3 * u**2 + 3 * u + 1) / 6,
            u**3 / 6,
        ]
    )
    weight /= np.sqrt((weight**2).sum(axis=0))
    index = base.astype(np.int64)[None, :] + np.arange(4)[:, None]
    return index, weight.astype(DTYPE)


def _interpolate(x: np.ndarray, index: np.ndarray, weight: np.ndarray, axis: int) -> np.ndarray:
    """Sum over 4 taps of x gathered along axis, each scaled by its per-position weight."""
    shape = [1] * x.ndim
    shape[axis] = -1
    out = np.take(x, index[0], axis=axis)
    out *= weight[0].reshape(shape)
    tmp = np.empty_like(out)
    for tap in range(1, 4):
        np.take(x, index[tap], axis=axis, out=tmp, mode="clip")
        tmp *= weight[tap].reshape(shape)
        out += tmp
    return out


def _check_int(name: str, value: object, minimum: int, fix: str) -> None:
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)) or value < minimum:
        raise UsageError(f"{name} must be an integer of at least {minimum}, got {value!r} ({fix})")


def _one_line(exc: BaseException) -> str:
    return " ".join(str(exc).split()) or type(exc).__name__
