"""The ``dali-lowmem`` loader: NVIDIA DALI reads, rotates and hands over the crops.

It yields exactly the samples of the ``lowmem`` and ``inmem`` loaders for the
same config: batch ``j`` of epoch ``e`` holds global sample numbers
``e*n + j*B .. e*n + j*B + B - 1`` (as :class:`EpochSampler` with
``drop_last`` numbers them), and each sample's corner and rotation come from
:func:`draw_sample`. DALI reads only each crop's region of the channels-last
``.npy`` copies written by ``tuneup data convert`` (``(L, L, L, C)``
float32), so a 1024^3 box never has to fit in host memory.

DALI's ``transpose`` takes one permutation per batch, not per sample, so the
six axis permutations of the 24 rotations are six conditional branches
(DALI splits the batch by a per-sample predicate and merges it back); the
flips are per-sample arguments of ``flip``.

DALI is optional: this module imports it only when a loader is built.
"""

from __future__ import annotations

import itertools
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import torch

from tuneup.errors import UsageError
from tuneup.unet.boxfile import HYDRO_CHANNELS, NBODY_CHANNELS
from tuneup.unet.datasets import draw_sample
from tuneup.unet.geometry import ROTATION_COUNT, SPATIAL_DIMS, rotation_matrix
from tuneup.unet.refusals import crop_problem

DALI_MISSING = (
    "the dali loader needs NVIDIA DALI: pip install 'tuneup[dali]' "
    "(or nvidia-dali-cuda12x for your CUDA)"
)

DEFAULT_PREFETCH_DEPTH = 2
"""Batches DALI prepares ahead; two hides one batch of reading behind a step."""

PERMUTATIONS: tuple[tuple[int, int, int], ...] = tuple(
    itertools.permutations(range(SPATIAL_DIMS))  # type: ignore[arg-type]
)
"""The six spatial axis orders; a rotation's permutation is an index into this."""
assert len(PERMUTATIONS) == 6  # the pipeline's if/elif chain has one branch each


def dali_available() -> tuple[bool, str]:
    """Whether DALI imports here, and if not, the line telling the user what to install."""
    try:
        import nvidia.dali  # DALI: optional, and only the DALI loader needs it
        import nvidia.dali.plugin.pytorch  # noqa: F401
    except ImportError as exc:
        return False, f"{DALI_MISSING} ({exc})"
    return True, ""


def rotation_parts(index: int) -> tuple[int, tuple[bool, bool, bool]]:
    """Rotation ``index`` as (index into :data:`PERMUTATIONS`, per-output-axis flips).

    Read off :func:`rotation_matrix` so it cannot drift from the torch path:
    row ``k`` has one nonzero entry, at the input axis feeding output axis
    ``k``, negative when that axis is reversed.
    """
    matrix = rotation_matrix(index)
    perm = tuple(int(np.flatnonzero(row)[0]) for row in matrix)
    flips = tuple(bool(matrix[k, axis] < 0) for k, axis in enumerate(perm))
    return PERMUTATIONS.index(perm), flips  # type: ignore[arg-type, return-value]


_ROTATION_PARTS = tuple(rotation_parts(i) for i in range(ROTATION_COUNT))


@dataclass(frozen=True)
class BatchPlan:
    """Per-sample DALI arguments for one batch, as int32 arrays of length ``B``."""

    starts: np.ndarray  # (B, 3) crop corners
    ends: np.ndarray  # (B, 3) corners + crop
    perm_ids: np.ndarray  # (B,) index into PERMUTATIONS
    flips: np.ndarray  # (B, 3) 1 where output axis k is reversed
    rotations: np.ndarray  # (B,) rotation index, for tests and logs


