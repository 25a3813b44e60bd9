"""GPU telemetry joined to probes: each probe's GPU fields come from its FULL phase's window."""

from __future__ import annotations

import dataclasses
import json
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from tuneup.hardware.types import GpuDevice, GpuProcess, GpuSample, MachineInfo
from tuneup.preset.load import parse_preset
from tuneup.probe.events import Event, parse_events
from tuneup.probe.telemetry import THROTTLED_NOTE, ProbeTelemetry, full_window
from tuneup.probe.types import Candidate, ProbeBudget, ProbeResult, Status
from tuneup.telemetry.sampler import Sampler
from tuneup.trainers.adapters import load_trainer
from tuneup.trainers.backends import WorkerBackend
from tuneup.tuning.results.journal import ResultsDir
from tuneup.tuning.session.engine import gpu_sampler
from tuneup.tuning.session.probe_session import ProbeSession
from tuneup.tuning.session.session_terms import SearchTerms


class TraceBackend:
    """Hands out pre-written rounds of readings, one per sample() call."""

    name = "trace"

    def __init__(self, rounds: list[list[GpuSample]], ok: bool = True) -> None:
        self.rounds = list(rounds)
        self.ok = ok

    def available(self) -> tuple[bool, str]:
        return (True, "") if self.ok else (False, "NVML: driver not loaded")

    def devices(self) -> list[GpuDevice]:
        return [GpuDevice(index=i) for i in range(4)] if self.ok else []

    def sample(self) -> list[GpuSample]:
        return self.rounds.pop(0) if self.rounds else []

    def close(self) -> None:
        pass


def trial(phase: str, index: int, end: float, seconds: float, sps: float) -> dict[str, Any]:
    return {
        "event": "trial",
        "phase": phase,
        "index": index,
        "seconds": seconds,
        "samples_per_s": sps,
        "batches": 10,
        "time": end,
    }


# A probe's events: SYNTHETIC trials end by t=110; FULL's five 2 s trials at 50 samples/s
# cover 120..130 and process 500 samples.
RECORDS = [
    {"event": "start", "time": 100.0, "world_size": 1, "pid": 777},
    trial("synthetic", 0, 105.0, 5.0, 200.0),
    trial("synthetic", 1, 110.0, 5.0, 200.0),
    *[trial("full", i, 122.0 + 2 * i, 2.0, 50.0) for i in range(5)],
    {"event": "result", "time": 131.0, "full_sps": 50.0},
]
EVENTS = parse_events(json.dumps(r) for r in RECORDS)  # as the runner reads them


def node_rounds(
    busy_gpu: int = 2,
    energy: bool = True,
    memory: bool = True,
    throttle: tuple[str, ...] = ("idle",),
) -> list[list[GpuSample]]:
    """Readings every second from t=100 to 135 of 4 GPUs; `busy_gpu` runs the probe.

    During SYNTHETIC (<= 110 s) the busy GPU reads 100 % at 400 W; during
    FULL (120..130 s) 80 % at 300 W with 6 GB used; idle GPUs read 0 % at 50 W.
    """
    rounds = []
    for step in range(36):
        t = 100.0 + step
        row = []
        for gpu in range(4):
            busy = gpu == busy_gpu
            full = busy and 120.0 <= t <= 130.0
            util, watts = (80.0, 300.0) if full else ((100.0, 400.0) if busy else (0.0, 50.0))
            row.append(
                GpuSample(
                    index=gpu,
                    time=t,
                    util_gpu_pct=util,
                    power_w=watts,
                    # A counter that agrees with the power: 300 W is 300,000 mJ a second.
                    energy_mj=(1e6 + 300_000.0 * (t - 120.0)) if energy and full else None,
                    memory_used_mb=(6000.0 if full else 500.0) if memory else None,
                    sm_clock_mhz=1410.0,
                    throttle_reasons=throttle if full else ("idle",),
                    processes=(GpuProcess(pid=777),) if busy else (),
                )
            )
        rounds.append(row)
    return rounds


