"""The probe runner: child processes that succeed, fail, hang or get interrupted.

Most tests drive tests/fake_worker.py (no torch, a fraction of a second per
run); one runs the real worker when it exists.
"""

from __future__ import annotations

import json
import os
import signal
import sys
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from tuneup.cluster.launch import LocalLauncher
from tuneup.probe.events import ErrorEvent, Event, ResultEvent, StartEvent
from tuneup.probe.outcome import EXITED, build_result, classify
from tuneup.probe.plan import ProbeSpec, plan_probe
from tuneup.probe.runner import ProbeRunner
from tuneup.probe.types import ProbeBudget, Status

FAKE_WORKER = Path(__file__).with_name("fake_worker.py")
REAL_WORKER = Path(__file__).resolve().parents[1] / "tuneup" / "worker" / "main.py"


@dataclass
class FakeLauncher:
    """Runs tests/fake_worker.py; `mode` and `flags` may change between runs."""

    mode: str = "ok"
    flags: tuple[str, ...] = ()
    commands: list[list[str]] = field(default_factory=list)

    def command(self, spec_path: Path) -> list[str]:
        argv = [sys.executable, str(FAKE_WORKER), self.mode, *self.flags, str(spec_path)]
        self.commands.append(argv)
        return argv

    def env(self, base: dict[str, str]) -> dict[str, str]:
        return {**base, "PYTHONUNBUFFERED": "1"}


def make_spec(**config: Any) -> ProbeSpec:
    return ProbeSpec(
        config={"global_batch_size": 4, **config}, plan=plan_probe(ProbeBudget(limit_s=20.0))
    )


def alive(pid: int) -> bool:
    """True while `pid` runs; a zombie nobody has reaped yet counts as dead."""
    stat = Path(f"/proc/{pid}/stat")
    if Path("/proc/self/stat").exists():
        try:
            state = stat.read_text().rsplit(")", 1)[1].split()[0]
        except (FileNotFoundError, ProcessLookupError):
            return False
        return state not in ("Z", "X")
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return True


def wait_dead(pid: int, within_s: float = 2.0) -> bool:
    deadline = time.monotonic() + within_s
    while time.monotonic() < deadline:
        if not alive(pid):
            return True
        time.sleep(0.02)
    return False


class Recorder:
    """An on_event handler that keeps events and the thread that delivered them."""

    def __init__(self, then: Callable[[Event], None] | None = None) -> None:
        self.events: list[Event] = []
        self.threads: set[str] = set()
        self.started = threading.Event()
        self.then = then

    def __call__(self, event: Event) -> None:
        self.events.append(event)
        self.threads.add(threading.current_thread().name)
        if isinstance(event, StartEvent):
            self.started.set()
        if self.then is not None:
            self.then(event)

    def grandchild(self) -> int:
        start = next(e for e in self.events if isinstance(e, StartEvent))
        return int(start.raw["grandchild_pid"])  # the fake worker's own field


def test_ok_probe_result_carries_the_measurements(tmp_path):
    runner = ProbeRunner(FakeLauncher("ok"), tmp_path)
    spec = make_spec(amp_mode="fp16")

    result = runner.run("amp", {"amp_mode": "fp16"}, spec)

    assert result.status is Status.OK and result.ok
    assert (result.stage, result.variant, result.config) == (
        "amp",
        {"amp_mode": "fp16"},
        spec.config,
    )
    assert result.full_sps == 101.0
    assert result.full_sps_trials == [100.0, 101.0, 102.0]
    assert (result.io_sps, result.synthetic_sps, result.iqr_pct) == (300.0, 150.0, 1.0)
    assert (result.loss_start, result.loss_end, result.losses) == (2.0, 1.5, [2.0, 1.5])
    assert result.scaler_overflows == 2
    assert result.warmup_s == 1.25
    assert result.one_time_s == {"spawn": 0.5}
    assert result.break_even_steps == 12.0
    assert 0 < result.wall_s < 10
    # The worker read the spec the runner wrote, and the file stays for later inspection.
    assert runner.last_run is not None
    assert ProbeSpec.from_dict(json.loads(runner.last_run.spec_path.read_text())) == spec


