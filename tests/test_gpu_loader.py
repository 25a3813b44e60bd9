"""The `gpu` loader: device-resident boxes, the same samples as the PyTorch loaders."""

from __future__ import annotations

from pathlib import Path

import h5py
import numpy as np
import pytest
import torch

from tuneup.errors import UsageError
from tuneup.unet.datasets import draw_sample, make_sample
from tuneup.unet.geometry import ROTATION_COUNT
from tuneup.unet.gpu_loader import GpuBoxLoader, build_gpu_loader, check_fits
from tuneup.unet.loaders import LoaderSpec, build_loader

CPU = torch.device("cpu")


def position_box(box: int) -> tuple[np.ndarray, np.ndarray]:
    """Every voxel's value encodes its channel and position, so any misplacement shows."""
    c, x, y, z = np.meshgrid(*(np.arange(n) for n in (9, box, box, box)), indexing="ij")
    fields = (c * 1_000_000 + x * 10_000 + y * 100 + z).astype(np.float32)
    return fields[:4].copy(), fields[4:].copy()


def write_box(path: Path, box: int) -> Path:
    nbody, hydro = position_box(box)
    with h5py.File(path, "w") as f:
        f["Nbody"], f["Hydro"] = nbody, hydro
    return path


def spec(path: Path | None, **over: object) -> LoaderSpec:
    values: dict = dict(
        path=path,
        crop=8,
        batch_size=4,
        n_samples=16,
        num_workers=0,
        pin_memory=False,
        persistent_workers=False,
        prefetch_factor=None,
        seed=3,
        rank=0,
        synthetic_box=32,
    )
    values.update(over)
    return LoaderSpec(**values)


@pytest.mark.parametrize("box", [16, 19, 24])
def test_each_sample_equals_make_sample_at_the_same_corner_and_rotation(box):
    nbody, hydro = position_box(box)
    loader = GpuBoxLoader(
        torch.from_numpy(nbody), torch.from_numpy(hydro),
        crop=8, batch_size=6, n_samples=30, seed=5, rank=1,
    )  # fmt: skip
    numbers = list(range(100, 106))
    inp, tar = loader.batch(numbers)
    for j, number in enumerate(numbers):
        corner, rot = draw_sample(5, 1, number, box, 8)
        want_inp, want_tar = make_sample(nbody, hydro, corner, rot, 8)
        assert torch.equal(inp[j], want_inp), (number, corner, rot)
        assert torch.equal(tar[j], want_tar), (number, corner, rot)


def test_batches_match_the_inmem_loader_epoch_after_epoch(tmp_path):
    path = write_box(tmp_path / "b.h5", 20)
    gpu = build_gpu_loader(spec(path, n_samples=18), CPU)
    inmem = build_loader("inmem", **{**spec(path, n_samples=18).__dict__, "path": path})
    assert len(gpu) == len(inmem) == 4
    for _epoch in range(2):
        got, want = list(gpu), list(inmem)
        assert len(got) == len(want)
        for (gi, gt), (wi, wt) in zip(got, want, strict=True):
            assert torch.equal(gi, wi) and torch.equal(gt, wt)


def test_layout_shapes_and_dtypes(tmp_path):
    loader = build_gpu_loader(spec(write_box(tmp_path / "b.h5", 16)), CPU)
    batches = list(loader)
    assert len(batches) == len(loader) == 4
    for inp, tar in batches:
        assert inp.shape == (4, 4, 8, 8, 8) and tar.shape == (4, 5, 8, 8, 8)
        assert inp.dtype == tar.dtype == torch.float32
        assert inp.is_contiguous() and tar.is_contiguous()
        assert inp.device == CPU
    # A sample never aliases the resident box.
    batches[0][0].zero_()
    assert loader.nbody.abs().sum() > 0


def test_corners_cover_every_position_on_every_axis():
    box, crop = 16, 8
    nbody, hydro = position_box(box)
    loader = GpuBoxLoader(
        torch.from_numpy(nbody), torch.from_numpy(hydro),
        crop=crop, batch_size=8, n_samples=400, seed=0, rank=0,
    )  # fmt: skip
    seen: list[set[int]] = [set(), set(), set()]
    for inp, _ in loader:
        for sample in inp:
            # Values grow with x, y and z, so the minimum is the crop's corner.
            low = int(sample[0].min().item())
            for axis, coord in enumerate((low // 10_000, low // 100 % 100, low % 100)):
                seen[axis].add(coord)
    assert seen == [set(range(box - crop + 1))] * 3


def test_every_rotation_reaches_the_loader_output():
    box, crop = 12, 4
    nbody, hydro = position_box(box)
    loader = GpuBoxLoader(
        torch.from_numpy(nbody), torch.from_numpy(hydro),
        crop=crop, batch_size=8, n_samples=400, seed=0, rank=0,
    )  # fmt: skip
    patterns = set()
    for inp, _ in loader:
        for sample in inp:
            # Steps along the three output axes, as position offsets: one of 24 frames.
            origin = sample[0, 0, 0, 0]
            steps = tuple(
                int(v - origin)
                for v in (sample[0, 1, 0, 0], sample[0, 0, 1, 0], sample[0, 0, 0, 1])
            )
            patterns.add(steps)
    assert len(patterns) == ROTATION_COUNT


def test_boxes_too_big_for_the_gpu_are_refused_with_sizes(tmp_path):
    path = write_box(tmp_path / "b.h5", 16)
    with pytest.raises(UsageError, match=r"need 0\.00 GiB but the GPU has 0\.00 GiB free"):
        build_gpu_loader(spec(path), torch.device("cuda", 0), free_bytes=lambda _d: 1000)
    need = 9 * 16**3 * 4
    check_fits(need, torch.device("cuda", 0), lambda _d: need)  # exactly fits: no error
    with pytest.raises(UsageError, match="use lowmem/dali or a smaller box"):
        check_fits(64 * 2**30, torch.device("cuda", 0), lambda _d: 40 * 2**30)


def test_bad_inputs_are_usage_errors(tmp_path):
    with pytest.raises(UsageError, match="give the path"):
        build_gpu_loader(spec(None), CPU)
    with pytest.raises(UsageError, match="larger than the box side"):
        build_gpu_loader(spec(write_box(tmp_path / "b.h5", 16), crop=20), CPU)


@pytest.mark.gpu
def test_batches_are_on_the_gpu_and_match_the_cpu(tmp_path):
    path = write_box(tmp_path / "b.h5", 24)
    dev = build_gpu_loader(spec(path), torch.device("cuda"))
    host = build_gpu_loader(spec(path), CPU)
    for (di, dt), (hi, ht) in zip(dev, host, strict=True):
        assert di.is_cuda and dt.is_cuda and di.is_contiguous()
        assert torch.equal(di.cpu(), hi) and torch.equal(dt.cpu(), ht)


def test_the_registered_factory_puts_the_boxes_on_the_spec_device(tmp_path):
    from tuneup.unet.gpu_loader import build_gpu

    loader = build_gpu(spec(write_box(tmp_path / "b.h5", 16), device="cpu"))
    assert loader.device == CPU and loader.nbody.shape == (4, 16, 16, 16)
