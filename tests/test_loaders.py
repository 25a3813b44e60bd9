"""The lowmem, inmem and synthetic loaders: what a training run receives from them."""

from __future__ import annotations

import itertools
import pickle
import warnings
from pathlib import Path

import h5py
import numpy as np
import pytest
import torch

from tuneup.config import LOADERS
from tuneup.errors import UsageError
from tuneup.unet import loaders
from tuneup.unet.datasets import HDF5CropDataset, draw_sample, make_sample
from tuneup.unet.geometry import ROTATION_COUNT, crop_numpy, rotate_numpy, rotation_matrix
from tuneup.unet.loaders import (
    build_loader,
    loader_bytes_per_sample,
    loader_kinds,
)

BOX = 16
CROP = 8


def _position_box(side: int) -> tuple[np.ndarray, np.ndarray]:
    """Fields whose values say where each voxel sits in the box.

    Both fields: channel 0 = linear voxel index, channels 1-3 = x, y, z;
    Hydro channel 4 = minus the linear index.
    """
    x, y, z = np.indices((side,) * 3).astype(np.float32)
    linear = (x * side + y) * side + z
    nbody = np.stack([linear, x, y, z])
    hydro = np.stack([linear, x, y, z, -linear])
    return nbody, hydro


@pytest.fixture(scope="module")
def box_file(tmp_path_factory) -> Path:
    path = tmp_path_factory.mktemp("data") / "box.h5"
    nbody, hydro = _position_box(BOX)
    with h5py.File(path, "w") as f:
        f.create_dataset("Nbody", data=nbody)
        f.create_dataset("Hydro", data=hydro)
    return path


def _loader(kind, path=None, **overrides):
    options = dict(
        path=path,
        crop=CROP,
        batch_size=4,
        n_samples=16,
        num_workers=0,
        pin_memory=False,
        persistent_workers=False,
        prefetch_factor=None,
        seed=7,
        synthetic_box=BOX,
    )
    options.update(overrides)
    return build_loader(kind, **options)


def _batches(loader, count=None):
    return list(itertools.islice(loader, count))


def _decode(inp: torch.Tensor) -> tuple[tuple[int, int, int], int]:
    """Corner and rotation index of a sample of the position box, checking it is a real crop."""
    coords = inp[1:4].numpy().astype(int)
    corner = tuple(int(coords[a].min()) for a in range(3))
    # Row k of the rotation matrix: how box coordinates change along sample axis k.
    rows = [coords[:, 1, 0, 0], coords[:, 0, 1, 0], coords[:, 0, 0, 1]]
    matrix = np.array(rows) - coords[:, 0, 0, 0]
    matches = [i for i in range(ROTATION_COUNT) if np.array_equal(rotation_matrix(i), matrix)]
    assert len(matches) == 1, f"sample is not a rotated crop: {matrix}"
    return corner, matches[0]  # type: ignore[return-value]


def _expected(corner, rot_index, field):
    return rotate_numpy(crop_numpy(field, corner, CROP), rot_index)


@pytest.mark.parametrize("kind", ["lowmem", "inmem"])
def test_input_and_target_are_the_same_rotated_crop_of_the_box(kind, box_file):
    nbody, hydro = _position_box(BOX)
    for inp, tar in _batches(_loader(kind, box_file)):
        assert torch.equal(inp, tar[:, :4])  # same place, same rotation
        assert torch.equal(tar[:, 4], -tar[:, 0])
        for sample_in, sample_tar in zip(inp, tar, strict=True):
            corner, rot_index = _decode(sample_in)
            assert max(corner) <= BOX - CROP
            # The whole sample is a sub-cube of the box, voxel for voxel.
            assert np.array_equal(sample_in.numpy(), _expected(corner, rot_index, nbody))
            assert np.array_equal(sample_tar.numpy(), _expected(corner, rot_index, hydro))


