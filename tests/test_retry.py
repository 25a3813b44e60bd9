"""Transient failures are measured again, not fatal; the allocation's end is respected."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from tuneup.errors import ExitCode
from tuneup.hardware.types import MachineInfo
from tuneup.preset.load import load_preset
from tuneup.probe.events import ErrorEvent, Event
from tuneup.probe.outcome import EXITED, transient
from tuneup.probe.types import Candidate, ProbeResult, Status
from tuneup.trainers.adapters import load_trainer
from tuneup.tuning.results.journal import ResultsDir
from tuneup.tuning.search.search_records import BaselineFailed
from tuneup.tuning.session.control import OutOfTime
from tuneup.tuning.session.probe_session import ProbeSession
from tuneup.tuning.session.session_terms import TimeTerms
from tuneup.tuning.session.stage_plans import stage_plans

MACHINE = MachineInfo(cuda=False, gpu_count=0, cpus_usable=2)
KILLED = (Status.CRASH, "worker killed by SIGKILL", True)
OOM = (Status.OOM, "out of memory: 2 GiB", False)


class Scripted:
    """A backend that fails as scripted (per stage, in order), then runs ok at 100 samples/s."""

    def __init__(self, failures: dict[str, list[tuple[Status, str, bool]]]) -> None:
        self.failures = {k: list(v) for k, v in failures.items()}
        self.calls: list[str] = []
        self.trials: list[float | None] = []  # each probe's trial length, where shortened

    def __call__(self, stage: str, candidate: Candidate, values: dict[str, Any]) -> ProbeResult:
        self.calls.append(stage)
        self.trials.append(candidate.trial_s)
        variant = dict(candidate.values)
        if self.failures.get(stage):
            status, reason, is_transient = self.failures[stage].pop(0)
            return ProbeResult(
                stage, variant, dict(values), status, reason, wall_s=2.0, transient=is_transient
            )
        return ProbeResult(
            stage, variant, dict(values), Status.OK, full_sps=100.0,
            full_sps_trials=[100.0, 100.0, 100.0], losses=[1.0, 0.9], wall_s=2.0,
        )  # fmt: skip


def session(tmp_path: Path, backend: Scripted, **kwargs: Any) -> ProbeSession:
    preset = load_preset("cpu-smoke")
    base = dict(preset.train)
    plans = stage_plans(("amp",), MACHINE, base, preset)
    run = ProbeSession(
        preset=preset,
        adapter=load_trainer("sim"),
        backend=backend,
        results=ResultsDir(tmp_path),
        machine=MACHINE,
        base_values=base,
        plans=plans,
        **kwargs,
    )
    run.start(resume=False)
    return run


def statuses(tmp_path: Path) -> list[tuple[str, str, bool]]:
    return [(r.stage, r.status.value, r.retried) for r in ResultsDir(tmp_path).results()]


def test_a_baseline_killed_once_is_run_again_and_the_session_goes_on(tmp_path: Path) -> None:
    backend = Scripted({"baseline": [KILLED]})
    session(tmp_path, backend).run()
    assert statuses(tmp_path)[:3] == [
        ("baseline", "crash", True),
        ("baseline", "ok", False),
        ("baseline", "ok", False),
    ]
    assert (tmp_path / "summary.json").exists()


def test_a_baseline_failing_differently_is_tried_again_and_the_same_way_twice_is_fatal(
    tmp_path: Path,
) -> None:
    with pytest.raises(BaselineFailed, match="out of memory") as failed:
        session(tmp_path, Scripted({"baseline": [KILLED, OOM, OOM]})).run()
    assert failed.value.exit_code == ExitCode.USAGE  # the config does not fit: bad input
    assert [s for _stage, s, _again in statuses(tmp_path)] == ["crash", "oom", "oom"]

    other = tmp_path / "killed"
    with pytest.raises(BaselineFailed, match="killed by SIGKILL") as killed:
        session(other, Scripted({"baseline": [KILLED, KILLED]})).run()
    assert killed.value.exit_code == ExitCode.PROBE_FAILED  # nothing says the input is bad
    assert "tuneup doctor" in str(killed.value)


def test_a_variant_is_run_again_only_after_a_transient_failure(tmp_path: Path) -> None:
    backend = Scripted({"amp": [KILLED]})
    session(tmp_path, backend).run()
    amp = [x for x in statuses(tmp_path) if x[0] == "amp"]
    assert amp[:2] == [("amp", "crash", True), ("amp", "ok", False)]

    plain = tmp_path / "plain"
    deterministic = Scripted({"amp": [(Status.CRASH, "RuntimeError: bad knob", False)]})
    session(plain, deterministic).run()
    first_amp = next(x for x in statuses(plain) if x[0] == "amp")
    assert first_amp == ("amp", "crash", False)  # journaled as it is, not repeated


def test_a_resume_skips_the_failed_attempt_and_reuses_its_retry(tmp_path: Path) -> None:
    session(tmp_path, Scripted({"baseline": [KILLED]})).run()
    journaled = len(ResultsDir(tmp_path).results())
    (tmp_path / "summary.json").unlink()

    again = Scripted({})
    run = ProbeSession(
        preset=load_preset("cpu-smoke"),
        adapter=load_trainer("sim"),
        backend=again,
        results=ResultsDir(tmp_path),
        machine=MACHINE,
        base_values=dict(load_preset("cpu-smoke").train),
        plans=stage_plans(("amp",), MACHINE, dict(load_preset("cpu-smoke").train)),
    )
    run.start(resume=True)
    run.run()
    assert again.calls.count("baseline") == 0 and "amp" not in again.calls[:1]
    assert len(ResultsDir(tmp_path).results()) >= journaled


def test_no_probe_starts_that_the_time_left_cannot_hold(tmp_path: Path) -> None:
    left = {"s": 10_000.0}
    backend = Scripted({})
    run = session(tmp_path, backend, timing=TimeTerms(allocation_left=lambda: left["s"]))
    values = dict(run.base_values)
    run.measure("baseline", Candidate("baseline", {}), values)  # 2 s, measured

    left["s"] = 17.6  # 1.25 x 2 s + the 15 s margin = 17.5: it fits
    run.measure("amp", Candidate("bf16", {"amp_mode": "bf16"}), {**values, "amp_mode": "bf16"})
    assert backend.trials[-1] is None  # as planned
    left["s"] = 17.4  # a shorter trial meets it: the probe runs with it, not below the floor
    run.measure("amp", Candidate("fp16", {"amp_mode": "fp16"}), {**values, "amp_mode": "fp16"})
    floor = run.preset.budget.trial_s / 4
    assert (
        backend.trials[-1] is not None and floor <= backend.trials[-1] < run.preset.budget.trial_s
    )
    left["s"] = 16.0  # not even the floor's trials fit
    with pytest.raises(OutOfTime, match="16 s left in the allocation"):
        run.measure("amp", Candidate("fp32", {"amp_mode": "none"}), {**values, "amp_mode": "none"})
    assert backend.calls == ["baseline", "amp", "amp"]


@pytest.mark.parametrize(
    ("events", "returncode", "expected"),
    [
        ([], -9, True),  # killed from outside before it could say anything
        ([], -11, False),  # its own segfault: it will crash again
        ([ErrorEvent(kind="cuda", message="illegal address")], -6, False),
        ([ErrorEvent(kind="nccl", message="Watchdog: collective Timeout")], 1, True),
        ([ErrorEvent(kind="oom", message="2 GiB")], 3, False),
        ([], 1, False),
    ],
)  # fmt: skip
def test_which_failures_are_transient(events: list[Event], returncode: int,
                                      expected: bool) -> None:  # fmt: skip
    assert transient(events, returncode, EXITED, []) is expected