def sample_numbers(batch_count: int, *, n_samples: int, batch_size: int) -> tuple[int, ...]:
    """Global sample numbers of the ``batch_count``-th batch the loader ever makes.

    Mirrors ``DataLoader(sampler=EpochSampler(n), drop_last=True)``: an epoch
    has ``n // B`` batches and its last ``n % B`` numbers are never used.
    """
    per_epoch = n_samples // batch_size
    epoch, j = divmod(batch_count, per_epoch)
    start = epoch * n_samples + j * batch_size
    return tuple(range(start, start + batch_size))


def plan_batch(numbers: tuple[int, ...], *, seed: int, rank: int, box: int, crop: int) -> BatchPlan:
    """Corners and rotations of ``numbers``, drawn as the torch loaders draw them."""
    draws = [draw_sample(seed, rank, number, box, crop) for number in numbers]
    starts = np.array([corner for corner, _ in draws], dtype=np.int32).reshape(-1, SPATIAL_DIMS)
    rotations = np.array([rot for _, rot in draws], dtype=np.int32)
    parts = [_ROTATION_PARTS[rot] for rot in rotations]
    return BatchPlan(
        starts=starts,
        ends=starts + np.int32(crop),
        perm_ids=np.array([p for p, _ in parts], dtype=np.int32),
        flips=np.array([f for _, f in parts], dtype=np.int32).reshape(-1, SPATIAL_DIMS),
        rotations=rotations,
    )


def npy_paths(
    h5_path: Path | None, data: str | Path | None = None, label: str | Path | None = None
) -> tuple[Path, Path]:
    """The channels-last input and target files: given ones, else next to the HDF5 box."""
    if data is not None and label is not None:
        return Path(data), Path(label)
    if h5_path is None:
        raise UsageError(
            "the dali-lowmem loader needs the HDF5 train path or train_path_npy_data and "
            "train_path_npy_label"
        )
    h5_path = Path(h5_path)
    stem = h5_path.parent / h5_path.stem
    return (
        Path(data) if data is not None else Path(f"{stem}_data.npy"),
        Path(label) if label is not None else Path(f"{stem}_label.npy"),
    )


def _npy_box(path: Path, channels: int, h5_path: Path | None) -> int:
    source = h5_path if h5_path is not None else "FILE.h5"
    if not path.is_file():
        raise UsageError(
            f"{path} not found: the dali-lowmem loader reads channels-last .npy copies; "
            f"make them with: tuneup data convert {source} --out {path.parent}"
        )
    try:
        arr = np.load(path, mmap_mode="r")
    except (ValueError, OSError) as exc:
        raise UsageError(
            f"{path} is not a readable .npy file ({exc}); rerun tuneup data convert"
        ) from exc
    shape = arr.shape
    if (
        arr.dtype != np.float32
        or len(shape) != SPATIAL_DIMS + 1
        or shape[-1] != channels
        or len(set(shape[:SPATIAL_DIMS])) != 1
    ):
        raise UsageError(
            f"{path} holds {arr.dtype} {shape}, expected float32 (L, L, L, {channels}); "
            "rerun tuneup data convert"
        )
    return int(shape[0])


class _PlanSource:
    """DALI external source: the next batch's arguments, one call per batch, in order.

    DALI calls it ahead of consumption (prefetch) but strictly in sequence,
    so the k-th call is always the loader's k-th batch.
    """

    def __init__(
        self, *, seed: int, rank: int, box: int, crop: int, n_samples: int, batch_size: int
    ) -> None:
        self.kwargs = {"seed": seed, "rank": rank, "box": box, "crop": crop}
        self.n_samples = n_samples
        self.batch_size = batch_size
        self.calls = 0

    def __call__(self) -> tuple[np.ndarray, ...]:
        numbers = sample_numbers(self.calls, n_samples=self.n_samples, batch_size=self.batch_size)
        self.calls += 1
        plan = plan_batch(numbers, **self.kwargs)  # type: ignore[arg-type]
        return (
            plan.starts,
            plan.ends,
            plan.perm_ids,
            plan.flips[:, 0].copy(),
            plan.flips[:, 1].copy(),
            plan.flips[:, 2].copy(),
        )


