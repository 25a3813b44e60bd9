"""Pause, skip and stop a running session from another thread, as the app does."""

from __future__ import annotations

import threading
import time
from pathlib import Path

import pytest
from tuneup_plugins.sim import sim_backend, sim_stage_plans

from tuneup.hardware.types import MachineInfo
from tuneup.preset.load import load_preset
from tuneup.probe.types import ProbeResult, Status
from tuneup.trainers.adapters import load_trainer
from tuneup.tuning.results.journal import ResultsDir
from tuneup.tuning.results.verdicts import headline, stage_summary, unmeasured
from tuneup.tuning.session.control import SessionInterrupted, SilentReporter
from tuneup.tuning.session.probe_session import ProbeSession


class Hook(SilentReporter):
    """Calls `action` once, right after the first finished probe of `stage`."""

    def __init__(self, stage: str, action) -> None:
        self.stage, self.action, self.done = stage, action, False

    def probe_done(self, result: ProbeResult, reused: bool) -> None:
        if result.stage == self.stage and not self.done:
            self.done = True
            self.action()


def _session(tmp_path: Path, reporter) -> ProbeSession:
    machine = MachineInfo(cuda=True, gpu_count=1, cpus_usable=32)
    preset = load_preset("cpu-smoke")
    base = {**preset.train, "device": "cuda"}
    return ProbeSession(
        preset=preset,
        adapter=load_trainer("sim"),
        backend=sim_backend(1),
        results=ResultsDir(tmp_path),
        machine=machine,
        base_values=base,
        plans=sim_stage_plans(machine),
        reporter=reporter,
    )


def test_skip_drops_the_rest_of_the_current_stage(tmp_path: Path) -> None:
    reporter = Hook("workers", lambda: session.control.skip_stage())
    session = _session(tmp_path, reporter)
    session.start(resume=False)
    outcome = session.run()
    workers = [p for p in outcome.probes if p.stage == "workers"]
    assert workers[0].status is Status.OK
    assert len(workers) > 1 and all(p.status is Status.SKIPPED for p in workers[1:])
    assert any(p.stage == "amp" and p.ok for p in outcome.probes), "later stages still run"


class SkipAfter(SilentReporter):
    """Skips the rest of `stage` after its `after`-th finished probe, as the app's `s` does."""

    def __init__(self, stage: str, after: int) -> None:
        self.stage, self.after, self.seen = stage, after, 0
        self.session: ProbeSession | None = None

    def probe_done(self, result: ProbeResult, reused: bool) -> None:
        if result.stage == self.stage and self.session is not None:
            self.seen += 1
            if self.seen == self.after:
                self.session.control.skip_stage()


@pytest.mark.parametrize("after", [1, 2, 3])
def test_a_skipped_stage_reads_as_skipped_not_failed(tmp_path: Path, after: int) -> None:
    reporter = SkipAfter("workers", after)
    session = reporter.session = _session(tmp_path, reporter)
    session.start(resume=False)
    outcome = session.run()
    line = next(x for x in stage_summary(outcome) if x.startswith("workers"))
    assert line == f"workers: skipped by the user after {after} probe(s)"
    assert "workers" not in [u["stage"] for u in unmeasured(outcome)]
    assert "failed" not in headline(outcome) and "workers" not in headline(outcome)
    summary = ResultsDir(tmp_path).summary()
    (workers,) = [s for s in summary.stages if s.stage == "workers"]
    assert workers.failed == () and workers.winner is None


def test_pause_holds_the_ladder_until_resumed(tmp_path: Path) -> None:
    reporter = Hook("baseline", lambda: session.control.pause())
    session = _session(tmp_path, reporter)
    session.start(resume=False)
    worker = threading.Thread(target=session.run)
    worker.start()
    time.sleep(0.5)
    held = len(ResultsDir(tmp_path).results())
    time.sleep(0.3)
    assert session.control.paused and len(ResultsDir(tmp_path).results()) == held
    session.control.resume()
    worker.join(timeout=30)
    assert not worker.is_alive() and len(ResultsDir(tmp_path).results()) > held


def test_stop_ends_the_session_with_the_journal_intact(tmp_path: Path) -> None:
    reporter = Hook("amp", lambda: session.control.stop())
    session = _session(tmp_path, reporter)
    session.start(resume=False)
    with pytest.raises(SessionInterrupted):
        session.run()
    stages = [r.stage for r in ResultsDir(tmp_path).results()]
    assert "amp" in stages and "confirm" not in stages
