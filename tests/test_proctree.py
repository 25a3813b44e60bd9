"""A probe's process tree: /proc parsing, and no process of a probe outlives it."""

from __future__ import annotations

import contextlib
import os
import signal
import sys
import time
from pathlib import Path

import pytest

from tuneup.cluster.proctree import (
    ProcStat,
    Tree,
    descendants,
    parse_stat,
    read_descendants,
    read_stat,
)
from tuneup.probe.plan import ProbeSpec, plan_probe
from tuneup.probe.runner import ProbeRunner
from tuneup.probe.types import ProbeBudget, Status

pytestmark = pytest.mark.skipif(not Path("/proc/self/stat").exists(), reason="needs Linux /proc")


def stat_line(pid: int, comm: str, state: str, ppid: int, pgid: int, start: int) -> str:
    # Fields 3..22 of proc(5); the ones the tree does not read are zeros.
    rest = [state, ppid, pgid, pgid, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 20, 0, 1, 0, start]
    return f"{pid} ({comm}) " + " ".join(map(str, rest)) + " 0 0\n"


def test_stat_lines_parse_even_with_parentheses_in_the_name() -> None:
    stat = parse_stat(stat_line(4321, "pt_main) (thread", "S", 4000, 4321, 998877))

    assert stat == ProcStat(
        pid=4321,
        comm="pt_main) (thread",
        state="S",
        ppid=4000,
        pgid=4321,
        sid=4321,
        start_ticks=998877,
    )
    assert stat.running
    assert not parse_stat(stat_line(1, "x", "Z", 0, 1, 5)).running  # type: ignore[union-attr]


@pytest.mark.parametrize("text", ["", "12 (x) S 1", "abc (x) " + "0 " * 30, "12 x S 1 2 3"])
def test_lines_in_another_form_give_none(text: str) -> None:
    assert parse_stat(text) is None


def test_descendants_cross_sessions_and_skip_strangers() -> None:
    def proc(pid: int, ppid: int) -> ProcStat:
        return ProcStat(pid, "p", "S", ppid, pid, pid, pid * 10)

    # 100 (torchrun) -> 101, 102 (ranks in sessions of their own) -> 103 (a loader worker)
    table = {p.pid: p for p in (proc(1, 0), proc(100, 1), proc(101, 100), proc(102, 100))}
    table[103] = proc(103, 102)
    table[200] = proc(200, 1)  # someone else's

    assert [p.pid for p in descendants(100, table)] == [101, 102, 103]
    assert descendants(103, table) == []


def test_this_process_s_children_are_found_in_the_real_proc(tmp_path: Path) -> None:
    import subprocess

    child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(30)"])
    try:
        found = read_descendants(os.getpid())
        assert child.pid in [p.pid for p in found]
        assert read_stat(child.pid) == next(p for p in found if p.pid == child.pid)
    finally:
        child.kill()
        child.wait()


def test_a_pid_given_to_another_process_is_not_one_of_ours(tmp_path: Path) -> None:
    proc = tmp_path / "proc"
    (proc / "500").mkdir(parents=True)
    (proc / "501").mkdir()
    (proc / "500" / "stat").write_text(stat_line(500, "python", "S", 1, 500, 1000))
    (proc / "501" / "stat").write_text(stat_line(501, "python", "S", 1, 501, 1001))
    tree = Tree(1, proc=proc)
    tree.record()
    assert {p.pid for p in tree.alive()} == {500, 501}

    # 500 died and its pid went to a new process; 501 became a zombie.
    (proc / "500" / "stat").write_text(stat_line(500, "bash", "S", 77, 500, 5555))
    (proc / "501" / "stat").write_text(stat_line(501, "python", "Z", 1, 501, 1001))

    assert tree.alive() == []
    assert tree.kill(signal.SIGKILL) == []


# A stand-in worker that starts `sleep 60` in a session of its own, as torchrun
# starts its ranks, then hangs or exits after `argv[1]` seconds.
DETACHING_WORKER = """
import json, subprocess, sys, time
sleeper = subprocess.Popen(["sleep", "60"], start_new_session=True)
print(json.dumps({"event": "start", "grandchild_pid": sleeper.pid}), flush=True)
time.sleep(float(sys.argv[1]))
"""


class DetachingLauncher:
    def __init__(self, seconds: float) -> None:
        self.seconds = seconds

    def command(self, spec_path: Path) -> list[str]:
        return [sys.executable, "-c", DETACHING_WORKER, str(self.seconds), str(spec_path)]

    def env(self, base: dict[str, str]) -> dict[str, str]:
        return {**base, "PYTHONUNBUFFERED": "1"}


def _sleeper(runner: ProbeRunner) -> int:
    assert runner.last_run is not None
    start = next(e for e in runner.last_run.events if e.event == "start")
    return int(start.raw["grandchild_pid"])  # the fake worker's own field


def _gone(pid: int, within_s: float = 3.0) -> bool:
    deadline = time.monotonic() + within_s
    while time.monotonic() < deadline:
        stat = read_stat(pid)
        if stat is None or not stat.running:
            return True
        time.sleep(0.02)
    return False


@pytest.mark.parametrize(
    ("seconds", "limit_s", "status"),
    [(60.0, 1.0, Status.TIMEOUT), (1.5, 20.0, Status.CRASH)],
    ids=["timed-out", "exited"],
)
def test_a_process_in_a_session_of_its_own_dies_with_the_probe(
    tmp_path: Path, seconds: float, limit_s: float, status: Status
) -> None:
    runner = ProbeRunner(DetachingLauncher(seconds), tmp_path, grace_s=0.2)
    spec = ProbeSpec(config={}, plan=plan_probe(ProbeBudget(limit_s=limit_s)))

    result = runner.run("ddp", {}, spec)
    sleeper = _sleeper(runner)
    try:
        assert result.status is status
        assert _gone(sleeper), "the detached `sleep 60` outlived its probe"
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.kill(sleeper, signal.SIGKILL)
