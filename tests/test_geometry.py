"""The tutorial's 24 cube transforms and crops: its table exactly, the same in numpy and torch."""

from __future__ import annotations

import itertools

import numpy as np
import pytest
import torch

from tuneup.unet.geometry import (
    ROTATION_COUNT,
    crop_numpy,
    random_corner,
    rotate_numpy,
    rotate_torch,
    rotation_matrix,
)

ALL = range(ROTATION_COUNT)


def _matrices() -> list[np.ndarray]:
    return [rotation_matrix(i) for i in ALL]


def _index_of(matrix: np.ndarray) -> int:
    hits = [i for i, m in enumerate(_matrices()) if np.array_equal(m, matrix)]
    assert len(hits) == 1, matrix
    return hits[0]


# The tutorial's RandomRotator (utils/data_loader.py of NERSC/sc22-dl-tutorial), in
# its own terms: the numpy transpose of (C, X, Y, Z) and the axes reversed after it,
# for its transforms 1..24 (24 is the identity).
TUTORIAL = {
    1: ((0, 1, 2, 3), (1, 2)), 2: ((0, 1, 2, 3), (1, 3)), 3: ((0, 1, 2, 3), (2, 3)),
    4: ((0, 2, 1, 3), (1,)), 5: ((0, 2, 1, 3), (1, 3)), 6: ((0, 2, 1, 3), (2,)),
    7: ((0, 2, 1, 3), (2, 3)), 8: ((0, 3, 2, 1), (1,)), 9: ((0, 3, 2, 1), (1, 2)),
    10: ((0, 3, 2, 1), (3,)), 11: ((0, 3, 2, 1), (2, 3)), 12: ((0, 1, 3, 2), (2,)),
    13: ((0, 1, 3, 2), (1, 2)), 14: ((0, 1, 3, 2), (3,)), 15: ((0, 1, 3, 2), (1, 3)),
    16: ((0, 2, 3, 1), (1, 2)), 17: ((0, 2, 3, 1), (2, 3)), 18: ((0, 2, 3, 1), (1, 3)),
    19: ((0, 2, 3, 1), (1, 2, 3)), 20: ((0, 3, 1, 2), (1, 2)), 21: ((0, 3, 1, 2), (1, 3)),
    22: ((0, 3, 1, 2), (2, 3)), 23: ((0, 3, 1, 2), (1, 2, 3)), 24: ((0, 1, 2, 3), ()),
}  # fmt: skip


def tutorial_transform(arr: np.ndarray, number: int) -> np.ndarray:
    order, flipped = TUTORIAL[number]
    out = arr.transpose(order)
    return np.flip(out, axis=flipped) if flipped else out


def test_the_table_is_the_tutorials_16_rotations_and_8_reflections():
    mats = _matrices()
    assert len({m.tobytes() for m in mats}) == ROTATION_COUNT == 24
    for m in mats:
        assert m.dtype.kind == "i"
        assert np.array_equal(m @ m.T, np.eye(3, dtype=m.dtype))
    determinants = [round(np.linalg.det(m)) for m in mats]
    assert determinants.count(1) == 16 and determinants.count(-1) == 8
    arr = np.random.default_rng(3).standard_normal((2, 4, 5, 6))
    for number in TUTORIAL:  # the same transform of the same array, number for number
        assert np.array_equal(rotate_numpy(arr, number % 24), tutorial_transform(arr, number))


def test_rotation_zero_is_the_identity():
    assert np.array_equal(rotation_matrix(0), np.eye(3, dtype=int))
    arr = np.arange(2 * 27).reshape(2, 3, 3, 3)
    assert np.array_equal(rotate_numpy(arr, 0), arr)


@pytest.mark.parametrize("side", [4, 5])
def test_rotate_numpy_moves_voxels_as_the_matrix_moves_coordinates(side):
    rng = np.random.default_rng(0)
    arr = rng.standard_normal((2, side, side, side))
    grid = np.indices((side,) * 3).reshape(3, -1)  # every voxel position
    centre = (side - 1) / 2
    for i in ALL:
        out = rotate_numpy(arr, i)
        moved = rotation_matrix(i) @ (grid - centre) + centre
        dest = np.rint(moved).astype(int)
        assert np.array_equal(out[:, dest[0], dest[1], dest[2]], arr[:, grid[0], grid[1], grid[2]])


def test_rotate_torch_equals_rotate_numpy_with_any_leading_dims():
    # Non-cubic sides catch a permutation applied in the wrong direction.
    arr = np.random.default_rng(2).standard_normal((2, 3, 4, 5, 6)).astype(np.float32)
    tensor = torch.from_numpy(arr)
    for i in ALL:
        assert np.array_equal(rotate_torch(tensor, i).numpy(), rotate_numpy(arr, i))
        assert np.array_equal(rotate_torch(tensor[0, 0], i).numpy(), rotate_numpy(arr[0, 0], i))


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")
def test_rotate_torch_on_gpu_equals_rotate_numpy():
    arr = np.random.default_rng(3).standard_normal((2, 4, 5, 6, 7)).astype(np.float32)
    on_gpu = torch.from_numpy(arr).cuda()
    for i in ALL:
        assert np.array_equal(rotate_torch(on_gpu, i).cpu().numpy(), rotate_numpy(arr, i))


def test_bad_rotation_index_is_refused():
    arr = np.zeros((1, 2, 2, 2))
    for bad in (-1, ROTATION_COUNT):
        with pytest.raises(ValueError, match="rotation index"):
            rotate_numpy(arr, bad)
        with pytest.raises(ValueError, match="rotation index"):
            rotate_torch(torch.from_numpy(arr), bad)


def test_random_corner_covers_both_ends_and_never_leaves_the_box():
    rng = np.random.default_rng(4)
    box, crop = 12, 8
    corners = np.array([random_corner(rng, box, crop) for _ in range(400)])
    for axis in range(3):
        assert set(corners[:, axis].tolist()) == set(range(box - crop + 1))
    assert random_corner(rng, box, box) == (0, 0, 0)
    with pytest.raises(ValueError, match="crop"):
        random_corner(rng, box, box + 1)


def test_crop_numpy_cuts_the_cube_at_the_corner_over_the_last_three_axes():
    arr = np.arange(2 * 6 * 7 * 8).reshape(2, 6, 7, 8)
    cut = crop_numpy(arr, (1, 2, 3), 4)
    assert cut.shape == (2, 4, 4, 4)
    for c, x, y, z in itertools.product(range(2), range(4), range(4), range(4)):
        assert cut[c, x, y, z] == arr[c, 1 + x, 2 + y, 3 + z]