def test_lowmem_and_inmem_give_identical_tensors(box_file):
    lowmem, inmem = _batches(_loader("lowmem", box_file)), _batches(_loader("inmem", box_file))
    for a, b in zip(lowmem, inmem, strict=True):
        assert torch.equal(a[0], b[0])
        assert torch.equal(a[1], b[1])
    nbody, hydro = _position_box(BOX)
    with h5py.File(box_file, "r") as f:
        for corner, rot in [((0, 0, 0), 0), ((8, 3, 1), 5), ((2, 8, 8), 23)]:
            from_disk = make_sample(f["Nbody"], f["Hydro"], corner, rot, CROP)
            from_memory = make_sample(nbody, hydro, corner, rot, CROP)
            assert all(torch.equal(d, m) for d, m in zip(from_disk, from_memory, strict=True))


def test_draws_use_all_24_rotations_and_every_corner_including_both_ends(box_file):
    loader = _loader("inmem", box_file, batch_size=50, n_samples=600)
    rotations, corners = set(), []
    for inp, _ in loader:
        for sample in inp:
            corner, rot_index = _decode(sample)
            rotations.add(rot_index)
            corners.append(corner)
    assert rotations == set(range(ROTATION_COUNT))
    for axis in range(3):
        assert {c[axis] for c in corners} == set(range(BOX - CROP + 1))


def test_two_workers_do_not_return_the_same_batches(box_file):
    loader = _loader("lowmem", box_file, num_workers=2)
    inputs = [inp for inp, _ in loader]
    assert len(inputs) == 4
    for a, b in itertools.combinations(inputs, 2):
        assert not torch.equal(a, b)


def test_each_epoch_draws_new_crops_even_with_persistent_workers(box_file):
    loader = _loader("lowmem", box_file, num_workers=2, persistent_workers=True)
    first = [inp for inp, _ in loader]
    second = [inp for inp, _ in loader]
    assert not any(torch.equal(a, b) for a, b in zip(first, second, strict=True))


def test_ranks_draw_different_crops(box_file):
    rank0 = _batches(_loader("inmem", box_file, rank=0))
    rank1 = _batches(_loader("inmem", box_file, rank=1))
    assert not any(torch.equal(a[0], b[0]) for a, b in zip(rank0, rank1, strict=True))


@pytest.mark.parametrize("num_workers", [0, 2])
def test_same_seed_gives_the_same_batches(box_file, num_workers):
    def first(seed):
        loader = _loader("lowmem", box_file, num_workers=num_workers, seed=seed)
        return _batches(loader, 2)

    again, reference, other = first(7), first(7), first(8)
    for a, b in zip(again, reference, strict=True):
        assert torch.equal(a[0], b[0]) and torch.equal(a[1], b[1])
    assert not torch.equal(reference[0][0], other[0][0])


def test_the_data_do_not_depend_on_the_number_of_workers(box_file):
    serial = _batches(_loader("lowmem", box_file, num_workers=0))
    parallel = _batches(_loader("lowmem", box_file, num_workers=2, prefetch_factor=1))
    assert len(serial) == len(parallel) == 4
    for a, b in zip(serial, parallel, strict=True):
        assert torch.equal(a[0], b[0]) and torch.equal(a[1], b[1])


# the loaders that run on any machine: no DALI, no GPU
HOST_LOADERS = [kind.name for kind in LOADERS if not kind.dali and not kind.on_gpu]


@pytest.mark.parametrize("kind", HOST_LOADERS)
def test_every_kind_yields_the_same_shapes_dtypes_and_layout(kind, box_file):
    batches = _batches(_loader(kind, box_file, batch_size=3, n_samples=10))
    assert len(batches) == 3  # drop_last: the incomplete batch is left out
    for inp, tar in batches:
        assert inp.shape == (3, 4, CROP, CROP, CROP)
        assert tar.shape == (3, 5, CROP, CROP, CROP)
        for t in (inp, tar):
            assert t.dtype == torch.float32
            assert t.device.type == "cpu"
            assert t.is_contiguous()
        per_sample = (inp.nbytes + tar.nbytes) // inp.shape[0]
        assert per_sample == loader_bytes_per_sample(CROP)


