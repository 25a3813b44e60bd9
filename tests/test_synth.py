"""Synthetic boxes: what a user of `tuneup data synth` would notice."""

from __future__ import annotations

import hashlib
import time
import tracemalloc
from pathlib import Path

import h5py
import numpy as np
import pytest

from tuneup import paths
from tuneup.errors import UsageError
from tuneup.unet import synth
from tuneup.unet.boxfile import inspect_box
from tuneup.unet.synth import SynthResult, nbody_to_hydro, synthesize, write_box


def _sha(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def _read(path: Path) -> tuple[np.ndarray, np.ndarray]:
    with h5py.File(path, "r") as f:
        return f["Nbody"][...], f["Hydro"][...]


def _lag_corr(field: np.ndarray, lag: int) -> float:
    """Correlation of voxels `lag` apart, averaged over the three axes."""
    corrs = []
    for axis in range(3):
        moved = np.moveaxis(field, axis, 0)
        corrs.append(np.corrcoef(moved[:-lag].ravel(), moved[lag:].ravel())[0, 1])
    return float(np.mean(corrs))


@pytest.fixture(scope="module")
def box128(tmp_path_factory: pytest.TempPathFactory) -> tuple[SynthResult, float]:
    out = tmp_path_factory.mktemp("synth128")
    began = time.perf_counter()
    result = synthesize(out, box=128, seed=11)
    return result, time.perf_counter() - began


def test_128_box_is_quick_and_has_the_tutorial_layout(box128):
    result, seconds = box128
    assert seconds < 15, f"a 128^3 box took {seconds:.1f} s"
    assert result.seconds <= seconds
    assert (result.box, result.val_box) == (128, 64)
    for path, box in ((result.train_path, 128), (result.val_path, 64)):
        with h5py.File(path, "r") as f:
            assert sorted(f.keys()) == ["Hydro", "Nbody"]
            for name, channels in (("Nbody", 4), ("Hydro", 5)):
                ds = f[name]
                assert ds.shape == (channels, box, box, box)
                assert ds.dtype == np.float32
                assert ds.chunks is None  # contiguous, cheap random crops
        assert inspect_box(path).box == box


def test_inputs_are_smooth_finite_and_density_like(box128):
    nbody, _ = _read(box128[0].train_path)
    assert np.isfinite(nbody).all()
    for channel in range(4):
        assert nbody[channel].std() > 0.3, f"channel {channel} is near constant"
        assert _lag_corr(nbody[channel], 1) > 0.8, f"channel {channel} is not smooth"
    density = nbody[0]
    assert density.min() > 0
    assert abs(density.mean() - 1) < 0.1
    skew = ((density - density.mean()) ** 3).mean() / density.std() ** 3
    assert skew > 1, "density should have a long tail of dense voxels"


def test_targets_follow_the_map_and_suit_a_tanh_output(box128):
    nbody, hydro = _read(box128[0].val_path)  # the smaller box keeps this quick
    np.testing.assert_allclose(hydro, nbody_to_hydro(nbody), rtol=1e-6, atol=1e-7)
    _, hydro = _read(box128[0].train_path)
    assert np.isfinite(hydro).all()
    assert np.abs(hydro).max() < 1
    for channel in range(5):
        assert hydro[channel].std() > 0.1, f"target channel {channel} is near constant"
        assert _lag_corr(hydro[channel], 1) > 0.8


def test_same_seed_gives_same_bytes_whatever_the_slab_size(tmp_path):
    write_box(tmp_path / "a.h5", 40, seed=5)
    time.sleep(1.1)  # a timestamp in the file would now differ
    write_box(tmp_path / "b.h5", 40, seed=5, chunk=3)
    write_box(tmp_path / "c.h5", 40, seed=5, chunk=40)
    assert _sha(tmp_path / "a.h5") == _sha(tmp_path / "b.h5") == _sha(tmp_path / "c.h5")


def test_other_seed_or_stream_gives_other_data(tmp_path):
    write_box(tmp_path / "a.h5", 24, seed=5)
    write_box(tmp_path / "b.h5", 24, seed=6)
    write_box(tmp_path / "c.h5", 24, seed=5, stream=1)
    base, _ = _read(tmp_path / "a.h5")
    for other in ("b.h5", "c.h5"):
        data, _ = _read(tmp_path / other)
        corr = np.corrcoef(base[1].ravel(), data[1].ravel())[0, 1]
        assert abs(corr) < 0.3, f"{other} repeats the first box"


def test_train_and_val_differ(tmp_path):
    result = synthesize(tmp_path, box=32, val_box=32, seed=3)
    train, _ = _read(result.train_path)
    val, _ = _read(result.val_path)
    assert abs(np.corrcoef(train[1].ravel(), val[1].ravel())[0, 1]) < 0.3


def test_correlation_length_does_not_grow_with_the_box():
    small = synth._NbodyField(32, 0, 0).slab(0, 32)
    large = synth._NbodyField(96, 0, 0).slab(0, 96)
    # Velocities are Gaussian, so their correlation at a fixed lag is a clean gauge.
    small_corr = np.mean([_lag_corr(small[c], 4) for c in range(1, 4)])
    large_corr = np.mean([_lag_corr(large[c], 4) for c in range(1, 4)])
    assert abs(small_corr - large_corr) < 0.1


def test_generation_streams_in_slabs(tmp_path):
    box = 176
    full_bytes = synth.box_bytes(box)
    tracemalloc.start()
    try:
        write_box(tmp_path / "big.h5", box, seed=0)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert peak < full_bytes / 10, f"peak {peak / 2**20:.0f} MiB for a {box}^3 box"


def test_val_box_defaults_to_half_but_at_least_16(tmp_path):
    assert synthesize(tmp_path / "a", box=40).val_box == 20
    assert synthesize(tmp_path / "b", box=20).val_box == 16


def test_interrupted_write_leaves_old_file_and_no_debris(tmp_path, monkeypatch):
    target = tmp_path / "train.h5"
    target.write_bytes(b"previous")
    calls = []

    def failing(nbody: np.ndarray) -> np.ndarray:
        calls.append(1)
        if len(calls) == 2:
            raise KeyboardInterrupt
        return nbody_to_hydro(nbody)

    monkeypatch.setattr(synth, "nbody_to_hydro", failing)
    with pytest.raises(KeyboardInterrupt):
        write_box(target, 32, seed=0, chunk=4)
    assert target.read_bytes() == b"previous"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["train.h5"]


@pytest.mark.parametrize(
    ("kwargs", "named"),
    [
        ({"box": 8}, "box"),
        ({"box": 64.0}, "box"),
        ({"box": True}, "box"),
        ({"box": 32, "val_box": 15}, "val_box"),
        ({"box": 32, "seed": -1}, "seed"),
    ],
)
def test_bad_arguments_give_one_line(tmp_path, kwargs, named):
    with pytest.raises(UsageError) as info:
        synthesize(tmp_path, **kwargs)
    message = str(info.value)
    assert "\n" not in message
    assert message.startswith(named)
    assert not list(tmp_path.iterdir())


def test_unusable_output_folder_gives_one_line(tmp_path):
    blocker = tmp_path / "file"
    blocker.write_text("x")
    with pytest.raises(UsageError, match="cannot create output folder") as info:
        synthesize(blocker / "data", box=16)
    assert "\n" not in str(info.value)


def test_too_little_disk_space_gives_one_line_and_leaves_no_folder(tmp_path, monkeypatch):
    monkeypatch.setattr(paths.shutil, "disk_usage", lambda _: _Usage(free=1000))
    with pytest.raises(UsageError, match="not enough free space") as info:
        synthesize(tmp_path / "data", box=16)
    assert "need 288.0 KiB, have 1.0 KiB" in str(info.value) and "--out" in str(info.value)
    assert not list(tmp_path.iterdir())


def test_hydro_map_rejects_wrong_channel_count():
    with pytest.raises(ValueError, match="shape"):
        nbody_to_hydro(np.ones((3, 4, 4, 4), dtype=np.float32))


class _Usage:
    def __init__(self, free: int) -> None:
        self.free = free
