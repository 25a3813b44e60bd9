"""Run one probe in a child process and turn whatever happens to it into a ProbeResult.

The child (normally `python -m tuneup.worker SPEC.json`, or torchrun or srun
starting several) runs in a session of its own, so its process group (loader
workers, anything the trainer spawned) can be stopped together: an OOM, a
CUDA error, a hang or a segfault costs one probe, never the session. Ranks
that torchrun starts in sessions of their own are found through the process
tree, recorded while the probe runs (`tuneup.cluster.proctree`), and killed
too when it ends. Each child runs under a guardian (`tuneup.cluster.guardian`)
that stops it, and everything below it, when tuneup itself dies, even by
SIGKILL; every process of a probe carries `TUNEUP_PROBE_DIR`, so a later
`--resume` finds what a dead session left running.

Classification of an ended child into a status and one human reason is
pure (`classify`, `build_result`); process handling lives in `ProbeRunner`.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import signal
import subprocess
import threading
import time
from collections import deque
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import IO, Any

from tuneup.cluster.guardian import guarded
from tuneup.cluster.launch import Launcher
from tuneup.cluster.leftovers import MARKER
from tuneup.cluster.proctree import Tree
from tuneup.errors import UsageError
from tuneup.probe.events import (
    Event,
    EventHandler,
    parse_event,
)
from tuneup.probe.outcome import (
    CALLBACK_FAILED,
    EXITED,
    INTERRUPTED,
    TIMEOUT,
    build_result,
    classify,
    transient,
)
from tuneup.probe.types import ProbeResult, ProbeSpec, Status

_POLL_S = 0.02  # how often run() looks at the child, the clock and the interrupt flag

_TREE_EVERY_S = 0.5  # how often the child's descendants are recorded (a /proc scan: ms)

# Enough for torchrun's error summary (7 lines a failed rank) on a node of 8 ranks.
_STDERR_TAIL_LINES = 200

_STDOUT_LOG_LINES = 200

_READER_JOIN_S = 2.0  # a process that escaped the group may hold the pipe open; don't wait on it

__all__ = [
    "ChildRun",
    "ProbeRunner",
]


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
    stdout_log: deque[str] = field(default_factory=lambda: deque(maxlen=_STDOUT_LOG_LINES))
    stderr_tail: list[str] = field(default_factory=list)


class ProbeRunner:
    """Runs probes one at a time, each in a fresh child process group.

    Args:
        launcher: builds the child's command line and environment.
        workdir: where spec files (`NNNN-<stage>.json`) and the children's
            stderr (`NNNN-<stage>.stderr.log`) are written and kept.
        on_event: called with every event the child writes, in order,
            **from the runner's reader thread** (not the thread calling
            run()): a UI must hand the event over to its own thread. If it
            raises, the child is stopped and run() re-raises the error.
        grace_s: how long a child gets to exit after SIGTERM (which torchrun
            and srun pass on to their ranks) before the whole group, and every
            descendant recorded in other groups, is sent SIGKILL.
    """

    def __init__(
        self,
        launcher: Launcher,
        workdir: Path,
        *,
        on_event: EventHandler | None = None,
        grace_s: float = 5.0,
    ) -> None:
        if grace_s < 0:
            raise UsageError(f"grace_s must be zero or more seconds, got {grace_s}")
        self.launcher = launcher
        self.workdir = Path(workdir)
        self.on_event = on_event
        self.grace_s = grace_s
        # Sticky: once set, run() starts no new child until the caller sets it back to False.
        self.interrupted = False
        self.last_run: ChildRun | None = None
        self._count = 0
        self._callback_error: BaseException | None = None

    def interrupt(self) -> None:
        """Stop the current child (SIGTERM, then SIGKILL after grace_s) and any later run.

        Safe from another thread and from a signal handler: it only sets a
        flag that run() looks at every few milliseconds.
        """
        self.interrupted = True

    def run(
        self,
        stage: str,
        variant: dict[str, Any],
        spec: ProbeSpec,
        limit_s: float | None = None,
        launcher: Launcher | None = None,
    ) -> ProbeResult:
        """Run one probe to its end and classify it; never raises for a child's failure.

        Args:
            stage: the stage name, recorded on the result and in file names.
            variant: the knob values this probe tries, recorded as given.
            spec: what the worker runs; written to a JSON file it reads.
            limit_s: wall-clock limit; `spec.budget.limit_s` when None.
            launcher: how to start this probe (its rank count may differ from
                the last one's); the runner's own launcher when None.

        A KeyboardInterrupt in the calling thread kills the child's group at
        once and propagates; for a graceful stop, have the SIGINT handler
        call interrupt() instead.
        """
        limit = spec.budget.limit_s if limit_s is None else limit_s
        if not limit > 0:
            raise UsageError(f"probe time limit must be positive, got {limit} s; raise limit_s")
        spec_path, stderr_path = self._next_paths(stage)
        spec_path.write_text(json.dumps(spec.to_dict(), indent=2) + "\n", encoding="utf-8")
        record = ChildRun(spec_path=spec_path, stderr_path=stderr_path, limit_s=limit)
        self.last_run = record
        self._callback_error = None

        started = time.monotonic()
        if self.interrupted:
            record.ended = INTERRUPTED
        else:
            self._run_child(record, started + limit, launcher or self.launcher)
        wall_s = time.monotonic() - started

        if self._callback_error is not None:
            raise self._callback_error
        status, reason = classify(
            record.events, record.returncode, record.ended, limit, record.stderr_tail
        )
        result = build_result(stage, variant, spec, record.events, status, reason, wall_s)
        again = status is not Status.OK and transient(
            record.events, record.returncode, record.ended, record.stderr_tail
        )
        return replace(result, transient=again)

    def _next_paths(self, stage: str) -> tuple[Path, Path]:
        """Fresh file names in workdir, never overwriting an earlier probe's files.

        The spec file is created exclusively, so even two runners in one folder
        (which the folder's lock prevents) could not take the same number.
        """
        self.workdir.mkdir(parents=True, exist_ok=True)
        slug = re.sub(r"[^A-Za-z0-9_.-]+", "-", stage).strip("-.") or "probe"
        while True:
            self._count += 1
            stem = f"{self._count:04d}-{slug}"
            spec_path = self.workdir / f"{stem}.json"
            try:
                spec_path.open("x").close()
            except FileExistsError:
                continue
            return spec_path, self.workdir / f"{stem}.stderr.log"

    def _run_child(self, record: ChildRun, deadline: float, launcher: Launcher) -> None:
        """Start, watch, stop and reap one child and everything it started; fills `record`."""
        argv = launcher.command(record.spec_path)
        env = {**launcher.env(dict(os.environ)), MARKER: str(self.workdir.resolve())}
        with record.stderr_path.open("wb") as stderr_file:
            try:
                proc = subprocess.Popen(
                    guarded(argv, os.getpid()),
                    stdin=subprocess.DEVNULL,
                    stdout=subprocess.PIPE,
                    stderr=stderr_file,
                    env=env,
                    start_new_session=True,
                )
            except OSError as exc:
                # The launch itself failed (no interpreter, no permission): a crash, no raise.
                record.stderr_tail = [f"could not start the worker ({argv[0]}): {exc}"]
                return
        assert proc.stdout is not None
        reader = threading.Thread(
            target=self._read_events,
            args=(proc.stdout, record),
            name=f"probe-events-{proc.pid}",
            daemon=True,
        )
        reader.start()
        tree = Tree(proc.pid)
        try:
            record.ended = self._watch(proc, deadline, tree)
            if record.ended != EXITED:
                # torchrun and srun pass SIGTERM on to their ranks: a chance to exit cleanly.
                tree.record()
                _signal_group(proc, signal.SIGTERM)
                _wait_exit(proc, time.monotonic() + self.grace_s)
        finally:
            # Also after a clean exit: whatever the worker left in its group goes, so the
            # next probe starts with free GPU memory and no pipe is held open. On a
            # KeyboardInterrupt in this thread this is the only stop the group gets: it is
            # in a session of its own, so the terminal's SIGINT never reached it. Ranks
            # in sessions of their own are reached through the recorded tree.
            if not _has_exited(proc):
                tree.record()
            _signal_group(proc, signal.SIGKILL)
            tree.kill(signal.SIGKILL)
            record.returncode = proc.wait()
            reader.join(_READER_JOIN_S)
            if not reader.is_alive():
                proc.stdout.close()
        record.stderr_tail = _tail_lines(record.stderr_path, _STDERR_TAIL_LINES)

    def _watch(self, proc: subprocess.Popen[bytes], deadline: float, tree: Tree) -> str:
        """Wait for the child to exit, the deadline, an interrupt or a failed callback.

        Meanwhile the child's descendants are recorded now and then: once the
        child dies, its orphans are reparented and can no longer be found from it.
        """
        next_record = time.monotonic() + _TREE_EVERY_S
        while not _has_exited(proc):
            if time.monotonic() >= next_record:
                tree.record()
                next_record = time.monotonic() + _TREE_EVERY_S
            if self.interrupted:
                return INTERRUPTED
            if self._callback_error is not None:
                return CALLBACK_FAILED
            now = time.monotonic()
            if now >= deadline:
                return TIMEOUT
            # A plain sleep, not an Event: interrupt() must stay safe inside a signal handler.
            time.sleep(min(_POLL_S, deadline - now))
        return EXITED

    def _read_events(self, stream: IO[bytes], record: ChildRun) -> None:
        """Reader thread: parse events, forward them, keep other lines as a log."""
        for raw in stream:
            line = raw.decode("utf-8", errors="replace").rstrip("\r\n")
            event = parse_event(line)
            if event is None:
                if line.strip():
                    record.stdout_log.append(line)
                continue
            record.events.append(event)
            if self.on_event is not None and self._callback_error is None:
                try:
                    self.on_event(event)
                except Exception as exc:  # handed to run(), which re-raises it in its own thread
                    self._callback_error = exc


# Signals a launcher sends to the ranks still running once one has failed.


def _tail_lines(path: Path, count: int, max_bytes: int = 64 * 1024) -> list[str]:
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


def _has_exited(proc: subprocess.Popen[bytes]) -> bool:
    if proc.returncode is not None:
        return True
    if _CAN_PEEK:
        try:
            info = os.waitid(os.P_PID, proc.pid, os.WEXITED | os.WNOHANG | os.WNOWAIT)
        except ChildProcessError:
            return proc.poll() is not None
        return info is not None
    return proc.poll() is not None


def _wait_exit(proc: subprocess.Popen[bytes], deadline: float) -> None:
    while not _has_exited(proc) and time.monotonic() < deadline:
        time.sleep(_POLL_S)


def _signal_group(proc: subprocess.Popen[bytes], signum: int) -> None:
    """Signal the child's whole process group, unless the child is already reaped."""
    if proc.returncode is not None:
        return  # reaped: its pid, and so the group id, may belong to someone else now
    with contextlib.suppress(ProcessLookupError, PermissionError):  # the group is gone
        os.killpg(proc.pid, signum)
