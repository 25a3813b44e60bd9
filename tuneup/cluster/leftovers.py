"""What a dead session left running: processes marked with its probes folder.

Every process of a probe inherits `TUNEUP_PROBE_DIR` (tuneup.probe.runner),
whatever session or group it moved to, so a resumed session finds the
leftovers of the one before it by reading /proc/PID/environ, and stops them
before it measures anything on a GPU they still hold.
"""

from __future__ import annotations

import os
import signal
import time
from collections.abc import Iterable
from pathlib import Path

from tuneup.cluster.proctree import PROC, ProcStat, read_processes, read_stat

MARKER = "TUNEUP_PROBE_DIR"


def marked_with(value: str, processes: Iterable[ProcStat], proc: Path = PROC) -> list[ProcStat]:
    """The running processes whose environment holds MARKER=value (not this process)."""
    wanted = f"{MARKER}={value}".encode()
    found = []
    for stat in processes:
        if not stat.running or stat.pid == os.getpid():
            continue
        try:
            environ = (proc / str(stat.pid) / "environ").read_bytes()
        except OSError:  # gone, or another user's
            continue
        if wanted in environ.split(b"\0"):
            found.append(stat)
    return found


def find_leftovers(probe_dir: Path, proc: Path = PROC) -> list[ProcStat]:
    """Processes still running from the probes of `probe_dir` (a results folder's probes/)."""
    return marked_with(str(probe_dir.resolve()), read_processes(proc).values(), proc)


def stop_leftovers(found: list[ProcStat], grace_s: float = 3.0, proc: Path = PROC) -> list[int]:
    """SIGTERM, then SIGKILL after `grace_s`, to those still the same process; the pids hit."""
    hit = _signal(found, signal.SIGTERM, proc)
    deadline = time.monotonic() + grace_s
    while time.monotonic() < deadline and _still(found, proc):
        time.sleep(0.05)
    _signal(found, signal.SIGKILL, proc)
    return hit


def describe(found: list[ProcStat], show: int = 4) -> str:
    """'pid 12 (python), pid 15 (sleep)' and how many more."""
    text = ", ".join(f"pid {p.pid} ({p.comm})" for p in found[:show])
    return text + (f" and {len(found) - show} more" if len(found) > show else "")


def _still(found: list[ProcStat], proc: Path) -> list[ProcStat]:
    alive = []
    for stat in found:
        now = read_stat(stat.pid, proc)
        if now is not None and now.start_ticks == stat.start_ticks and now.running:
            alive.append(stat)
    return alive


def _signal(found: list[ProcStat], signum: int, proc: Path) -> list[int]:
    hit = []
    for stat in _still(found, proc):
        try:
            os.kill(stat.pid, signum)
            hit.append(stat.pid)
        except (ProcessLookupError, PermissionError):
            continue
    return hit
