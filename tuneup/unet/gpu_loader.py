"""The ``gpu`` loader: both fields live in device memory and every crop is cut there.

With the whole box on the GPU a step needs no host copy and no worker: a
batch is ``B`` slices of the resident fields, rotated with tensor ops and
stacked. Corners and rotations come from :func:`draw_sample` with the same
global sample numbers as the PyTorch loaders (:class:`EpochSampler`), so a
config gives the same samples whichever of ``lowmem``, ``inmem`` or ``gpu``
loads them. Without CUDA the same code runs on host tensors.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path

import h5py
import numpy as np
import torch

from tuneup.errors import UsageError
from tuneup.unet.boxfile import DTYPE, HYDRO, NBODY, inspect_box
from tuneup.unet.datasets import EpochSampler, draw_sample
from tuneup.unet.geometry import rotate_torch
from tuneup.unet.loader_spec import LoaderSpec
from tuneup.unet.refusals import crop_problem

Batch = tuple[torch.Tensor, torch.Tensor]
_GIB = 2**30
# Planes (along the first spatial axis) staged through host memory at a time
# while uploading, so loading a 1024^3 box does not need the box in RAM.
_SLAB_ELEMENTS = 2**20


def _cuda_free_bytes(device: torch.device) -> int:
    free, _total = torch.cuda.mem_get_info(device)
    return int(free)


FreeBytes = Callable[[torch.device], int]


def check_fits(need_bytes: int, device: torch.device, free_bytes: FreeBytes) -> None:
    """Fail before allocating when the boxes would not fit in the device's free memory."""
    if device.type != "cuda":
        return
    free = free_bytes(device)
    if need_bytes > free:
        raise UsageError(
            f"the boxes need {need_bytes / _GIB:.2f} GiB but the GPU has {free / _GIB:.2f} GiB "
            "free: use lowmem/dali or a smaller box"
        )


class GpuBoxLoader:
    """Batches cropped from device-resident fields; one pass is one epoch.

    Attributes:
        nbody: ``(4, L, L, L)`` float32 on the device.
        hydro: ``(5, L, L, L)`` float32 on the device.
        sampler: numbers the samples of each epoch, as the PyTorch loaders do.
    """

    def __init__(
        self,
        nbody: torch.Tensor,
        hydro: torch.Tensor,
        *,
        crop: int,
        batch_size: int,
        n_samples: int,
        seed: int,
        rank: int,
    ) -> None:
        box = int(nbody.shape[-1])
        if not 1 <= crop <= box:
            raise ValueError(f"crop {crop} must be between 1 and the box size {box}")
        self.nbody = nbody
        self.hydro = hydro
        self.box = box
        self.crop = crop
        self.batch_size = batch_size
        self.seed = seed
        self.rank = rank
        self.sampler = EpochSampler(n_samples)

    @property
    def device(self) -> torch.device:
        return self.nbody.device

    def set_epoch(self, epoch: int) -> None:
        """Jump to ``epoch``, e.g. when resuming a run."""
        self.sampler.set_epoch(epoch)

    def __len__(self) -> int:
        # drop_last, as the PyTorch loaders: every batch is full.
        return len(self.sampler) // self.batch_size

    def __iter__(self) -> Iterator[Batch]:
        numbers = list(self.sampler)
        for i in range(len(self)):
            yield self.batch(numbers[i * self.batch_size : (i + 1) * self.batch_size])

    def batch(self, numbers: list[int]) -> Batch:
        """The batch of these global sample numbers, cut and rotated on the device."""
        inputs, targets = [], []
        s = self.crop
        for number in numbers:
            (x, y, z), rot = draw_sample(self.seed, self.rank, number, self.box, s)
            inputs.append(rotate_torch(self.nbody[:, x : x + s, y : y + s, z : z + s], rot))
            targets.append(rotate_torch(self.hydro[:, x : x + s, y : y + s, z : z + s], rot))
        # stack copies into one new contiguous tensor: no sample aliases the box.
        return torch.stack(inputs), torch.stack(targets)


def upload_box(path: Path, device: torch.device) -> tuple[torch.Tensor, torch.Tensor]:
    """Read both fields of an HDF5 box into float32 tensors on ``device``, slab by slab."""
    with h5py.File(path, "r") as f:
        return _upload(f[NBODY], device), _upload(f[HYDRO], device)


def _upload(dataset: h5py.Dataset, device: torch.device) -> torch.Tensor:
    channels, box = int(dataset.shape[0]), int(dataset.shape[1])
    out = torch.empty((channels, box, box, box), dtype=torch.float32, device=device)
    if device.type == "cpu":
        dataset.read_direct(out.numpy())
        return out
    rows = max(1, min(box, _SLAB_ELEMENTS // (box * box)))
    staging = np.empty((channels, rows, box, box), dtype=DTYPE)
    for start in range(0, box, rows):
        stop = min(box, start + rows)
        dataset.read_direct(staging, np.s_[:, start:stop], np.s_[:, : stop - start])
        out[:, start:stop].copy_(torch.from_numpy(staging[:, : stop - start]))
    return out


def build_gpu_loader(
    spec: LoaderSpec, device: torch.device, *, free_bytes: FreeBytes = _cuda_free_bytes
) -> GpuBoxLoader:
    """The ``gpu`` loader of ``spec``, with both fields resident on ``device``.

    Raises:
        UsageError: no path, a malformed file, a crop larger than the box, or
            boxes larger than the device's free memory.
    """
    if spec.path is None:
        raise UsageError("the gpu loader reads an HDF5 box: give the path of a data file")
    info = inspect_box(spec.path)
    problem = crop_problem(spec.crop, info.box, str(info.path))
    if problem is not None:
        raise UsageError(problem)
    channels = info.nbody_shape[0] + info.hydro_shape[0]
    check_fits(channels * info.box**3 * DTYPE.itemsize, device, free_bytes)
    nbody, hydro = upload_box(info.path, device)
    return GpuBoxLoader(
        nbody,
        hydro,
        crop=spec.crop,
        batch_size=spec.batch_size,
        n_samples=spec.n_samples,
        seed=spec.seed,
        rank=spec.rank,
    )


def build_gpu(spec: LoaderSpec) -> GpuBoxLoader:
    """The factory to register as kind ``gpu``: boxes on ``spec.device`` ("cpu" or "cuda:N")."""
    return build_gpu_loader(spec, torch.device(spec.device))
