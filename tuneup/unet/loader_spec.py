"""What a loader factory is given: one validated, frozen description of the data path.

Its own module so that every loader (DataLoader, DALI, GPU-resident) and the
registry in loaders.py import it without importing each other.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path


@dataclass(frozen=True)
class LoaderSpec:
    """Everything a loader factory needs, validated once by :func:`build_loader`."""

    path: Path | None
    crop: int
    batch_size: int
    n_samples: int
    num_workers: int
    pin_memory: bool
    persistent_workers: bool
    prefetch_factor: int | None
    seed: int
    rank: int
    synthetic_box: int
    # for the DALI and GPU-resident loaders
    npy_data: Path | None = None  # channels-last Nbody copy (L, L, L, 4)
    npy_label: Path | None = None  # channels-last Hydro copy (L, L, L, 5)
    prefetch_depth: int = 2  # DALI's prefetch queue depth
    device: str = "cpu"  # "cpu" or "cuda:N": where device-side loaders put batches
