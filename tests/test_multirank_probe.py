"""Probes of 2 CPU ranks under torchrun (gloo), through the backend a session uses.

Each probe starts torchrun and two ranks that import torch: several seconds
on a 2-core machine, so there are only two of them.
"""

from __future__ import annotations

import os
import time
from pathlib import Path
from typing import Any

import pytest

from tuneup.cluster.job import read_job_env
from tuneup.cluster.launch import LaunchPlan
from tuneup.cluster.proctree import running_with_argument
from tuneup.probe.events import Event
from tuneup.probe.types import Candidate, ProbeBudget, Status
from tuneup.trainers.backends import WorkerBackend

pytestmark = pytest.mark.slow

BUDGET = ProbeBudget(
    trial_s=0.01, min_trials=3, max_trials=3, warmup_cap_s=0.2, loss_steps=2, limit_s=120
)
# This machine as the job: no SLURM, no GPU, whatever the test runner's environment says.
LOCAL_JOB = read_job_env({}, gpu_count=0)


@pytest.fixture
def ranks_env(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("TUNEUP_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.setenv("OMP_NUM_THREADS", "1")  # two ranks share two cores
    monkeypatch.delenv("TUNEUP_WORKER_FAULT", raising=False)


def two_rank_backend(tmp_path: Path, events: list[Event]) -> WorkerBackend:
    return WorkerBackend(
        tmp_path / "probes",
        BUDGET,
        seed=0,
        on_event=events.append,
        launch=LaunchPlan(nproc=2),
        job=LOCAL_JOB,
    )


def test_a_two_rank_probe_reports_each_rank_and_the_slowest_sets_the_rate(
    tmp_path: Path, tiny_values: dict[str, Any], ranks_env: None
) -> None:
    events: list[Event] = []
    backend = two_rank_backend(tmp_path, events)

    result = backend("ddp", Candidate("2 ranks", {}), tiny_values)

    assert result.status is Status.OK, result.reason
    assert result.ranks == 2
    assert len(result.rank_sps) == 2 and all(rate > 0 for rate in result.rank_sps)
    assert result.full_sps is not None
    # The job moves both ranks' batches at the pace of the slower one.
    assert result.full_sps <= min(result.rank_sps) * 2 * 1.001
    assert all(0 <= rank < 2 for rank in result.stragglers)
    start = next(e for e in events if e.event == "start")
    assert start.world_size == 2
    trials = [e for e in events if e.event == "trial"]
    assert trials and all(len(t.rank_seconds) == 2 for t in trials)
    assert all(t.seconds == pytest.approx(max(t.rank_seconds)) for t in trials)


def test_a_rank_killed_mid_probe_is_named_and_no_process_of_the_probe_survives(
    tmp_path: Path, tiny_values: dict[str, Any], ranks_env: None, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("TUNEUP_WORKER_FAULT", "kill:rank=1")
    backend = two_rank_backend(tmp_path, [])

    result = backend("ddp", Candidate("2 ranks", {}), tiny_values)

    assert result.status is Status.CRASH
    assert result.reason.startswith("rank 1 killed by SIGKILL"), result.reason
    assert result.ranks == 2 and result.full_sps is None
    run = backend.runner.last_run
    assert run is not None
    # SIGKILL is delivered asynchronously: allow the kernel a moment to finish the job.
    deadline = time.monotonic() + 2.0
    while running_with_argument(str(run.spec_path)) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert running_with_argument(str(run.spec_path)) == [], "a rank outlived its probe"
    assert os.path.getsize(run.stderr_path) > 0  # torchrun's report is kept for the user