def test_on_event_gets_every_event_in_order_from_the_reader_thread(tmp_path):
    recorder = Recorder()
    runner = ProbeRunner(FakeLauncher("ok"), tmp_path, on_event=recorder)

    runner.run("baseline", {}, make_spec(width=8))

    kinds = [e.event for e in recorder.events]
    assert kinds == ["start", "warmup", "trial", "trial", "trial", "loss", "loss", "result"]
    assert [e.raw["trial"] for e in recorder.events if e.event == "trial"] == [0, 1, 2]
    assert recorder.events[0].config["width"] == 8
    assert threading.current_thread().name not in recorder.threads


def test_oom_error_event_gives_oom_with_the_message(tmp_path):
    result = ProbeRunner(FakeLauncher("oom"), tmp_path).run("batch", {"batch": 64}, make_spec())

    assert result.status is Status.OOM
    assert result.reason == "out of memory: CUDA out of memory. Tried to allocate 2.00 GiB"
    assert result.full_sps is None


def test_unsupported_error_event_gives_unsupported(tmp_path):
    result = ProbeRunner(FakeLauncher("unsupported"), tmp_path).run("apex", {}, make_spec())

    assert (result.status, result.reason) == (Status.UNSUPPORTED, "apex is not installed")


def test_child_killed_by_a_signal_is_a_crash_and_the_ladder_goes_on(tmp_path):
    launcher = FakeLauncher("selfkill")
    runner = ProbeRunner(launcher, tmp_path)

    crashed = runner.run("jit", {"enable_jit": True}, make_spec())
    launcher.mode = "ok"
    after = runner.run("jit", {"enable_jit": False}, make_spec())

    assert crashed.status is Status.CRASH
    assert crashed.reason.startswith("worker killed by SIGKILL")
    assert "out-of-memory killer" in crashed.reason
    assert after.status is Status.OK and after.full_sps == 101.0
    # Each probe got its own spec file.
    assert launcher.commands[0][-1] != launcher.commands[1][-1]


def test_hanging_child_times_out_and_its_whole_group_is_killed(tmp_path):
    recorder = Recorder()
    runner = ProbeRunner(
        FakeLauncher("hang", ("--grandchild",)), tmp_path, on_event=recorder, grace_s=1.0
    )

    result = runner.run("loader", {"num_data_workers": 8}, make_spec(), limit_s=1.0)

    assert result.status is Status.TIMEOUT
    assert result.reason == "no result within 1 s; killed"
    assert 1.0 <= result.wall_s < 4.0
    assert wait_dead(recorder.grandchild()), "the worker's `sleep 60` child survived"


def test_child_ignoring_sigterm_gets_sigkill_after_the_grace(tmp_path):
    recorder = Recorder()
    flags = ("--grandchild", "--ignore-term")
    runner = ProbeRunner(FakeLauncher("hang", flags), tmp_path, on_event=recorder, grace_s=0.5)

    result = runner.run("loader", {}, make_spec(), limit_s=0.5)

    assert result.status is Status.TIMEOUT
    assert 1.0 <= result.wall_s < 4.0  # the limit, then the whole grace, then SIGKILL
    assert runner.last_run is not None and runner.last_run.returncode == -signal.SIGKILL
    assert wait_dead(recorder.grandchild())


def test_garbage_on_stdout_is_ignored_and_kept_as_log(tmp_path):
    runner = ProbeRunner(FakeLauncher("garbage"), tmp_path)

    result = runner.run("baseline", {}, make_spec())

    assert result.status is Status.OK and result.full_sps == 101.0
    assert runner.last_run is not None
    log = list(runner.last_run.stdout_log)
    assert "plain text from a library" in log and "trailing chatter" in log
    assert '{"no_event_key": true}' in log


