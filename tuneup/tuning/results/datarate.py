"""Loader verdicts in bytes: what the data path delivers against what the model consumes.

Samples/s hide the crop size; GB/s compare directly with disk, PCIe and
memory bandwidth, so a data-bound verdict says which of them to look at.
Pure arithmetic: no torch, no h5py.
"""

from __future__ import annotations

from tuneup.config import sample_bytes


def io_bytes_per_s(io_sps: float, crop: int) -> float:
    """Bytes per second a loader moves when it delivers ``io_sps`` samples of side ``crop``."""
    return io_sps * sample_bytes(crop)


def data_rate_sentence(io_sps: float | None, synthetic_sps: float | None, crop: int) -> str | None:
    """ "data path delivers X GB/s, the model needs Y GB/s", or None without both rates."""
    if not io_sps or not synthetic_sps or io_sps <= 0 or synthetic_sps <= 0:
        return None
    have = io_bytes_per_s(io_sps, crop)
    need = io_bytes_per_s(synthetic_sps, crop)
    return f"data path delivers {rate_text(have)}, the model needs {rate_text(need)}"


def rate_text(bytes_per_s: float) -> str:
    """GB/s with two decimals from 1 GB/s up, MB/s below (a CPU smoke run moves little)."""
    if bytes_per_s >= 1e9:
        return f"{bytes_per_s / 1e9:.2f} GB/s"
    return f"{bytes_per_s / 1e6:.1f} MB/s"