def recorded_sampler(rounds: list[list[GpuSample]]) -> Sampler:
    sampler = Sampler(TraceBackend(rounds))
    for _ in range(len(rounds)):
        sampler.sample_now()
    return sampler


def ok_result(**fields: Any) -> ProbeResult:
    return ProbeResult("baseline", {}, {}, Status.OK, full_sps=50.0, **fields)


def joined(sampler: Sampler, events: list[Event], result: ProbeResult) -> ProbeResult:
    telemetry = ProbeTelemetry(sampler)
    telemetry.reset()
    for event in events:
        telemetry.on_event(event)
    return telemetry.apply(result)


def test_the_full_window_runs_from_the_first_trials_start_to_the_last_trials_end():
    start, end, processed = full_window(EVENTS)
    assert (start, end) == (120.0, 130.0)
    assert processed == pytest.approx(5 * 2.0 * 50.0)
    # a probe of one phase alone (a stage's screen) is joined over that phase's trials
    assert full_window(EVENTS[:3])[:2] == (100.0, 110.0)
    assert full_window(EVENTS[:1]) is None  # no trial: no window


def test_a_probe_gets_the_figures_of_the_gpu_it_ran_on_during_full():
    result = joined(recorded_sampler(node_rounds(busy_gpu=2)), EVENTS, ok_result())
    assert result.gpu_util_mean == pytest.approx(80.0)  # not SYNTHETIC's 100 %, not idle GPUs
    assert result.power_mean_w == pytest.approx(300.0)
    # 300 W for the 10 s of FULL over 500 samples.
    assert result.energy_j_per_sample == pytest.approx(6.0)
    assert result.gpu_mem_used_mb == 6000.0
    assert result.mem_peak_mb is None  # the worker's allocator peak is another measure
    assert result.throttled is False
    assert result.reason == ""


def test_without_the_energy_counter_power_gives_the_same_energy():
    result = joined(recorded_sampler(node_rounds(energy=False)), EVENTS, ok_result())
    assert result.energy_j_per_sample == pytest.approx(6.0)


def test_the_workers_allocator_peak_is_kept_apart_from_the_devices_memory():
    result = joined(recorded_sampler(node_rounds()), EVENTS, ok_result(mem_peak_mb=4321.0))
    assert (result.mem_peak_mb, result.gpu_mem_used_mb) == (4321.0, 6000.0)
    result = joined(
        recorded_sampler(node_rounds(memory=False)), EVENTS, ok_result(mem_peak_mb=4321.0)
    )
    assert (result.mem_peak_mb, result.gpu_mem_used_mb) == (4321.0, None)
    assert result.gpu_util_mean == pytest.approx(80.0)


def test_a_throttled_probe_is_flagged_as_noisy():
    result = joined(recorded_sampler(node_rounds(throttle=("hw_slowdown",))), EVENTS, ok_result())
    assert result.throttled is True
    assert THROTTLED_NOTE in result.reason
    assert result.status is Status.OK  # noisy, not failed


def test_a_ddp_probe_counts_as_many_gpus_as_its_world_size():
    events = [dataclasses.replace(EVENTS[0], world_size=4, pid=None), *EVENTS[1:]]
    result = joined(recorded_sampler(node_rounds(busy_gpu=0)), events, ok_result())
    # One GPU at 80 % and three idle, averaged; power and energy add up over all four.
    assert result.gpu_util_mean == pytest.approx(20.0)
    assert result.power_mean_w == pytest.approx(450.0)


def test_a_probe_of_synthetic_alone_gets_the_gpu_figures_of_its_synthetic_trials():
    synthetic = joined(recorded_sampler(node_rounds()), EVENTS[:3], ok_result())
    assert synthetic.gpu_util_mean == pytest.approx(100.0)  # SYNTHETIC's 100 %
    assert synthetic.power_mean_w == pytest.approx(400.0)


