"""Build the training data loader of a given kind, by name.

Kinds live in a registry of factories so that DALI and a GPU-resident loader
can be added later by registering one function each; the built-in kinds are
``lowmem``, ``inmem`` and ``synthetic``. Every factory receives one frozen
:class:`LoaderSpec` already checked by :func:`build_loader`, and must fail
at build time (not inside a worker) on a bad file or size.
"""

from __future__ import annotations

import multiprocessing
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any

import torch
from torch.utils.data import DataLoader, Dataset

from tuneup.config import LOADER_CHOICES, sample_bytes
from tuneup.errors import UsageError
from tuneup.unet.boxfile import HYDRO_CHANNELS, BoxInfo, inspect_box
from tuneup.unet.dali_loader import build_dali_loader
from tuneup.unet.datasets import (
    EpochSampler,
    HDF5CropDataset,
    InMemoryDataset,
    read_box,
    synthetic_box,
)
from tuneup.unet.gpu_loader import build_gpu
from tuneup.unet.loader_spec import LoaderSpec
from tuneup.unet.refusals import SYNTHETIC_BOX_MAX, crop_problem


def loader_bytes_per_sample(crop: int) -> int:
    """Bytes one (input, target) sample moves: 9 float32 channels of ``crop^3``."""
    return sample_bytes(crop, HYDRO_CHANNELS)


Batches = Iterable[tuple[torch.Tensor, torch.Tensor]]  # a DataLoader, or DALI's / the GPU's own
LoaderFactory = Callable[[LoaderSpec], Batches]
_FACTORIES: dict[str, LoaderFactory] = {}


def register_loader(kind: str, factory: LoaderFactory) -> None:
    """Make ``kind`` buildable by :func:`build_loader`; a name can be registered once."""
    if kind in _FACTORIES:
        raise ValueError(f"loader kind {kind!r} is already registered")
    if kind not in LOADER_CHOICES:  # its properties are read everywhere from that table
        raise ValueError(f"loader kind {kind!r} is not declared in tuneup.config.loaders")
    _FACTORIES[kind] = factory


def loader_kinds() -> tuple[str, ...]:
    """Every kind :func:`build_loader` accepts, built-in ones first."""
    return tuple(_FACTORIES)


def _check_spec(spec: LoaderSpec) -> None:
    positive = {"crop": spec.crop, "batch_size": spec.batch_size, "n_samples": spec.n_samples}
    for name, value in positive.items():
        if value < 1:
            raise UsageError(f"{name} must be at least 1, got {value}")
    if spec.n_samples < spec.batch_size:
        raise UsageError(
            f"n_samples {spec.n_samples} is smaller than batch_size {spec.batch_size}, "
            "so no full batch can be made; raise n_samples or lower batch_size"
        )
    non_negative = {"num_workers": spec.num_workers, "seed": spec.seed, "rank": spec.rank}
    for name, value in non_negative.items():
        if value < 0:
            raise UsageError(f"{name} must be 0 or more, got {value}")
    if spec.prefetch_factor is not None and spec.prefetch_factor < 1:
        raise UsageError(f"prefetch_factor must be at least 1, got {spec.prefetch_factor}")


def _check_crop_fits(crop: int, box: int, where: str) -> None:
    problem = crop_problem(crop, box, where)
    if problem is not None:
        raise UsageError(problem)


def dataloader_kwargs(spec: LoaderSpec, *, cuda_available: bool) -> dict[str, Any]:
    """DataLoader options for ``spec``, leaving out those torch rejects or ignores here.

    torch refuses ``persistent_workers`` and ``prefetch_factor`` without
    workers, and pinning memory without CUDA only warns and wastes time.
    """
    kwargs: dict[str, Any] = {
        "batch_size": spec.batch_size,
        "num_workers": spec.num_workers,
        "pin_memory": spec.pin_memory and cuda_available,
        # Every batch the same size: no recompiles or graph re-captures.
        "drop_last": True,
    }
    if spec.num_workers > 0:
        kwargs["persistent_workers"] = spec.persistent_workers
        if spec.prefetch_factor is not None:
            kwargs["prefetch_factor"] = spec.prefetch_factor
    return kwargs


def _make_loader(dataset: Dataset, spec: LoaderSpec, *, share_by_fork: bool) -> DataLoader:
    kwargs = dataloader_kwargs(spec, cuda_available=torch.cuda.is_available())
    if share_by_fork and spec.num_workers > 0 and "fork" in multiprocessing.get_all_start_methods():
        # Forked workers share an in-memory box copy-on-write; spawn or
        # forkserver would pickle the whole box into every worker.
        kwargs["multiprocessing_context"] = "fork"
    return DataLoader(dataset, sampler=EpochSampler(spec.n_samples), **kwargs)


def _inspect(spec: LoaderSpec, kind: str) -> BoxInfo:
    if spec.path is None:
        raise UsageError(f"the {kind} loader reads an HDF5 box: give the path of a data file")
    info = inspect_box(spec.path)
    _check_crop_fits(spec.crop, info.box, str(info.path))
    return info


