"""`tuneup data convert`: channels-last .npy copies of an HDF5 box, in bounded memory."""

from __future__ import annotations

import tracemalloc
from pathlib import Path

import h5py
import numpy as np
import pytest

from tuneup.errors import UsageError
from tuneup.unet.npy import convert_box, npy_paths, run_convert, slab_rows


def write_h5(path: Path, box: int, *, dtype: str = "float32", seed: int = 0) -> Path:
    rng = np.random.default_rng(seed)
    with h5py.File(path, "w") as f:
        f["Nbody"] = rng.standard_normal((4, box, box, box)).astype(dtype)
        f["Hydro"] = rng.standard_normal((5, box, box, box)).astype(dtype)
    return path


@pytest.mark.parametrize("box", [16, 37])  # 37: the last slab is partial
def test_round_trip_is_the_box_with_channels_last(tmp_path, box):
    src = write_h5(tmp_path / "train.h5", box)
    data_path, label_path = convert_box(src, tmp_path / "out")
    assert (data_path, label_path) == npy_paths(src, tmp_path / "out")
    assert data_path.name == "train_data.npy" and label_path.name == "train_label.npy"
    data, label = np.load(data_path), np.load(label_path)
    assert data.shape == (box, box, box, 4) and label.shape == (box, box, box, 5)
    assert data.dtype == np.float32 and label.dtype == np.float32
    with h5py.File(src, "r") as f:
        np.testing.assert_array_equal(data, np.moveaxis(f["Nbody"][...], 0, -1))
        np.testing.assert_array_equal(label, np.moveaxis(f["Hydro"][...], 0, -1))
    assert data[1, 2, 3, 0] == pytest.approx(float(h5py.File(src, "r")["Nbody"][0, 1, 2, 3]))
    assert sorted(p.name for p in (tmp_path / "out").iterdir()) == [
        "train_data.npy",
        "train_label.npy",
    ]  # no temporary file left behind


def test_float64_file_becomes_float32(tmp_path):
    src = write_h5(tmp_path / "b.h5", 16, dtype="float64")
    data_path, _ = convert_box(src, tmp_path)
    data = np.load(data_path)
    assert data.dtype == np.float32
    with h5py.File(src, "r") as f:
        np.testing.assert_allclose(data, np.moveaxis(f["Nbody"][...], 0, -1), rtol=1e-6)


def test_memory_stays_far_below_the_box(tmp_path):
    box = 96
    src = write_h5(tmp_path / "big.h5", box)
    box_bytes = 9 * box**3 * 4
    assert slab_rows(box) < box
    tracemalloc.start()
    try:
        convert_box(src, tmp_path / "out")
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert peak < box_bytes / 8, (peak, box_bytes)


def test_file_without_the_datasets_is_one_line_error(tmp_path):
    bad = tmp_path / "bad.h5"
    with h5py.File(bad, "w") as f:
        f["density"] = np.zeros((4, 8, 8, 8), dtype=np.float32)
    with pytest.raises(UsageError, match="no dataset 'Nbody'") as err:
        convert_box(bad, tmp_path / "out")
    assert "\n" not in str(err.value)
    assert not (tmp_path / "out" / "bad_data.npy").exists()


def test_mismatched_shapes_are_refused(tmp_path):
    bad = tmp_path / "bad.h5"
    with h5py.File(bad, "w") as f:
        f["Nbody"] = np.zeros((4, 16, 16, 16), dtype=np.float32)
        f["Hydro"] = np.zeros((5, 8, 8, 8), dtype=np.float32)
    with pytest.raises(UsageError, match="spatial shape"):
        convert_box(bad, tmp_path / "out")


def test_missing_file_is_refused(tmp_path):
    with pytest.raises(UsageError, match="not found"):
        convert_box(tmp_path / "nope.h5", tmp_path / "out")


def test_run_convert_prints_both_paths(tmp_path, capsys):
    src = write_h5(tmp_path / "val.h5", 16)
    assert run_convert(src, tmp_path / "o") == 0
    printed = capsys.readouterr().out.split()
    assert printed == [str(p) for p in npy_paths(src, tmp_path / "o")]
    assert all(Path(p).is_file() for p in printed)


def test_cli_convert_and_synth_npy_write_the_copies_dali_reads(tmp_path: Path) -> None:
    import subprocess
    import sys

    made = subprocess.run(
        [
            sys.executable,
            "-m",
            "tuneup",
            "data",
            "synth",
            "--out",
            str(tmp_path / "d"),
            "--box",
            "16",
            "--npy",
        ],
        capture_output=True,
        text=True,
    )
    assert made.returncode == 0, made.stderr
    for stem, side in (("train", 16), ("val", 16)):
        data = np.load(tmp_path / "d" / f"{stem}_data.npy", mmap_mode="r")
        label = np.load(tmp_path / "d" / f"{stem}_label.npy", mmap_mode="r")
        assert data.shape == (side, side, side, 4) and label.shape == (side, side, side, 5)
    again = subprocess.run(
        [
            sys.executable,
            "-m",
            "tuneup",
            "data",
            "convert",
            str(tmp_path / "d" / "train.h5"),
            "--out",
            str(tmp_path / "copy"),
        ],
        capture_output=True,
        text=True,
    )
    assert again.returncode == 0, again.stderr
    assert "train_data.npy" in again.stdout and "train_label.npy" in again.stdout
    bad = subprocess.run(
        [
            sys.executable,
            "-m",
            "tuneup",
            "data",
            "convert",
            str(tmp_path / "nope.h5"),
            "--out",
            str(tmp_path / "x"),
        ],
        capture_output=True,
        text=True,
    )
    assert bad.returncode == 2 and bad.stderr.count("\n") == 1
