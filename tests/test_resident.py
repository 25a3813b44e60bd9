"""Probes in a serving worker: shared while they end with a result, isolated after any failure.

Driven by tests/fake_serving_worker.py (no torch: a run costs an interpreter
start), whose spec config's "fake" key says what a probe does; the real
worker's side is in test_serve.py.
"""

from __future__ import annotations

import sys
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from tests.test_runner import alive, wait_dead
from tuneup.probe.events import Event, StartEvent
from tuneup.probe.plan import ProbeSpec, plan_probe
from tuneup.probe.runner import ProbeRunner
from tuneup.probe.types import ProbeBudget, ProbeResult, Status

FAKE_SERVING = Path(__file__).with_name("fake_serving_worker.py")
FAKE_WORKER = Path(__file__).with_name("fake_worker.py")


@dataclass
class ServingLauncher:
    """One-probe children run tests/fake_worker.py; serving ones fake_serving_worker.py."""

    served: list[list[str]] = field(default_factory=list)
    single: list[list[str]] = field(default_factory=list)

    def command(self, spec_path: Path) -> list[str]:
        argv = [sys.executable, str(FAKE_WORKER), "ok", str(spec_path)]
        self.single.append(argv)
        return argv

    def serve_command(self) -> list[str]:
        argv = [sys.executable, str(FAKE_SERVING)]
        self.served.append(argv)
        return argv

    def env(self, base: dict[str, str]) -> dict[str, str]:
        return {**base, "PYTHONUNBUFFERED": "1"}


class Starts:
    """An on_event handler that keeps every start event (the pid a probe ran in)."""

    def __init__(self) -> None:
        self.starts: list[StartEvent] = []

    def __call__(self, event: Event) -> None:
        if isinstance(event, StartEvent):
            self.starts.append(event)

    @property
    def pids(self) -> list[int | None]:
        return [e.pid for e in self.starts]


def spec(fake: str = "ok", limit_s: float = 20.0) -> ProbeSpec:
    return ProbeSpec(config={"fake": fake}, plan=plan_probe(ProbeBudget(limit_s=limit_s)))


@pytest.fixture
def served(tmp_path: Path) -> tuple[ProbeRunner, ServingLauncher, Starts]:
    launcher = ServingLauncher()
    starts = Starts()
    runner = ProbeRunner(launcher, tmp_path, on_event=starts, grace_s=1.0)
    yield runner, launcher, starts
    runner.close()


def run(runner: ProbeRunner, fake: str = "ok", key: str | None = "k", **kw: Any) -> ProbeResult:
    return runner.run("stage", {}, spec(fake, **kw), reuse=key)


def test_probes_of_one_key_share_one_process_counted_in_the_journal(served):
    runner, launcher, starts = served

    results = [run(runner) for _ in range(3)]

    assert [r.status for r in results] == [Status.OK] * 3
    assert len(set(starts.pids)) == 1 and len(launcher.served) == 1
    assert [r.served_before for r in results] == [0, 1, 2]


def test_another_key_starts_a_fresh_process_and_stops_the_old_one(served):
    runner, launcher, starts = served
    run(runner, key="cpu")

    result = run(runner, key="cuda")

    first, second = starts.pids
    assert first != second and result.served_before == 0
    assert wait_dead(first)
    assert len(launcher.served) == 2


def test_a_probe_of_its_own_never_runs_beside_a_serving_worker(served):
    runner, launcher, starts = served
    run(runner)
    serving_pid = starts.pids[0]

    alone = run(runner, key=None)

    assert alone.status is Status.OK and alone.served_before == 0
    assert not alive(serving_pid)
    assert len(launcher.single) == 1


@pytest.mark.parametrize(
    ("fake", "status", "words"),
    [
        ("oom", Status.OOM, "out of memory"),
        ("crash", Status.CRASH, "simulated crash"),
        ("selfkill", Status.CRASH, "SIGKILL"),
        ("exit0", Status.CRASH, "without a result"),
    ],
)
def test_a_failed_probe_is_recorded_and_the_next_starts_fresh(served, fake, status, words):
    runner, _, starts = served
    run(runner)
    run(runner)

    failed = run(runner, fake)
    after = run(runner)

    assert failed.status is status and words in failed.reason
    assert failed.served_before == 2
    assert after.status is Status.OK and after.served_before == 0
    assert starts.pids[3] != starts.pids[0]
    assert not alive(starts.pids[0])


