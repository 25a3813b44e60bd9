"""/dev/shm against the loader workers' batches: the line a user reads, and its source."""

from __future__ import annotations

from types import SimpleNamespace

from tuneup.cluster.shm import shm_free_bytes, shm_shortfall

MB, GB = 10**6, 10**9
TUTORIAL_BATCH = 64 * (4 + 5) * 64**3 * 4  # 64 crops of 4 + 5 channels of 64^3 float32


def test_a_docker_default_dev_shm_cannot_hold_the_tutorials_batches() -> None:
    problem = shm_shortfall(64 * MB, TUTORIAL_BATCH, workers=4, prefetch_factor=None)
    assert problem is not None
    what, _, fix = problem.partition(": ")
    assert what == (
        "/dev/shm has 64.0 MB free but 4 loader workers hold up to 8 batches of 604.0 MB (4.8 GB)"
    )
    assert "--shm-size=8g" in fix  # rounded up to a power of two with 50% headroom
    assert "num_data_workers=0" in fix and "data_loader_config=dali-lowmem" in fix


def test_enough_room_or_no_workers_is_no_problem() -> None:
    assert shm_shortfall(16 * GB, TUTORIAL_BATCH, workers=4, prefetch_factor=2) is None
    assert shm_shortfall(64 * MB, TUTORIAL_BATCH, workers=0, prefetch_factor=2) is None
    assert shm_shortfall(None, TUTORIAL_BATCH, workers=4, prefetch_factor=2) is None
    # a deeper prefetch queue holds more batches at once
    assert shm_shortfall(6 * GB, TUTORIAL_BATCH, workers=4, prefetch_factor=4) is not None


def test_free_bytes_come_from_statvfs_and_a_missing_dev_shm_is_none() -> None:
    stat = SimpleNamespace(f_bavail=1000, f_frsize=4096)
    assert shm_free_bytes(statvfs=lambda path: stat) == 4_096_000

    def missing(path: str) -> object:
        raise FileNotFoundError(path)

    assert shm_free_bytes("/dev/shm", statvfs=missing) is None
