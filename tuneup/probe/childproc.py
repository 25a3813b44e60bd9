"""What the runner keeps of a probe's child, and the small process calls it and the
resident worker share: has it exited, wait for it, signal its group, read a log's tail.

The child is started in a session of its own, so its pid is also its process
group's id: signalling the group reaches the loader workers and anything else
it started (tuneup.probe.runner's module docstring).
"""

from __future__ import annotations

import contextlib
import os
import subprocess
import time
from collections import deque
from dataclasses import dataclass, field
from pathlib import Path

from tuneup.cluster.guardian import guarded
from tuneup.probe.events import Event
from tuneup.probe.outcome import EXITED

POLL_S = 0.02  # how often a watcher looks at the child, the clock and the interrupt flag

STDOUT_LOG_LINES = 200


@dataclass
class ChildRun:
    """What the last child left behind, for details beyond the one-line reason."""

    spec_path: Path
    stderr_path: Path
    limit_s: float = 0.0  # the wall-clock limit it ran under
    returncode: int | None = None
    ended: str = EXITED
    events: list[Event] = field(default_factory=list)
    # The last stdout lines that were not events (library chatter, prints).
    stdout_log: deque[str] = field(default_factory=lambda: deque(maxlen=STDOUT_LOG_LINES))
    stderr_tail: list[str] = field(default_factory=list)
    # The probes the process ran before this one: 0 for a fresh process.
    served_before: int = 0
    # The memory cgroup's OOM-kill count when it started (None: not readable here).
    oom_kills_before: int | None = None


def start_guarded(
    argv: list[str], env: dict[str, str], stderr: Path, *, mode: str, serving: bool
) -> subprocess.Popen[bytes] | str:
    """Start `argv` under its guardian in a session of its own, its stdout a pipe and its
    stderr appended to (mode "ab") or written over ("wb") `stderr`; a serving worker gets
    a stdin pipe. A launch that fails (no interpreter, no permission) is its reason."""
    with stderr.open(mode) as log:
        try:
            return subprocess.Popen(
                guarded(argv, os.getpid()),
                stdin=subprocess.PIPE if serving else subprocess.DEVNULL,
                stdout=subprocess.PIPE,
                stderr=log,
                env=env,
                start_new_session=True,
            )
        except OSError as exc:
            return f"could not start the worker ({argv[0]}): {exc}"


def tail_lines(path: Path, count: int, max_bytes: int = 64 * 1024) -> list[str]:
    """The last `count` lines of a file that may be large, read from its end."""
    try:
        with path.open("rb") as fh:
            fh.seek(0, os.SEEK_END)
            size = fh.tell()
            fh.seek(max(0, size - max_bytes))
            data = fh.read()
    except OSError:
        return []
    lines = data.decode("utf-8", errors="replace").splitlines()
    if size > max_bytes:
        lines = lines[1:]  # the first line read is probably cut
    return lines[-count:]


# os.waitid with WNOWAIT notices an exit without reaping, so the child's pid (which is
# also its process group id) cannot be reused before the group has been signalled.
_CAN_PEEK = hasattr(os, "waitid") and hasattr(os, "WNOWAIT")


def has_exited(proc: subprocess.Popen[bytes]) -> bool:
    if proc.returncode is not None:
        return True
    if _CAN_PEEK:
        try:
            info = os.waitid(os.P_PID, proc.pid, os.WEXITED | os.WNOHANG | os.WNOWAIT)
        except ChildProcessError:
            return proc.poll() is not None
        return info is not None
    return proc.poll() is not None


def wait_exit(proc: subprocess.Popen[bytes], deadline: float) -> None:
    while not has_exited(proc) and time.monotonic() < deadline:
        time.sleep(POLL_S)


def signal_group(proc: subprocess.Popen[bytes], signum: int) -> None:
    """Signal the child's whole process group, unless the child is already reaped."""
    if proc.returncode is not None:
        return  # reaped: its pid, and so the group id, may belong to someone else now
    with contextlib.suppress(ProcessLookupError, PermissionError):  # the group is gone
        os.killpg(proc.pid, signum)
