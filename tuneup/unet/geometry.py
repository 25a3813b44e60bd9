"""Crops and the tutorial's 24 symmetry transforms of a cube, for numpy arrays and tensors.

The table is the tutorial's augmentation (`RandomRotator` in the NERSC
tutorial's utils/data_loader.py): 16 rotations and 8 mirror images of the
cube, which its README calls "random rotations and reflections" (not the 24
proper rotations). Its transforms 1..23 keep their numbers here and its 24,
the identity, is index 0.

A transform is stored as an axis permutation plus per-axis flips. With
spatial axes indexed from the cube's centre, transform ``index`` sends the
voxel at position ``x`` of the input to position ``rotation_matrix(index) @ x``
of the output.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import NamedTuple, TypeVar

import numpy as np
import torch

SPATIAL_DIMS = 3
"""Rotations act on the last three axes; leading axes (channels, batch) ride along."""

Corner = tuple[int, int, int]


class _Rotation(NamedTuple):
    """Output spatial axis ``k`` is input axis ``perm[k]``, reversed when ``flips[k]``."""

    perm: tuple[int, int, int]
    flips: tuple[bool, bool, bool]


def _signed_permutation_matrix(rot: _Rotation) -> np.ndarray:
    matrix = np.zeros((SPATIAL_DIMS, SPATIAL_DIMS), dtype=np.int64)
    for k, (axis, flip) in enumerate(zip(rot.perm, rot.flips, strict=True)):
        matrix[k, axis] = -1 if flip else 1
    return matrix


# The tutorial's table as (output axis k takes input axis perm[k], flipped when
# flips[k]), in its order: numpy's `x.transpose([0, 2, 1, 3])[:, ::-1, :, :]` is
# perm (1, 0, 2) with the first output axis flipped.
_T, _F = True, False
_TUTORIAL = (
    _Rotation((0, 1, 2), (_F, _F, _F)),  # 24: the identity
    _Rotation((0, 1, 2), (_T, _T, _F)),
    _Rotation((0, 1, 2), (_T, _F, _T)),
    _Rotation((0, 1, 2), (_F, _T, _T)),
    _Rotation((1, 0, 2), (_T, _F, _F)),
    _Rotation((1, 0, 2), (_T, _F, _T)),
    _Rotation((1, 0, 2), (_F, _T, _F)),
    _Rotation((1, 0, 2), (_F, _T, _T)),
    _Rotation((2, 1, 0), (_T, _F, _F)),
    _Rotation((2, 1, 0), (_T, _T, _F)),
    _Rotation((2, 1, 0), (_F, _F, _T)),
    _Rotation((2, 1, 0), (_F, _T, _T)),
    _Rotation((0, 2, 1), (_F, _T, _F)),
    _Rotation((0, 2, 1), (_T, _T, _F)),
    _Rotation((0, 2, 1), (_F, _F, _T)),
    _Rotation((0, 2, 1), (_T, _F, _T)),
    _Rotation((1, 2, 0), (_T, _T, _F)),
    _Rotation((1, 2, 0), (_F, _T, _T)),
    _Rotation((1, 2, 0), (_T, _F, _T)),
    _Rotation((1, 2, 0), (_T, _T, _T)),
    _Rotation((2, 0, 1), (_T, _T, _F)),
    _Rotation((2, 0, 1), (_T, _F, _T)),
    _Rotation((2, 0, 1), (_F, _T, _T)),
    _Rotation((2, 0, 1), (_T, _T, _T)),
)


_ROTATIONS = _TUTORIAL
ROTATION_COUNT = 24
assert len(_ROTATIONS) == ROTATION_COUNT


def _check_index(index: int) -> _Rotation:
    if not 0 <= index < ROTATION_COUNT:
        raise ValueError(f"rotation index {index} is outside 0..{ROTATION_COUNT - 1}")
    return _ROTATIONS[index]


def rotation_matrix(index: int) -> np.ndarray:
    """The 3x3 integer matrix of rotation ``index`` acting on centred voxel coordinates.

    Returns a fresh array, so callers may modify it.
    """
    return _signed_permutation_matrix(_check_index(index))


def rotate_numpy(arr: np.ndarray, index: int) -> np.ndarray:
    """Rotate the last three axes of ``arr`` (e.g. ``(C, X, Y, Z)``) by rotation ``index``.

    Returns a view (transpose and negative strides, no copy): cheap, but not
    contiguous; call ``np.ascontiguousarray`` before handing it to torch.
    """
    rot = _check_index(index)
    lead = arr.ndim - SPATIAL_DIMS
    if lead < 0:
        raise ValueError(f"need at least {SPATIAL_DIMS} dimensions, got shape {arr.shape}")
    out = np.transpose(arr, (*range(lead), *(lead + axis for axis in rot.perm)))
    flipped = tuple(lead + k for k, flip in enumerate(rot.flips) if flip)
    return np.flip(out, axis=flipped) if flipped else out


def rotate_torch(t: torch.Tensor, index: int) -> torch.Tensor:
    """Rotate the last three dims of ``t`` exactly as :func:`rotate_numpy` does.

    Works on any device, so a GPU-resident loader can rotate in place on the
    GPU. ``torch.flip`` copies, so the result is a new tensor unless the
    rotation has no flip, in which case it is a (non-contiguous) permuted
    view; call ``.contiguous()`` when layout matters.
    """
    rot = _check_index(index)
    lead = t.dim() - SPATIAL_DIMS
    if lead < 0:
        raise ValueError(f"need at least {SPATIAL_DIMS} dimensions, got shape {tuple(t.shape)}")
    out = t.permute(*range(lead), *(lead + axis for axis in rot.perm))
    flipped = [lead + k for k, flip in enumerate(rot.flips) if flip]
    return torch.flip(out, dims=flipped) if flipped else out


def random_corner(rng: np.random.Generator, box: int, crop: int) -> Corner:
    """A crop corner with each coordinate uniform over ``0..box - crop`` inclusive."""
    if not 1 <= crop <= box:
        raise ValueError(f"crop {crop} must be between 1 and the box size {box}")
    x, y, z = rng.integers(0, box - crop + 1, size=SPATIAL_DIMS)
    return int(x), int(y), int(z)


_Sliceable = TypeVar("_Sliceable")


def crop_numpy(arr: _Sliceable, corner: Sequence[int], crop: int) -> _Sliceable:
    """The cube of side ``crop`` at ``corner`` over the last three axes of ``arr``.

    Only basic slicing is used, so a numpy array gives a view and an
    ``h5py.Dataset`` reads just that hyperslab from disk into a new array.
    """
    x, y, z = corner
    return arr[..., x : x + crop, y : y + crop, z : z + crop]  # type: ignore[index]
