"""The suite's processes: run a step's command in its own session under a time limit, and
find what the suite started by the marker in its environment (to end what outlived it).

Side effects only: the driver (suite.py) decides what to run and what to make of it.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import time
from pathlib import Path
from typing import Any

from suite_types import ROOT, Finished

MARKER = "TUNEUP_GPU_SUITE"  # set in every step's environment: how our orphans are found


class Stopped(Exception):
    """SIGTERM or SIGINT arrived: stop the running step, write what we have."""

    def __init__(self, signum: int) -> None:
        super().__init__(signal.Signals(signum).name)
        self.signum = signum


def on_signal(signum: int, _frame: Any) -> None:
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    raise Stopped(signum)


def marked_processes(run_id: str) -> list[dict[str, Any]]:
    """Live processes whose environment carries this run's marker (the suite excluded)."""
    found = []
    me = os.getpid()
    needle = f"{MARKER}={run_id}".encode()
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit() or int(entry.name) == me:
            continue
        try:
            environ = (entry / "environ").read_bytes().split(b"\0")
            tag = next((v for v in environ if v.startswith(needle)), None)
            if tag is None:
                continue
            cmdline = (entry / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
            state = (entry / "stat").read_text().rsplit(")", 1)[1].split()[0]
        except (OSError, IndexError):
            continue
        if state == "Z":
            continue  # a zombie holds nothing; its parent will reap it
        tag = tag.decode(errors="replace").partition("=")[2]
        found.append({"pid": int(entry.name), "cmdline": cmdline.strip(), "step": tag})
    return found


def kill_all(processes: list[dict[str, Any]]) -> None:
    for proc in processes:
        with contextlib.suppress(OSError):
            os.kill(proc["pid"], signal.SIGKILL)


def run_command(
    argv: list[str], env: dict[str, str], limit_s: float, log_base: Path
) -> tuple[Finished, Stopped | None]:
    """Run `argv` in its own session with a time limit; stop the whole group past it."""
    began = time.monotonic()
    out_path, err_path = log_base.with_suffix(".out"), log_base.with_suffix(".err")
    stopped = None
    with out_path.open("w") as out, err_path.open("w") as err:
        proc = subprocess.Popen(
            argv, stdout=out, stderr=err, env=env, cwd=ROOT, start_new_session=True
        )
        timed_out = False
        try:
            try:
                proc.wait(timeout=max(1.0, limit_s))
            except subprocess.TimeoutExpired:
                timed_out = True
        except Stopped as exc:
            stopped = exc
        if proc.poll() is None:
            _stop_group(proc)
    finished = Finished(
        rc=None if timed_out or stopped else proc.returncode,
        stdout=out_path.read_text(errors="replace"),
        stderr=err_path.read_text(errors="replace"),
        seconds=time.monotonic() - began,
        timed_out=timed_out,
    )
    return finished, stopped


def _stop_group(proc: subprocess.Popen) -> None:
    for sig, wait in ((signal.SIGTERM, 5.0), (signal.SIGKILL, 5.0)):
        with contextlib.suppress(OSError):
            os.killpg(proc.pid, sig)
        try:
            proc.wait(timeout=wait)
            return
        except subprocess.TimeoutExpired:
            continue


def other_workers(run_id: str) -> list[dict[str, Any]]:
    """tuneup workers on this machine that the suite did not start (reported, never killed)."""
    ours = {p["pid"] for p in marked_processes(run_id)}
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit() or int(entry.name) in ours:
            continue
        try:
            cmdline = (entry / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
        except OSError:
            continue
        if "tuneup.worker" in cmdline:
            found.append({"pid": int(entry.name), "cmdline": cmdline.strip()})
    return found
