"""The U-Net backend's process policy: the ladder's probes share one warm serving worker, a
fresh one starts only where a knob demands it; what each probe measures (its plan), what
IO figure it carries, and what it is told about stopping early."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from tests.test_resident import ServingLauncher
from tuneup.probe.types import Candidate, ProbeBudget, ProbeResult, Status
from tuneup.trainers.backends import WorkerBackend

BASE: dict[str, Any] = {"device": "cpu", "global_batch_size": 8, "num_data_workers": 1}


@pytest.fixture
def backend(tmp_path: Path) -> WorkerBackend:
    made = WorkerBackend(tmp_path, ProbeBudget(limit_s=20.0), seed=0)
    made.runner.launcher = ServingLauncher()  # type: ignore[assignment]
    yield made
    made.close()


def probe(
    backend: WorkerBackend, stage: str, label: str = "x", pair: int | None = None, **values: Any
) -> ProbeResult:
    result = backend(stage, Candidate(label, values, pair=pair), {**BASE, **values})
    assert result.status is Status.OK, result.reason
    return result


def test_the_whole_ladder_shares_one_warm_worker_baseline_and_confirmation_too(backend):
    runs = [
        probe(backend, "baseline"),
        probe(backend, "baseline"),
        probe(backend, "amp", amp_mode="bf16"),
        probe(backend, "amp", "incumbent"),
        probe(backend, "confirm", "baseline", pair=7),
        probe(backend, "confirm", "recommended", pair=7, amp_mode="bf16"),
    ]
    # the CUDA context, cuDNN's plans and compiled kernels stay warm the ladder long
    assert [r.served_before for r in runs] == [0, 1, 2, 3, 4, 5]


def test_asking_for_fresh_processes_gives_every_probe_its_own(tmp_path):
    backend = WorkerBackend(tmp_path, ProbeBudget(limit_s=20.0), seed=0, fresh_processes=True)
    backend.runner.launcher = ServingLauncher()  # type: ignore[assignment]
    runs = [probe(backend, "amp"), probe(backend, "amp", amp_mode="bf16"), probe(backend, "amp")]
    assert [r.served_before for r in runs] == [0, 0, 0]
    assert backend.runner.launcher.served == []  # type: ignore[attr-defined]


def test_a_knob_read_once_per_process_never_shares_one(backend):
    first = probe(backend, "amp")
    other = probe(backend, "data", device="auto")
    assert (first.served_before, other.served_before) == (0, 0)


def test_a_data_path_measured_before_carries_its_io_figure(backend, tmp_path):
    first = probe(backend, "baseline")
    again = probe(backend, "baseline")
    same_path = probe(backend, "amp", "bf16", amp_mode="bf16")
    new_path = probe(backend, "workers", "2 workers", num_data_workers=2)

    assert first.io_sps == 300.0 and first.io_from == ""
    assert again.io_from == ""  # the baseline measures its IO again: its noise
    assert same_path.io_sps == 300.0 and same_path.io_from == "carried from baseline: x"
    assert new_path.io_from == ""
    phases = [json.loads(p.read_text())["plan"]["phases"] for p in sorted(tmp_path.glob("*.json"))]
    assert ["io" in p for p in phases] == [True, True, False, True]


def test_each_probe_measures_what_its_plan_asks_and_a_bar_reaches_the_worker(backend, tmp_path):
    asked = Candidate(
        "compile", {"jit": "compile"}, stop_below_sps=123.0, judged="synthetic", whole=False
    )
    backend("jit", asked, BASE)
    backend("jit", Candidate("script", {"jit": "script"}), BASE)
    backend("workers", Candidate("4", {"num_data_workers": 4}, judged="io", whole=False), BASE)

    plans = [json.loads(p.read_text())["plan"] for p in sorted(tmp_path.glob("*.json"))]
    assert (plans[0]["phases"], plans[0]["judged"]) == (["synthetic"], "synthetic")
    assert plans[0]["stop_below_sps"] == 123.0 and plans[0]["loss_steps"] > 0
    assert plans[1]["phases"] == ["full", "io", "synthetic"]
    assert plans[1]["stop_below_sps"] is None
    assert (plans[2]["phases"], plans[2]["loss_steps"]) == (["io"], 0)  # the loader alone


def test_cudnn_benchmarking_on_and_off_never_share_a_process(backend):
    runs = [
        probe(backend, "jit", "compile", jit="compile"),
        probe(backend, "jit", "script", jit="script"),
        probe(backend, "jit", "incumbent"),
        probe(backend, "cudnn", "off", cudnn_benchmark=False),
        probe(backend, "cudnn", "incumbent"),
    ]
    # cuDNN's algorithm cache outlives a probe and is read whatever the flag says;
    # compiled and scripted graphs are dropped between probes (tuneup.worker.serve).
    assert [r.served_before for r in runs] == [0, 1, 2, 0, 0]