def test_worker_only_options_and_pinning_are_harmless_without_workers_or_cuda(box_file):
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # e.g. torch's "pin_memory but no accelerator"
        loader = _loader(
            "lowmem", box_file, pin_memory=True, persistent_workers=True, prefetch_factor=4
        )
        inp, _ = next(iter(loader))
    assert inp.shape[0] == 4


def test_lowmem_dataset_pickles_without_its_file_handle(box_file):
    dataset = HDF5CropDataset(box_file, box=BOX, crop=CROP, n_samples=4, seed=1, rank=0)
    before = dataset[3]  # opens the file in this process
    clone = pickle.loads(pickle.dumps(dataset))  # what a spawned worker receives
    after = clone[3]
    assert torch.equal(before[0], after[0]) and torch.equal(before[1], after[1])
    dataset.close()
    clone.close()


def test_draw_is_a_pure_function_of_seed_rank_and_sample_number():
    assert draw_sample(1, 0, 5, BOX, CROP) == draw_sample(1, 0, 5, BOX, CROP)
    draws = {draw_sample(1, rank, n, BOX, CROP) for rank in range(2) for n in range(50)}
    assert len(draws) > 90  # 100 draws from 24 * 9^3 possibilities rarely collide


def _one_line_error(excinfo) -> str:
    message = str(excinfo.value)
    assert message and "\n" not in message
    return message


def test_unknown_kind_names_the_valid_kinds():
    with pytest.raises(ValueError) as excinfo:
        _loader("warp-drive")
    message = _one_line_error(excinfo)
    assert "warp-drive" in message
    assert all(kind in message for kind in HOST_LOADERS)


@pytest.mark.parametrize("kind", ["lowmem", "inmem"])
def test_missing_file_is_reported_when_the_loader_is_built(kind, tmp_path):
    missing = tmp_path / "nope.h5"
    with pytest.raises(UsageError) as excinfo:
        _loader(kind, missing)
    assert str(missing) in _one_line_error(excinfo)
    with pytest.raises(UsageError) as excinfo:
        _loader(kind, None)
    assert "path" in _one_line_error(excinfo)


@pytest.mark.parametrize("kind", ["lowmem", "inmem"])
def test_crop_larger_than_the_file_box_names_both_sizes(kind, box_file):
    with pytest.raises(UsageError) as excinfo:
        _loader(kind, box_file, crop=BOX + 4)
    message = _one_line_error(excinfo)
    assert str(BOX + 4) in message and str(BOX) in message


def test_synthetic_box_is_capped_and_a_crop_beyond_it_names_both_sizes():
    side = loaders.SYNTHETIC_BOX_MAX
    with pytest.raises(UsageError) as excinfo:
        _loader("synthetic", crop=side + 1, synthetic_box=4 * side)
    message = _one_line_error(excinfo)
    assert str(side + 1) in message and str(side) in message


def test_more_batch_than_samples_is_a_usage_error(box_file):
    with pytest.raises(UsageError) as excinfo:
        _loader("inmem", box_file, batch_size=8, n_samples=4)
    assert "batch_size" in _one_line_error(excinfo)


def test_a_registered_kind_is_buildable_by_name(monkeypatch, box_file):
    seen = []

    def build_copy_of_inmem(spec):
        seen.append(spec)
        return loaders._build_inmem(spec)

    monkeypatch.setitem(loaders._FACTORIES, "test-kind", build_copy_of_inmem)
    assert "test-kind" in loader_kinds()
    batches = _batches(_loader("test-kind", box_file))
    assert seen and seen[0].crop == CROP
    assert len(batches) == 4


def test_a_loader_is_registered_only_where_its_properties_are_declared() -> None:
    with pytest.raises(ValueError, match=r"not declared in tuneup\.config\.loaders"):
        loaders.register_loader("warp-drive", lambda spec: [])