def _transpose_both(fn: Any, inp: Any, tar: Any, perm_id: int) -> tuple[Any, Any]:
    order = (SPATIAL_DIMS, *PERMUTATIONS[perm_id])
    return (
        fn.transpose(inp, perm=order, output_layout="CDHW"),
        fn.transpose(tar, perm=order, output_layout="CDHW"),
    )


def _build_pipeline(
    data_path: Path,
    label_path: Path,
    source: _PlanSource,
    *,
    batch_size: int,
    num_threads: int,
    prefetch_depth: int,
    device_id: int | None,
) -> Any:
    # DALI: optional, and only the DALI loader needs it
    from nvidia.dali import fn, pipeline_def, types

    on_gpu = device_id is not None

    @pipeline_def(enable_conditionals=True)  # type: ignore[misc]
    def crops() -> tuple[Any, Any]:
        starts, ends, perm_id, flip_d, flip_h, flip_w = fn.external_source(
            source=source, num_outputs=6, batch=True, dtype=types.DALIDataType.INT32
        )
        fields = []
        for name, path in (("data", data_path), ("label", label_path)):
            field = fn.readers.numpy(
                files=[str(path)],
                roi_start=starts,
                roi_end=ends,
                roi_axes=(0, 1, 2),
                random_shuffle=False,
                name=name,
            )
            fields.append(field.gpu() if on_gpu else field)
        inp, tar = fields
        # Channels go first while spatial axes take the rotation's order; a
        # literal if/elif chain because transpose has no per-sample perm and
        # every branch must leave the same layout for DALI to merge them.
        if perm_id == 0:
            inp, tar = _transpose_both(fn, inp, tar, 0)
        elif perm_id == 1:
            inp, tar = _transpose_both(fn, inp, tar, 1)
        elif perm_id == 2:
            inp, tar = _transpose_both(fn, inp, tar, 2)
        elif perm_id == 3:
            inp, tar = _transpose_both(fn, inp, tar, 3)
        elif perm_id == 4:
            inp, tar = _transpose_both(fn, inp, tar, 4)
        else:
            inp, tar = _transpose_both(fn, inp, tar, 5)
        return (
            fn.flip(inp, depthwise=flip_d, vertical=flip_h, horizontal=flip_w),
            fn.flip(tar, depthwise=flip_d, vertical=flip_h, horizontal=flip_w),
        )

    return crops(
        batch_size=batch_size,
        num_threads=num_threads,
        device_id=device_id if on_gpu else None,
        prefetch_queue_depth=prefetch_depth,
        exec_dynamic=True,
    )


class DaliCropLoader:
    """Iterable of ``(input, target)`` batches made by a DALI pipeline.

    Each pass is one epoch of ``n_samples // batch_size`` batches, on the GPU
    when DALI runs there (the tensors never touch host memory) and on the CPU
    otherwise. An epoch left early is finished silently at the next pass, so
    epochs stay aligned with the torch loaders' sample numbers.
    """

    def __init__(
        self,
        data_path: Path,
        label_path: Path,
        *,
        box: int,
        crop: int,
        batch_size: int,
        n_samples: int,
        seed: int,
        rank: int,
        num_threads: int,
        prefetch_depth: int,
        device_id: int | None,
    ) -> None:
        self.batch_size = batch_size
        self.crop = crop
        self.device = torch.device("cpu") if device_id is None else torch.device("cuda", device_id)
        self.batches_per_epoch = n_samples // batch_size
        self._source = _PlanSource(
            seed=seed, rank=rank, box=box, crop=crop, n_samples=n_samples, batch_size=batch_size
        )
        self._pipe = _build_pipeline(
            data_path,
            label_path,
            self._source,
            batch_size=batch_size,
            num_threads=max(1, num_threads),
            prefetch_depth=prefetch_depth,
            device_id=device_id,
        )
        self._pipe.build()
        self._consumed = 0

    def __len__(self) -> int:
        return self.batches_per_epoch

    def _next_batch(self) -> tuple[torch.Tensor, torch.Tensor]:
        from nvidia.dali.plugin.pytorch import feed_ndarray

        outputs = self._pipe.run()
        self._consumed += 1
        tensors = []
        for out, channels in zip(outputs, (NBODY_CHANNELS, HYDRO_CHANNELS), strict=True):
            dense = out.as_tensor()
            shape = (self.batch_size, channels, self.crop, self.crop, self.crop)
            if tuple(dense.shape()) != shape:
                raise RuntimeError(f"DALI made a batch of shape {dense.shape()}, expected {shape}")
            target = torch.empty(shape, dtype=torch.float32, device=self.device)
            stream = torch.cuda.current_stream(self.device) if self.device.type == "cuda" else None
            feed_ndarray(dense, target, cuda_stream=stream)
            tensors.append(target)
        return tensors[0], tensors[1]

    def __iter__(self) -> Iterator[tuple[torch.Tensor, torch.Tensor]]:
        for _ in range(-self._consumed % self.batches_per_epoch):
            self._next_batch()
        for _ in range(self.batches_per_epoch):
            yield self._next_batch()


