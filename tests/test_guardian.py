"""The guardian every probe child runs under, and the search for a dead session's leftovers."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from tuneup.cluster.guardian import guarded
from tuneup.cluster.leftovers import MARKER, describe, find_leftovers, stop_leftovers

pytestmark = pytest.mark.skipif(not Path("/proc/self/environ").exists(), reason="needs /proc")


def wait_until(condition, timeout_s: float = 8.0) -> bool:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if condition():
            return True
        time.sleep(0.05)
    return condition()


def test_the_child_ends_as_it_would_without_the_guardian(tmp_path: Path) -> None:
    exits = subprocess.run(guarded(["sh", "-c", "echo out; echo err >&2; exit 3"], os.getpid()),
                           capture_output=True, text=True, timeout=20)  # fmt: skip
    assert (exits.returncode, exits.stdout, exits.stderr) == (3, "out\n", "err\n")

    killed = subprocess.run(guarded(["sh", "-c", "kill -SEGV $$"], os.getpid()), timeout=20)
    assert killed.returncode == -signal.SIGSEGV

    missing = subprocess.run(guarded([str(tmp_path / "nope")], os.getpid()),
                             capture_output=True, text=True, timeout=20)  # fmt: skip
    assert missing.returncode == 127 and "could not start the worker" in missing.stderr


def test_a_users_own_sigusr2_does_not_end_a_healthy_probe() -> None:
    """SIGUSR2 also wakes the guardian when tuneup dies; from anyone else it changes nothing."""
    script = 'trap "" USR2; echo ready; sleep 0.6; exit 4'
    proc = subprocess.Popen(guarded(["sh", "-c", script], os.getpid()), stdout=subprocess.PIPE,
                            text=True, start_new_session=True)  # fmt: skip
    assert proc.stdout is not None and proc.stdout.readline() == "ready\n"
    os.killpg(proc.pid, signal.SIGUSR2)  # `sbatch --signal=USR2@60`, say
    assert proc.wait(timeout=10) == 4


def test_sigkill_of_tuneup_takes_the_child_and_everything_it_started(tmp_path: Path) -> None:
    """A script's `sleep`, even one in a session of its own, does not outlive a killed tuneup."""
    probes = tmp_path / "probes"
    probes.mkdir()
    parent = textwrap.dedent(f"""
        import os, subprocess, sys, time
        from tuneup.cluster.guardian import guarded
        script = "setsid sleep 1000 & sleep 1001 & wait"
        env = {{**os.environ, "{MARKER}": {str(probes.resolve())!r}}}
        subprocess.Popen(guarded(["sh", "-c", script], os.getpid()), env=env,
                         start_new_session=True)
        print("started", flush=True)
        time.sleep(1000)
    """)
    tuneup = subprocess.Popen([sys.executable, "-c", parent], stdout=subprocess.PIPE, text=True)
    try:
        assert tuneup.stdout is not None and tuneup.stdout.readline() == "started\n"
        assert wait_until(lambda: len(find_leftovers(probes)) >= 4)  # guardian, sh, 2 sleeps
        tuneup.kill()
        tuneup.wait(timeout=10)
        assert wait_until(lambda: not find_leftovers(probes)), describe(find_leftovers(probes))
    finally:
        tuneup.kill()
        stop_leftovers(find_leftovers(probes), grace_s=0.5)


def test_leftovers_of_a_folder_are_found_and_stopped_and_no_others(tmp_path: Path) -> None:
    mine, other = tmp_path / "mine" / "probes", tmp_path / "other" / "probes"
    started = [
        subprocess.Popen(["sleep", "1000"], env={**os.environ, MARKER: str(folder.resolve())})
        for folder in (mine, other)
    ]
    try:
        assert wait_until(lambda: bool(find_leftovers(mine)))
        found = find_leftovers(mine)
        assert [p.pid for p in found] == [started[0].pid]
        assert describe(found) == f"pid {started[0].pid} (sleep)"

        assert stop_leftovers(found, grace_s=2.0) == [started[0].pid]
        assert started[0].wait(timeout=5) == -signal.SIGTERM
        assert started[1].poll() is None and [p.pid for p in find_leftovers(other)]
    finally:
        for proc in started:
            proc.kill()
            proc.wait()