def test_no_trials_or_no_readings_leave_the_fields_empty():
    no_full = joined(recorded_sampler(node_rounds()), EVENTS[:1], ok_result())
    later = [dataclasses.replace(e, time=e.time + 1000.0) for e in EVENTS]
    outside = joined(recorded_sampler(node_rounds()), later, ok_result())
    for result in (no_full, outside):
        assert result.gpu_util_mean is None
        assert result.power_mean_w is None
        assert result.energy_j_per_sample is None
        assert result.throttled is None


def test_a_failed_probe_gets_no_gpu_figures():
    failed = ProbeResult("amp", {}, {}, Status.OOM, reason="out of memory: CUDA")
    failed = joined(recorded_sampler(node_rounds()), EVENTS, failed)
    assert failed.gpu_util_mean is None
    assert failed.reason == "out of memory: CUDA"


def test_reset_forgets_the_previous_probes_trials():
    telemetry = ProbeTelemetry(recorded_sampler(node_rounds()))
    for event in EVENTS:
        telemetry.on_event(event)
    telemetry.reset()  # the next probe crashes before any trial
    result = telemetry.apply(ok_result())
    assert result.gpu_util_mean is None


def test_the_worker_backend_fills_gpu_fields_from_its_sampler(tmp_path: Path):
    script = tmp_path / "worker.py"
    lines = "\n".join(f"print({json.dumps(json.dumps(e))}, flush=True)" for e in RECORDS)
    script.write_text(lines + "\n", encoding="utf-8")

    @dataclass
    class ScriptLauncher:
        def command(self, spec_path: Path) -> list[str]:
            return [sys.executable, str(script), str(spec_path)]

        def env(self, base: dict[str, str]) -> dict[str, str]:
            return base

    seen: list[Event] = []
    backend = WorkerBackend(
        tmp_path / "probes",
        ProbeBudget(limit_s=20),
        0,
        on_event=seen.append,
        sampler=recorded_sampler(node_rounds()),
    )
    backend.runner.launcher = ScriptLauncher()
    result = backend("baseline", Candidate("baseline", {}), {"global_batch_size": 4})
    assert result.status is Status.OK, result.reason
    assert result.gpu_util_mean == pytest.approx(80.0)
    assert result.energy_j_per_sample == pytest.approx(6.0)
    assert len(seen) == len(EVENTS)  # the reporter still hears every event


def test_only_the_unet_trainer_on_a_machine_with_gpus_gets_a_sampler():
    assert gpu_sampler(load_trainer("sim"), TraceBackend([])) is None
    assert gpu_sampler(load_trainer("unet"), None) is None
    assert gpu_sampler(load_trainer("unet"), TraceBackend([], ok=False)) is None
    sampler = gpu_sampler(load_trainer("unet"), TraceBackend([]))
    assert isinstance(sampler, Sampler)
    # dense enough for a 1.5 s FULL phase, and holding a long probe's window until it ends
    assert sampler.interval_s <= 0.25 and sampler.capacity * sampler.interval_s >= 15 * 60


def test_the_session_samples_while_probes_run_and_stops_after(tmp_path: Path):
    sampler = Sampler(TraceBackend([]), interval_s=0.1)
    running_during_probes: list[bool] = []

    def backend(stage: str, candidate: Candidate, values: dict[str, Any]) -> ProbeResult:
        running_during_probes.append(sampler.running)
        return ProbeResult(stage, {}, dict(values), Status.OK, full_sps=10.0)

    preset = parse_preset(
        {"name": "tiny", "train": {"global_batch_size": 4}, "probe": {"stages": []}}, "test"
    )
    session = ProbeSession(
        preset=preset,
        adapter=load_trainer("unet"),
        backend=backend,
        results=ResultsDir(tmp_path / "run"),
        machine=MachineInfo(),
        base_values={"global_batch_size": 4},
        plans=[],
        terms=SearchTerms(confirm_pairs=0),
        sampler=sampler,
    )
    session.start(resume=False)
    session.run()
    assert running_during_probes and all(running_during_probes)
    assert not sampler.running