def test_nonzero_exit_with_a_traceback_gives_its_last_line(tmp_path):
    runner = ProbeRunner(FakeLauncher("traceback"), tmp_path)

    result = runner.run("baseline", {}, make_spec())

    assert result.status is Status.CRASH
    assert result.reason == "worker exited with status 1: RuntimeError: boom in the training step"
    # The full stderr stays next to the spec for the user to read.
    assert runner.last_run is not None
    assert "Traceback (most recent call last)" in runner.last_run.stderr_path.read_text()


def test_clean_exit_without_a_result_is_a_crash(tmp_path):
    result = ProbeRunner(FakeLauncher("noresult"), tmp_path).run("baseline", {}, make_spec())

    assert (result.status, result.reason) == (Status.CRASH, "worker exited without a result")


def test_interrupt_from_another_thread_stops_a_hanging_child(tmp_path):
    recorder = Recorder()
    launcher = FakeLauncher("hang", ("--grandchild",))
    runner = ProbeRunner(launcher, tmp_path, on_event=recorder, grace_s=2.0)

    def press_stop() -> None:
        recorder.started.wait(10)
        runner.interrupt()

    threading.Thread(target=press_stop, daemon=True).start()
    result = runner.run("graphs", {"cuda_graphs": True}, make_spec(), limit_s=30)

    assert (result.status, result.reason) == (Status.CRASH, "interrupted by user")
    assert runner.interrupted
    assert result.wall_s < 5.0
    assert wait_dead(recorder.grandchild())

    # Interrupted is sticky: the next probe starts no child until the caller re-arms.
    skipped = runner.run("graphs", {"cuda_graphs": False}, make_spec())
    assert (skipped.status, skipped.reason) == (Status.CRASH, "interrupted by user")
    assert len(launcher.commands) == 1
    runner.interrupted = False
    launcher.mode = "ok"
    assert runner.run("graphs", {"cuda_graphs": False}, make_spec()).status is Status.OK


def test_failing_event_handler_stops_the_child_and_surfaces(tmp_path):
    def handler(event: dict[str, Any]) -> None:
        raise KeyError("handler bug")

    runner = ProbeRunner(FakeLauncher("hang"), tmp_path, on_event=handler, grace_s=1.0)
    started = time.monotonic()

    with pytest.raises(KeyError, match="handler bug"):
        runner.run("baseline", {}, make_spec(), limit_s=30)

    assert time.monotonic() - started < 5.0
    assert runner.last_run is not None and runner.last_run.returncode is not None


def test_worker_that_cannot_start_is_a_crash_not_an_exception(tmp_path):
    runner = ProbeRunner(LocalLauncher(python=str(tmp_path / "no-such-python")), tmp_path)

    result = runner.run("baseline", {}, make_spec())

    assert result.status is Status.CRASH
    assert "could not start the worker" in result.reason


@pytest.mark.parametrize(
    ("events", "returncode", "expected"),
    [
        ([ErrorEvent(kind="cuda", message="illegal address")], 1,
         (Status.CRASH, "CUDA error: illegal address")),
        ([ErrorEvent(kind="nccl", message="timeout")], -6,
         (Status.CRASH, "NCCL error: timeout")),
        ([ErrorEvent(kind="other", message="bad\n  data")], 1,
         (Status.CRASH, "bad data")),
        ([ResultEvent(full_sps=1.0)], 3,
         (Status.CRASH, "worker exited with status 3 after its result: last words")),
        ([], -11, (Status.CRASH, "worker killed by SIGSEGV (segmentation fault): last words")),
    ],
)  # fmt: skip
def test_classify_names_the_cause(events, returncode, expected):
    assert classify(events, returncode, EXITED, 10.0, ["", "last words", "  "]) == expected


