"""/dev/shm and the loader workers: checked before any probe, said in one line with the fix."""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

import pytest

from tuneup.cluster.shm import batches_in_flight, shm_free_bytes, shm_shortfall
from tuneup.hardware.types import MachineInfo
from tuneup.trainers.adapters import load_trainer
from tuneup.tuning.session.preflight import loader_shm_problem

MB = 10**6
# The tutorial's run: 64 crops of 4 + 5 channels of 64^3 float32 per batch (~604 MB).
TUTORIAL = {
    "data_size": 64,
    "global_batch_size": 64,
    "data_loader_config": "lowmem",
    "num_data_workers": 4,
}


def test_a_container_sized_dev_shm_cannot_hold_the_tutorials_batches() -> None:
    problem = loader_shm_problem(TUTORIAL, 1, 64 * MB)
    assert problem is not None
    assert "64.0 MB free" in problem and "8 batches of 604.0 MB" in problem
    assert "--shm-size=8g" in problem and "num_data_workers" in problem


@pytest.mark.parametrize(
    "change",
    [
        {"num_data_workers": 0},  # no workers: nothing goes through /dev/shm
        {"data_loader_config": "dali-lowmem"},  # DALI reads into its own pinned buffers
        {"data_loader_config": "gpu"},
    ],
)
def test_loaders_without_workers_need_no_shared_memory(change: dict[str, Any]) -> None:
    assert loader_shm_problem({**TUTORIAL, **change}, 1, 64 * MB) is None


def test_enough_shared_memory_passes_and_ranks_share_the_node() -> None:
    assert loader_shm_problem(TUTORIAL, 1, 16 * 10**9) is None
    # four ranks on the node at 16 per rank: each batch is a quarter, the workers four times
    assert loader_shm_problem(TUTORIAL, 4, 16 * 10**9) is None
    assert loader_shm_problem(TUTORIAL, 4, 4 * 10**9) is not None
    assert loader_shm_problem(TUTORIAL, 1, None) is None  # no /dev/shm to read: not checked


def test_prefetch_factor_counts_the_batches_each_worker_holds() -> None:
    assert batches_in_flight(4, None) == 8 and batches_in_flight(4, 6) == 24
    assert batches_in_flight(0, 6) == 0
    assert shm_shortfall(10 * MB, 1 * MB, 4, 2) is None
    assert shm_shortfall(10 * MB, 1 * MB, 4, 4) is not None


def test_dev_shm_is_read_from_statvfs() -> None:
    fake = SimpleNamespace(f_bavail=16384, f_frsize=4096)
    assert shm_free_bytes("/dev/shm", statvfs=lambda path: fake) == 64 * 2**20

    def missing(path: str) -> Any:
        raise FileNotFoundError(path)

    assert shm_free_bytes("/nope", statvfs=missing) is None


def test_worker_counts_that_would_not_fit_are_not_tried_and_say_why() -> None:
    from tuneup.tuning.session.stage_plans import stage_plans

    base = {**TUTORIAL, "num_data_workers": 0}
    machine = MachineInfo(cpus_usable=16)
    (plan,) = stage_plans(("workers",), machine, base, shm_free=64 * MB)
    assert plan.skip_reason == "no candidate fits in /dev/shm"
    assert plan.not_tried and all("--shm-size" in line for line in plan.not_tried)
    (roomy,) = stage_plans(("workers",), machine, base, shm_free=64 * 10**9)
    assert roomy.candidates and not roomy.not_tried


def test_probe_refuses_a_baseline_whose_workers_cannot_fit(tmp_path, monkeypatch, capsys) -> None:
    import tuneup.cluster.shm
    from tuneup.cli import main

    monkeypatch.setattr(tuneup.cluster.shm, "shm_free_bytes", lambda *a, **k: 64 * MB)
    monkeypatch.setenv("TUNEUP_CACHE_DIR", str(tmp_path / "cache"))
    preset = tmp_path / "big.yaml"
    preset.write_text(
        "name: big\n"
        "train: {device: cpu, data_size: 64, global_batch_size: 64, base_batch_size: 64,\n"
        "        data_loader_config: lowmem, num_data_workers: 4,\n"
        "        train_path: /data/train.h5, val_path: /data/val.h5}\n"
        "probe: {stages: [tf32]}\n"
    )
    code = main(["probe", "--preset", str(preset), "--out", str(tmp_path / "run")])
    err = capsys.readouterr().err.strip().splitlines()
    assert code == 2
    assert len(err) >= 1 and "/dev/shm" in err[-1] and "--shm-size" in err[-1]
    assert not (tmp_path / "run" / "journal.jsonl").exists()  # nothing started


def test_only_the_unet_trainers_sessions_check_dev_shm(monkeypatch) -> None:
    import tuneup.cluster.shm
    from tuneup.tuning.session.stage_plans import shm_free_for

    monkeypatch.setattr(tuneup.cluster.shm, "shm_free_bytes", lambda *a, **k: 64 * MB)
    assert shm_free_for(load_trainer("unet")) == 64 * MB
    assert shm_free_for(load_trainer("sim")) is None
    assert shm_free_for(load_trainer("command")) is None