def test_a_serving_worker_killed_by_a_signal_is_a_transient_failure(served):
    runner, _, _ = served
    run(runner)

    killed = run(runner, "selfkill")

    assert killed.transient


def test_a_hanging_served_probe_times_out_and_its_whole_group_goes(served):
    runner, _, starts = served
    run(runner)

    hung = run(runner, "hang", limit_s=1.0)

    assert hung.status is Status.TIMEOUT
    grandchild = starts.starts[-1].raw["grandchild_pid"]
    assert wait_dead(starts.pids[-1]) and wait_dead(grandchild)
    assert run(runner).served_before == 0


def test_interrupt_stops_a_served_probe_and_its_process(served):
    runner, _, starts = served
    run(runner)
    threading.Timer(0.5, runner.interrupt).start()

    began = time.monotonic()
    stopped = run(runner, "hang")

    assert stopped.status is Status.CRASH and "interrupted" in stopped.reason
    assert time.monotonic() - began < 5
    assert wait_dead(starts.pids[-1])


def test_each_served_probe_keeps_its_own_stderr_log(served, tmp_path):
    runner, _, starts = served
    run(runner)
    run(runner, "chatter")
    crashed = run(runner, "crash")

    logs = sorted(tmp_path.glob("*-stage.stderr.log"))
    texts = [p.read_text() for p in logs]
    pid = starts.pids[0]
    assert texts[0] == f"probe 0 of pid {pid}\n"
    assert texts[1] == f"probe 1 of pid {pid}\na warning from a library\n"
    assert "RuntimeError: simulated crash" in texts[2] and "probe 0" not in texts[2]
    assert "simulated crash" in crashed.reason


def test_close_stops_the_serving_worker(tmp_path):
    starts = Starts()
    runner = ProbeRunner(ServingLauncher(), tmp_path, on_event=starts, grace_s=1.0)
    run(runner)

    runner.close()

    assert wait_dead(starts.pids[0])


def test_a_launcher_that_cannot_serve_runs_each_probe_alone(tmp_path):
    @dataclass
    class OneShot:
        def command(self, spec_path: Path) -> list[str]:
            return [sys.executable, str(FAKE_WORKER), "ok", str(spec_path)]

        def env(self, base: dict[str, str]) -> dict[str, str]:
            return {**base, "PYTHONUNBUFFERED": "1"}

    starts = Starts()
    runner = ProbeRunner(OneShot(), tmp_path, on_event=starts)

    results = [run(runner) for _ in range(2)]

    assert [r.status for r in results] == [Status.OK] * 2
    assert starts.pids[0] != starts.pids[1]


def test_fresh_starts_a_new_worker_that_later_probes_of_its_key_follow(served):
    runner, launcher, starts = served
    run(runner)
    fresh = runner.run("stage", {}, spec(), reuse="k", fresh=True)
    after = run(runner)

    assert (fresh.served_before, after.served_before) == (0, 1)
    assert starts.pids[0] != starts.pids[1] == starts.pids[2]
    assert wait_dead(starts.pids[0]) and len(launcher.served) == 2


def test_a_worker_gone_between_probes_costs_no_probe(served, tmp_path):
    runner, _, starts = served
    vanished = run(runner, "vanish")  # its result, then the process ends
    time.sleep(0.6)
    after = run(runner)

    assert vanished.status is Status.OK
    assert after.status is Status.OK and after.served_before == 0
    assert starts.pids[0] != starts.pids[1]
    log = sorted(tmp_path.glob("*-stage.stderr.log"))[-1].read_text()
    assert "releasing" not in log  # the next probe's log is its own


def test_a_worker_that_goes_while_the_next_spec_is_sent_costs_no_probe(served):
    runner, _, starts = served
    run(runner, "vanish")
    after = run(runner)  # sent within the 0.3 s before it ends: it never starts the probe

    assert after.status is Status.OK and after.served_before == 0
    assert starts.pids[0] != starts.pids[-1]


def test_a_failing_event_handler_stops_the_served_probe_and_its_process(tmp_path):
    starts = Starts()

    def hear(event: Event) -> None:
        starts(event)
        if isinstance(event, StartEvent) and len(starts.starts) == 2:
            raise RuntimeError("the screen went away")

    runner = ProbeRunner(ServingLauncher(), tmp_path, on_event=hear, grace_s=1.0)
    try:
        run(runner)
        with pytest.raises(RuntimeError, match="went away"):
            run(runner, "hang")
        assert wait_dead(starts.pids[1])
        assert run(runner).served_before == 0
    finally:
        runner.close()
