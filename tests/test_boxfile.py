"""Box file checks: every bad file a user may point at gets one clear line."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import h5py
import numpy as np
import pytest

from tuneup.errors import UsageError
from tuneup.unet.boxfile import BoxInfo, inspect_box
from tuneup.unet.synth import write_box


def _h5(path: Path, **datasets: tuple[tuple[int, ...], str]) -> Path:
    with h5py.File(path, "w") as f:
        for name, (shape, dtype) in datasets.items():
            f.create_dataset(name, data=np.zeros(shape, dtype=dtype))
    return path


GOOD_N = ((4, 8, 8, 8), "float32")
GOOD_H = ((5, 8, 8, 8), "float32")


def test_a_synthetic_box_passes(tmp_path):
    path = tmp_path / "box.h5"
    write_box(path, 16, seed=0)
    assert inspect_box(path) == BoxInfo(
        path=path, box=16, nbody_shape=(4, 16, 16, 16), hydro_shape=(5, 16, 16, 16)
    )


def test_other_float_types_pass(tmp_path):
    path = _h5(tmp_path / "f64.h5", Nbody=((4, 8, 8, 8), "float64"), Hydro=((5, 8, 8, 8), "f2"))
    assert inspect_box(path).box == 8


def _missing(tmp: Path) -> Path:
    return tmp / "nope.h5"


def _folder(tmp: Path) -> Path:
    (tmp / "dir.h5").mkdir()
    return tmp / "dir.h5"


def _text(tmp: Path) -> Path:
    path = tmp / "notes.h5"
    path.write_text("not hdf5\n")
    return path


def _truncated(tmp: Path) -> Path:
    whole = tmp / "whole.h5"
    write_box(whole, 16, seed=0)
    path = tmp / "half.h5"
    path.write_bytes(whole.read_bytes()[:4096])
    return path


def _no_hydro(tmp: Path) -> Path:
    return _h5(tmp / "x.h5", Nbody=GOOD_N, density=GOOD_H)


def _group_not_dataset(tmp: Path) -> Path:
    path = _h5(tmp / "x.h5", Hydro=GOOD_H)
    with h5py.File(path, "a") as f:
        f.create_group("Nbody")
    return path


def _rank(tmp: Path) -> Path:
    return _h5(tmp / "x.h5", Nbody=((4, 8, 8), "float32"), Hydro=GOOD_H)


def _channels(tmp: Path) -> Path:
    return _h5(tmp / "x.h5", Nbody=GOOD_N, Hydro=((4, 8, 8, 8), "float32"))


def _dtype(tmp: Path) -> Path:
    return _h5(tmp / "x.h5", Nbody=((4, 8, 8, 8), "int32"), Hydro=GOOD_H)


def _not_cubic(tmp: Path) -> Path:
    return _h5(tmp / "x.h5", Nbody=((4, 8, 8, 9), "float32"), Hydro=((5, 8, 8, 9), "float32"))


def _mismatch(tmp: Path) -> Path:
    return _h5(tmp / "x.h5", Nbody=GOOD_N, Hydro=((5, 16, 16, 16), "float32"))


@pytest.mark.parametrize(
    ("make", "expected"),
    [
        (_missing, ["data file not found", "tuneup data synth --out DIR", "train_path"]),
        (_folder, ["not a file"]),
        (_text, ["not an HDF5 file", "Nbody", "Hydro"]),
        (_truncated, ["is cut short (4,096 of", "bytes)", "make it again"]),
        (_no_hydro, ["no dataset 'Hydro'", "it has: Nbody, density"]),
        (_group_not_dataset, ["no dataset 'Nbody'", "it has: Hydro, Nbody"]),
        (_rank, ["Nbody", "rank 3", "(4, L, L, L)"]),
        (_channels, ["Hydro", "4 channels", "expected 5 channels"]),
        (_dtype, ["Nbody", "int32", "float"]),
        (_not_cubic, ["Nbody", "not cubic"]),
        (_mismatch, ["differs", "(8, 8, 8)", "(16, 16, 16)"]),
    ],
    ids=lambda v: v.__name__.strip("_") if callable(v) else "",
)
def test_bad_files_give_one_line(
    tmp_path: Path, make: Callable[[Path], Path], expected: list[str]
) -> None:
    path = make(tmp_path)
    with pytest.raises(UsageError) as info:
        inspect_box(path)
    message = str(info.value)
    assert "\n" not in message
    assert str(path) in message
    for part in expected:
        assert part in message
