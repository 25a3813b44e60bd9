"""Torch datasets of (input, target) crops, each cropped and rotated the same way.

A sample is made in two separate steps so every loader (these, and later
DALI or a GPU-resident one) can reproduce the same data:

1. :func:`draw_sample` decides *where* and *how*: a crop corner and one of the
   24 rotations, a pure function of ``(seed, rank, sample number)``.
2. :func:`make_sample` *cuts and rotates* both fields at that corner.

Seeding: each sample number gets its own numpy Generator, seeded with the
triple ``(seed, rank, sample number)`` through ``SeedSequence``. Sample
numbers are global: epoch ``e`` of a loader over ``n`` samples uses numbers
``e*n .. e*n + n - 1`` (see :class:`EpochSampler`). So DataLoader workers
never repeat each other (they get different numbers), DDP ranks never repeat
each other (different ``rank``), every epoch sees fresh crops, and a run is
reproducible from its seed *whatever the number of workers*: changing
``num_workers`` while tuning changes speed, never the data. The cost is one
small Generator per sample (tens of microseconds, next to milliseconds of
copying a crop).
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import h5py
import numpy as np
import torch
from torch.utils.data import Dataset, Sampler

from tuneup.unet.boxfile import HYDRO, HYDRO_CHANNELS, NBODY, NBODY_CHANNELS
from tuneup.unet.geometry import (
    ROTATION_COUNT,
    Corner,
    crop_numpy,
    random_corner,
    rotate_numpy,
)

Sample = tuple[torch.Tensor, torch.Tensor]


def draw_sample(seed: int, rank: int, number: int, box: int, crop: int) -> tuple[Corner, int]:
    """The crop corner and rotation index of global sample ``number`` on ``rank``."""
    rng = np.random.default_rng((seed, rank, number))
    corner = random_corner(rng, box, crop)
    return corner, int(rng.integers(ROTATION_COUNT))


def _cut_and_rotate(field: Any, corner: Corner, rot_index: int, crop: int) -> torch.Tensor:
    block = np.asarray(crop_numpy(field, corner, crop), dtype=np.float32)
    # np.array copies: the sample must never alias the in-memory box, and
    # torch wants a C-contiguous buffer.
    return torch.from_numpy(np.array(rotate_numpy(block, rot_index), order="C"))


def make_sample(nbody: Any, hydro: Any, corner: Corner, rot_index: int, crop: int) -> Sample:
    """Cut the same cube out of both fields and rotate both the same way.

    Args:
        nbody: ``(4, L, L, L)`` numpy array or ``h5py.Dataset`` (read lazily).
        hydro: ``(5, L, L, L)`` numpy array or ``h5py.Dataset``.
        corner: crop corner, as from :func:`draw_sample`.
        rot_index: rotation index in ``0..23``.
        crop: crop side ``S``.

    Returns:
        New contiguous float32 CPU tensors ``(4, S, S, S)`` and ``(5, S, S, S)``.
    """
    return (
        _cut_and_rotate(nbody, corner, rot_index, crop),
        _cut_and_rotate(hydro, corner, rot_index, crop),
    )


class EpochSampler(Sampler[int]):
    """Yields ``n_samples`` fresh global sample numbers each time it is iterated.

    It lives in the main process, so the epoch count survives persistent
    workers (a counter inside a worker's copy of the dataset would not).
    """

    def __init__(self, n_samples: int) -> None:
        self.n_samples = n_samples
        self.epoch = 0

    def set_epoch(self, epoch: int) -> None:
        """Jump to ``epoch``, e.g. when resuming a run."""
        self.epoch = epoch

    def __len__(self) -> int:
        return self.n_samples

    def __iter__(self) -> Iterator[int]:
        start = self.epoch * self.n_samples
        self.epoch += 1
        return iter(range(start, start + self.n_samples))


class _CropDataset(Dataset[Sample]):
    """Indexed by global sample number (see :class:`EpochSampler`), not ``0..len-1``."""

    def __init__(self, *, box: int, crop: int, n_samples: int, seed: int, rank: int) -> None:
        if not 1 <= crop <= box:
            raise ValueError(f"crop {crop} must be between 1 and the box size {box}")
        self.box = box
        self.crop = crop
        self.n_samples = n_samples
        self.seed = seed
        self.rank = rank

    def __len__(self) -> int:
        return self.n_samples

    def _fields(self) -> tuple[Any, Any]:
        raise NotImplementedError

    def __getitem__(self, number: int) -> Sample:
        corner, rot_index = draw_sample(self.seed, self.rank, number, self.box, self.crop)
        nbody, hydro = self._fields()
        return make_sample(nbody, hydro, corner, rot_index, self.crop)


class InMemoryDataset(_CropDataset):
    """Crops from fields held in host memory (the ``inmem`` and ``synthetic`` loaders).

    Workers should be forked so they share the box copy-on-write; pickling it
    to each worker would copy gigabytes.
    """

    def __init__(
        self,
        nbody: np.ndarray,
        hydro: np.ndarray,
        *,
        crop: int,
        n_samples: int,
        seed: int,
        rank: int,
    ) -> None:
        super().__init__(crop=crop, n_samples=n_samples, seed=seed, rank=rank, box=nbody.shape[-1])
        self.nbody = nbody
        self.hydro = hydro

    def _fields(self) -> tuple[np.ndarray, np.ndarray]:
        return self.nbody, self.hydro


class HDF5CropDataset(_CropDataset):
    """Reads each crop from the HDF5 file (the ``lowmem`` loader).

    The file is opened lazily, once per process, on first use: an HDF5 handle
    must not cross a fork or a pickle, so a worker that inherits or unpickles
    this dataset opens its own.
    """

    def __init__(
        self, path: Path, *, box: int, crop: int, n_samples: int, seed: int, rank: int
    ) -> None:
        super().__init__(box=box, crop=crop, n_samples=n_samples, seed=seed, rank=rank)
        self.path = Path(path)
        self._file: Any = None
        self._owner_pid: int | None = None

    def _fields(self) -> tuple[Any, Any]:
        if self._file is None or self._owner_pid != os.getpid():
            self._file = h5py.File(self.path, "r")
            self._owner_pid = os.getpid()
        return self._file[NBODY], self._file[HYDRO]

    def close(self) -> None:
        """Close this process's handle; the next sample reopens it."""
        if self._file is not None and self._owner_pid == os.getpid():
            self._file.close()
        self._file = None
        self._owner_pid = None

    def __getstate__(self) -> dict[str, Any]:
        state = self.__dict__.copy()
        state["_file"] = None
        state["_owner_pid"] = None
        return state


def read_box(path: Path) -> tuple[np.ndarray, np.ndarray]:
    """Read both whole fields of an HDF5 box into host memory (``inmem``)."""
    with h5py.File(path, "r") as f:
        return _read_float32(f[NBODY]), _read_float32(f[HYDRO])


def _read_float32(dataset: h5py.Dataset) -> np.ndarray:
    # Converting during the read keeps a float64 file from needing twice the memory.
    out = np.empty(dataset.shape, dtype=np.float32)
    dataset.read_direct(out)
    return out


def synthetic_box(seed: int, box: int) -> tuple[np.ndarray, np.ndarray]:
    """Random float32 fields of side ``box``, reproducible from ``seed``.

    Same layout as a real file, so crops and rotations cost what real ones do.
    """
    rng = np.random.default_rng(seed)
    nbody = rng.standard_normal((NBODY_CHANNELS, box, box, box), dtype=np.float32)
    hydro = rng.standard_normal((HYDRO_CHANNELS, box, box, box), dtype=np.float32)
    return nbody, hydro