def _build_lowmem(spec: LoaderSpec) -> DataLoader:
    info = _inspect(spec, "lowmem")
    dataset = HDF5CropDataset(
        Path(info.path),
        box=info.box,
        crop=spec.crop,
        n_samples=spec.n_samples,
        seed=spec.seed,
        rank=spec.rank,
    )
    return _make_loader(dataset, spec, share_by_fork=False)


def _build_inmem(spec: LoaderSpec) -> DataLoader:
    info = _inspect(spec, "inmem")
    nbody, hydro = read_box(Path(info.path))
    dataset = InMemoryDataset(
        nbody, hydro, crop=spec.crop, n_samples=spec.n_samples, seed=spec.seed, rank=spec.rank
    )
    return _make_loader(dataset, spec, share_by_fork=True)


def _build_synthetic(spec: LoaderSpec) -> DataLoader:
    if spec.synthetic_box < 1:
        raise UsageError(f"synthetic_box must be at least 1, got {spec.synthetic_box}")
    side = min(spec.synthetic_box, SYNTHETIC_BOX_MAX)
    _check_crop_fits(spec.crop, side, "the synthetic data")
    # The box is the same on every rank (seeded by seed alone); crops differ by rank.
    nbody, hydro = synthetic_box(spec.seed, side)
    dataset = InMemoryDataset(
        nbody, hydro, crop=spec.crop, n_samples=spec.n_samples, seed=spec.seed, rank=spec.rank
    )
    return _make_loader(dataset, spec, share_by_fork=True)


def _build_dali(spec: LoaderSpec) -> Batches:
    on_gpu = spec.device.startswith("cuda")
    return build_dali_loader(
        spec,
        data_path=spec.npy_data,
        label_path=spec.npy_label,
        prefetch_depth=spec.prefetch_depth,
        use_gpu=on_gpu,
        device_id=int(spec.device.partition(":")[2] or 0) if on_gpu else None,
    )


register_loader("lowmem", _build_lowmem)
register_loader("inmem", _build_inmem)
register_loader("synthetic", _build_synthetic)
register_loader("dali-lowmem", _build_dali)


def _build_gpu(spec: LoaderSpec) -> Batches:
    return build_gpu(spec)


register_loader("gpu", _build_gpu)


def build_loader(
    kind: str,
    *,
    path: Path | None,
    crop: int,
    batch_size: int,
    n_samples: int,
    num_workers: int,
    pin_memory: bool,
    persistent_workers: bool,
    prefetch_factor: int | None,
    seed: int,
    rank: int = 0,
    synthetic_box: int = 128,
    npy_data: Path | None = None,
    npy_label: Path | None = None,
    prefetch_depth: int = 2,
    device: str = "cpu",
) -> Batches:
    """A loader of ``(input, target)`` batches, ``(B, 4, S, S, S)`` and ``(B, 5, S, S, S)``.

    Each pass over it is one epoch of ``n_samples // batch_size`` full batches
    of fresh crops; the data depend on ``seed`` and ``rank`` only, never on
    ``num_workers``.

    Args:
        kind: one of :func:`loader_kinds`.
        path: HDF5 box (``lowmem``, ``inmem``); ignored by ``synthetic``.
        crop: crop side ``S``.
        batch_size: samples per batch on this rank.
        n_samples: samples per epoch on this rank.
        num_workers: DataLoader worker processes (0: load in this process).
        pin_memory: pin batches for fast host-to-GPU copies (only with CUDA).
        persistent_workers: keep workers alive between epochs (only with workers).
        prefetch_factor: batches each worker loads ahead (only with workers).
        seed: run seed; the same seed gives the same batches.
        rank: DDP rank, so ranks draw different crops.
        synthetic_box: side of the random box for ``synthetic``, capped at
            :data:`SYNTHETIC_BOX_MAX`.

    Raises:
        ValueError: unknown ``kind``.
        UsageError: missing or malformed file, crop larger than the box, or a
            bad size.
    """
    factory = _FACTORIES.get(kind)
    if factory is None:
        raise ValueError(f"unknown loader kind {kind!r}; choose one of: {', '.join(_FACTORIES)}")
    spec = LoaderSpec(
        path=None if path is None else Path(path),
        crop=crop,
        batch_size=batch_size,
        n_samples=n_samples,
        num_workers=num_workers,
        pin_memory=pin_memory,
        persistent_workers=persistent_workers,
        prefetch_factor=prefetch_factor,
        seed=seed,
        rank=rank,
        synthetic_box=synthetic_box,
        npy_data=None if npy_data is None else Path(npy_data),
        npy_label=None if npy_label is None else Path(npy_label),
        prefetch_depth=prefetch_depth,
        device=device,
    )
    _check_spec(spec)
    return factory(spec)
