"""The dali-lowmem loader: the same batches as the torch loaders, made by DALI."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import h5py
import numpy as np
import pytest
import torch
import yaml

pytest.importorskip("nvidia.dali")

from tuneup.errors import UsageError
from tuneup.unet import dali_loader
from tuneup.unet.dali_loader import (
    build_dali_loader,
    dali_available,
    plan_batch,
    sample_numbers,
)
from tuneup.unet.datasets import make_sample
from tuneup.unet.geometry import ROTATION_COUNT
from tuneup.unet.loaders import LoaderSpec, build_loader

BOX = 16
CROP = 8


def _position_box(side: int) -> tuple[np.ndarray, np.ndarray]:
    """Fields whose values say where each voxel sits, so any misplaced voxel shows."""
    x, y, z = np.indices((side,) * 3).astype(np.float32)
    linear = (x * side + y) * side + z
    return np.stack([linear, x, y, z]), np.stack([linear, x, y, z, -linear])


def _channels_last(arr: np.ndarray) -> np.ndarray:
    return np.ascontiguousarray(arr.transpose(1, 2, 3, 0))


@pytest.fixture(scope="module")
def box(tmp_path_factory) -> tuple[Path, np.ndarray, np.ndarray]:
    """An HDF5 box and, next to it, its converted .npy copies."""
    folder = tmp_path_factory.mktemp("dali")
    nbody, hydro = _position_box(BOX)
    h5 = folder / "box.h5"
    with h5py.File(h5, "w") as f:
        f.create_dataset("Nbody", data=nbody)
        f.create_dataset("Hydro", data=hydro)
    np.save(folder / "box_data.npy", _channels_last(nbody))
    np.save(folder / "box_label.npy", _channels_last(hydro))
    return h5, nbody, hydro


def _spec(path: Path | None, **overrides) -> LoaderSpec:
    values = dict(
        path=path,
        crop=CROP,
        batch_size=4,
        n_samples=10,
        num_workers=1,
        pin_memory=False,
        persistent_workers=False,
        prefetch_factor=None,
        seed=5,
        rank=1,
        synthetic_box=0,
    )
    values.update(overrides)
    return LoaderSpec(**values)


def test_same_batches_as_the_lowmem_loader(box):
    # n_samples 10 with batches of 4: two batches per epoch, two numbers dropped.
    h5, _, _ = box
    spec = _spec(h5)
    torch_loader = build_loader("lowmem", **dataclasses.asdict(spec))
    dali = build_dali_loader(spec, use_gpu=False)
    assert len(dali) == len(torch_loader) == 2
    for _ in range(2):  # two epochs: fresh crops, numbered as EpochSampler does
        pairs = list(zip(torch_loader, dali, strict=True))
        assert len(pairs) == 2
        for (t_inp, t_tar), (d_inp, d_tar) in pairs:
            assert torch.equal(d_inp, t_inp)
            assert torch.equal(d_tar, t_tar)


def test_every_rotation_matches_make_sample(box):
    h5, nbody, hydro = box
    spec = _spec(h5, batch_size=16, n_samples=160, rank=0, num_workers=2)
    dali = build_dali_loader(spec, use_gpu=False)
    seen = set()
    for count, (inp, tar) in enumerate(dali):
        numbers = sample_numbers(count, n_samples=spec.n_samples, batch_size=spec.batch_size)
        plan = plan_batch(numbers, seed=spec.seed, rank=spec.rank, box=BOX, crop=CROP)
        for i, rotation in enumerate(plan.rotations):
            corner = tuple(int(c) for c in plan.starts[i])
            want_inp, want_tar = make_sample(nbody, hydro, corner, int(rotation), CROP)
            assert torch.equal(inp[i], want_inp), f"rotation {rotation} at {corner}"
            assert torch.equal(tar[i], want_tar), f"rotation {rotation} at {corner}"
            seen.add(int(rotation))
    assert seen == set(range(ROTATION_COUNT))


def test_batches_have_the_torch_loaders_layout(box):
    h5, _, _ = box
    dali = build_dali_loader(_spec(h5), use_gpu=False)
    inp, tar = next(iter(dali))
    assert inp.shape == (4, 4, CROP, CROP, CROP)
    assert tar.shape == (4, 5, CROP, CROP, CROP)
    for t in (inp, tar):
        assert t.dtype == torch.float32
        assert t.is_contiguous()
        assert t.device.type == "cpu"


def test_an_epoch_left_early_does_not_shift_the_next(box):
    h5, _, _ = box
    spec = _spec(h5)
    left_early = build_dali_loader(spec, use_gpu=False)
    next(iter(left_early))  # leave epoch 0 after one of its two batches
    got = list(left_early)
    full = build_dali_loader(spec, use_gpu=False)
    first = list(full)
    want = list(full)
    assert len(got) == len(want) == 2
    for (a, b), (c, d) in zip(got, want, strict=True):
        assert torch.equal(a, c) and torch.equal(b, d)
    assert not torch.equal(want[0][0], first[0][0])  # epochs differ


def test_explicit_npy_paths_are_used(box, tmp_path):
    _, nbody, hydro = box
    data, label = tmp_path / "in.npy", tmp_path / "out.npy"
    np.save(data, _channels_last(nbody))
    np.save(label, _channels_last(hydro))
    spec = _spec(None)
    dali = build_dali_loader(spec, data_path=data, label_path=label, use_gpu=False)
    inp, _ = next(iter(dali))
    assert inp.shape[1] == 4


def test_missing_npy_suggests_converting(tmp_path):
    h5 = tmp_path / "train.h5"
    with pytest.raises(UsageError, match=r"tuneup data convert .*train\.h5 --out"):
        build_dali_loader(_spec(h5), use_gpu=False)


def test_wrong_npy_layout_is_refused(box, tmp_path):
    _, nbody, hydro = box
    data, label = tmp_path / "x_data.npy", tmp_path / "x_label.npy"
    np.save(data, nbody)  # channels-first: not what convert writes
    np.save(label, _channels_last(hydro))
    with pytest.raises(UsageError, match="expected float32"):
        build_dali_loader(_spec(tmp_path / "x.h5"), use_gpu=False)


def test_crop_larger_than_the_box_is_refused(box):
    h5, _, _ = box
    with pytest.raises(UsageError, match="larger than the box"):
        build_dali_loader(_spec(h5, crop=BOX + 1), use_gpu=False)


def test_without_dali_the_user_is_told_what_to_install(box, monkeypatch):
    assert dali_available() == (True, "")
    monkeypatch.setattr(dali_loader, "dali_available", lambda: (False, dali_loader.DALI_MISSING))
    with pytest.raises(UsageError, match=r"pip install 'tuneup\[dali\]'"):
        build_dali_loader(_spec(box[0]), use_gpu=False)


@pytest.mark.gpu
def test_gpu_batches_stay_on_the_gpu_and_match_cpu(box):
    h5, _, _ = box
    spec = _spec(h5)
    gpu = list(build_dali_loader(spec))
    cpu = list(build_dali_loader(spec, use_gpu=False))
    for (g_inp, g_tar), (c_inp, c_tar) in zip(gpu, cpu, strict=True):
        assert g_inp.is_cuda and g_tar.is_cuda
        assert torch.equal(g_inp.cpu(), c_inp) and torch.equal(g_tar.cpu(), c_tar)


def test_tuneup_train_runs_dali_on_the_npy_copies_alone(box, tmp_path, tiny_run, capsys):
    """As the tutorial's DALI path: the HDF5 files need not be there when the copies are named."""
    from tuneup.cli import main

    h5, _, _ = box
    data, label = h5.with_name("box_data.npy"), h5.with_name("box_label.npy")
    values = {**tiny_run, "data_loader_config": "dali-lowmem", "box_size": [BOX, BOX],
              "data_size": CROP, "train_path": str(tmp_path / "gone" / "train.h5"),
              "val_path": str(tmp_path / "gone" / "val.h5"), "num_epochs": 1,
              "train_path_npy_data": str(data), "train_path_npy_label": str(label),
              "val_path_npy_data": str(data), "val_path_npy_label": str(label)}  # fmt: skip
    config = tmp_path / "UNet.yaml"
    config.write_text(yaml.safe_dump({"dali": values}))
    assert main(["train", "--yaml_config", str(config), "--config", "dali"]) == 0
    out = capsys.readouterr().out
    assert "Time taken for epoch 1" in out and "Avg val loss=" in out
    # without the copies the HDF5 file is needed after all, and its absence is one line
    del values["val_path_npy_label"]
    config.write_text(yaml.safe_dump({"dali": values}))
    assert main(["train", "--yaml_config", str(config), "--config", "dali"]) == 2
    assert "val.h5" in capsys.readouterr().err
