"""Shared memory for DataLoader workers: is /dev/shm big enough for the batches in flight?

Worker processes hand each batch to the trainer through /dev/shm. Containers
often get 64 MB of it, and one batch of the tutorial's U-Net (64 crops of
4+5 channels of 64^3 float32) is about 600 MB: the workers die with a bus error
and the baseline with them. Checked before the first probe.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from typing import Any

SHM_PATH = "/dev/shm"
DEFAULT_PREFETCH = 2  # torch's DataLoader prefetch_factor


def shm_free_bytes(path: str = SHM_PATH, statvfs: Callable[[str], Any] = os.statvfs) -> int | None:
    """Bytes free in the shared-memory filesystem; None where there is none to read."""
    try:
        stat = statvfs(path)
    except OSError:
        return None
    return int(stat.f_bavail) * int(stat.f_frsize)


def batches_in_flight(workers: int, prefetch_factor: int | None) -> int:
    """Batches DataLoader workers may hold in shared memory at once (none without workers)."""
    if workers <= 0:
        return 0
    return workers * (prefetch_factor or DEFAULT_PREFETCH)


def shm_shortfall(
    free_bytes: int | None, batch_bytes: int, workers: int, prefetch_factor: int | None
) -> str | None:
    """The problem and its fix in one line ("problem: fix") when the batches do not fit; else None.

    DALI and the gpu loader run no DataLoader workers, so they need no shared memory.
    """
    in_flight = batches_in_flight(workers, prefetch_factor)
    if free_bytes is None or in_flight == 0:
        return None
    needed = in_flight * batch_bytes
    if needed <= free_bytes:
        return None
    return (
        f"{SHM_PATH} has {_size(free_bytes)} free but {workers} loader workers hold up to "
        f"{in_flight} batches of {_size(batch_bytes)} ({_size(needed)}): run the container "
        f"with --shm-size={_suggest(needed)}, or set num_data_workers=0 (no workers) "
        f"or data_loader_config=dali-lowmem"
    )


def _size(n: int) -> str:
    for unit, scale in (("GB", 1e9), ("MB", 1e6)):
        if n >= scale:
            return f"{n / scale:.1f} {unit}"
    return f"{n / 1e3:.0f} kB"


def _suggest(needed: int) -> str:
    gigabytes = 1
    while gigabytes * 1e9 < needed * 1.5:
        gigabytes *= 2
    return f"{gigabytes}g"