def build_dali_loader(
    spec: Any,
    *,
    data_path: str | Path | None = None,
    label_path: str | Path | None = None,
    prefetch_depth: int | None = None,
    device_id: int | None = None,
    use_gpu: bool | None = None,
) -> DaliCropLoader:
    """A :class:`DaliCropLoader` for a :class:`~tuneup.unet.loaders.LoaderSpec`.

    Args:
        spec: the validated loader spec; ``spec.path`` is the HDF5 train box.
        data_path: channels-last input ``.npy``; default ``spec.npy_data`` if
            the spec has it, else ``<dir>/<stem>_data.npy`` next to the box.
        label_path: channels-last target ``.npy``; default ``spec.npy_label``
            if the spec has it, else ``<dir>/<stem>_label.npy``.
        prefetch_depth: DALI ``prefetch_queue_depth``; default
            ``spec.dali_prefetch_depth`` if the spec has it, else
            :data:`DEFAULT_PREFETCH_DEPTH`.
        device_id: CUDA device; default the current one when CUDA is used.
        use_gpu: run DALI on the GPU; default whenever torch sees CUDA.

    Raises:
        UsageError: DALI missing, ``.npy`` files missing or malformed, or a
            crop larger than the box.
    """
    ok, why = dali_available()
    if not ok:
        raise UsageError(why)
    # Optional spec fields, so this works before and after LoaderSpec grows them.
    if data_path is None:
        data_path = getattr(spec, "npy_data", None)
    if label_path is None:
        label_path = getattr(spec, "npy_label", None)
    if prefetch_depth is None:
        prefetch_depth = getattr(spec, "dali_prefetch_depth", None) or DEFAULT_PREFETCH_DEPTH
    if prefetch_depth < 1:
        raise UsageError(f"dali prefetch depth must be at least 1, got {prefetch_depth}")
    h5_path = None if spec.path is None else Path(spec.path)
    data, label = npy_paths(h5_path, data_path, label_path)
    box = _npy_box(data, NBODY_CHANNELS, h5_path)
    label_box = _npy_box(label, HYDRO_CHANNELS, h5_path)
    if box != label_box:
        raise UsageError(f"{data} has side {box} but {label} has side {label_box}; reconvert both")
    problem = crop_problem(spec.crop, box, str(data))
    if problem is not None:
        raise UsageError(problem)
    if use_gpu is None:
        use_gpu = torch.cuda.is_available()
    if use_gpu and device_id is None:
        device_id = torch.cuda.current_device()
    return DaliCropLoader(
        data,
        label,
        box=box,
        crop=spec.crop,
        batch_size=spec.batch_size,
        n_samples=spec.n_samples,
        seed=spec.seed,
        rank=spec.rank,
        num_threads=spec.num_workers,
        prefetch_depth=prefetch_depth,
        device_id=device_id if use_gpu else None,
    )