def test_local_launcher_runs_the_worker_module_unbuffered(tmp_path):
    launcher = LocalLauncher(python="/opt/py/bin/python")
    spec_path = tmp_path / "0001-baseline.json"

    assert launcher.command(spec_path) == [
        "/opt/py/bin/python",
        "-m",
        "tuneup.worker",
        str(spec_path),
    ]
    env = launcher.env({"PATH": "/bin"})
    assert env["PATH"] == "/bin" and env["PYTHONUNBUFFERED"] == "1"


@pytest.mark.slow
@pytest.mark.skipif(not REAL_WORKER.exists(), reason="tuneup/worker/main.py is not written yet")
def test_real_worker_tiny_cpu_probe_is_ok(tmp_path, tiny_config):
    recorder = Recorder()
    budget = ProbeBudget(
        trial_s=0.01, min_trials=2, max_trials=2, warmup_cap_s=0.2, loss_steps=2, limit_s=120
    )
    spec = ProbeSpec(config=tiny_config().to_dict(), plan=plan_probe(budget))
    runner = ProbeRunner(LocalLauncher(), tmp_path, on_event=recorder)

    result = runner.run("baseline", {}, spec)

    assert result.status is Status.OK, result.reason
    assert result.full_sps is not None and result.full_sps > 0
    kinds = [e.event for e in recorder.events]
    assert kinds[0] == "start" and kinds[-1] == "result"


TORCHRUN_TAIL = """\
torch.distributed.elastic.multiprocessing.errors.ChildFailedError:
=======================================================
tuneup.worker FAILED
-------------------------------------------------------
Failures:
[1]:
  rank      : 0 (local_rank: 0)
  exitcode  : {other} (pid: 17399)
-------------------------------------------------------
Root Cause (first observed failure):
[0]:
  rank      : 1 (local_rank: 1)
  exitcode  : {root} (pid: 17398)
=======================================================
"""
GLOO_FALLOUT = ErrorEvent(kind="other", message="RuntimeError: Connection closed by peer", rank=0)


@pytest.mark.parametrize(
    ("events", "root", "other", "expected"),
    [
        # rank 1 died silently; rank 0's error is fallout from its death
        ([], -9, -15, "rank 1 killed by SIGKILL"),
        ([GLOO_FALLOUT], -11, 3, "rank 1 killed by SIGSEGV (segmentation fault)"),
        # a rank that could speak names itself
        ([ErrorEvent(kind="cuda", message="illegal address", rank=1)], 3, -15,
         "CUDA error: illegal address (rank 1)"),
        ([], 3, -15, "rank 1 exited with status 3"),
    ],
)  # fmt: skip
def test_a_failed_rank_under_torchrun_is_named(events, root, other, expected):
    tail = TORCHRUN_TAIL.format(root=root, other=other).splitlines()

    status, reason = classify(events, 1, EXITED, 10.0, tail)

    assert status is Status.CRASH
    assert reason.startswith(expected), reason


def test_result_carries_each_rank_s_rate_and_a_failed_probe_its_rank_count():
    spec = make_spec()
    start = StartEvent(world_size=4)
    result_event = ResultEvent(
        full_sps=380.0, ranks=4, rank_sps=(100.0, 98.0, 95.0, 80.0), stragglers=(3,)
    )

    ok = build_result("ddp", {}, spec, [start, result_event], Status.OK, "", 1.0)
    crashed = build_result("ddp", {}, spec, [start], Status.CRASH, "rank 1 killed", 1.0)

    assert (ok.ranks, ok.rank_sps, ok.stragglers) == (4, [100.0, 98.0, 95.0, 80.0], [3])
    assert (crashed.ranks, crashed.rank_sps, crashed.stragglers) == (4, [], [])


def test_a_probe_can_bring_its_own_launcher(tmp_path):
    default, own = FakeLauncher("oom"), FakeLauncher("ok")
    runner = ProbeRunner(default, tmp_path)

    result = runner.run("ddp", {}, make_spec(), launcher=own)

    assert result.status is Status.OK
    assert (len(default.commands), len(own.commands)) == (0, 1)
