"""Serving workers kept between probes: `python -m tuneup.worker --serve` under its guardian.

The runner (runner.py) hands it one probe at a time: the spec's path on its
stdin, then the probe's events on its stdout until ``result`` or ``error``.
It is started like a one-probe child (a session of its own, under the
guardian, `TUNEUP_PROBE_DIR` set) and stopped like one (SIGTERM to its group,
SIGKILL after a grace, every recorded descendant too). Its stderr goes to a
log of its own; each probe's share is copied into that probe's own
``NNNN-stage.stderr.log`` when it ends, so a probe's diagnostics are where
they always were.

A serving process is given up (stopped, and the next probe starts a fresh
one) whenever a probe does not end with its result: an error, a crash, a
timeout, an interrupt; save an error after which the worker found itself
sound and said so (``ErrorEvent.kept``: torch.compile's own failures).
`KeptWorker` is the runner's one kept worker and the ones it let go: a worker
replaced while idle retires in the background, its exit overlapping the next
process's start-up, never a measurement.
"""

from __future__ import annotations

import contextlib
import json
import signal
import subprocess
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import IO, Protocol, runtime_checkable

from tuneup.cluster.proctree import Tree
from tuneup.probe.childproc import ChildRun, has_exited, signal_group, start_guarded, wait_exit
from tuneup.probe.events import ErrorEvent, Event, EventHandler, ResultEvent, parse_event

_READER_JOIN_S = 2.0  # a process that escaped the group may hold the pipe open; don't wait on it

_RETIRE_GRACE_S = 1.0  # an idle serving worker exits at EOF in tenths of a second


@runtime_checkable
class ServingLauncher(Protocol):
    """A launcher whose worker can also serve several probes in one process."""

    def serve_command(self) -> list[str]:
        """The argument list of a worker that reads spec paths on stdin, one per line."""
        ...

    def env(self, base: dict[str, str]) -> dict[str, str]:
        """The worker's environment, derived from a copy of the parent's."""
        ...


class ResidentWorker:
    """One serving worker process and the probe it is running, if any.

    Args:
        argv: the serving worker's command line (before the guardian wraps it).
        env: its environment.
        key: what it may serve: probes whose process key equals this one.
        log_path: where its stderr goes (each probe's share is copied out).
        on_event: hears every event, from the reader thread; an exception it
            raises is kept in `callback_error` (the runner stops the probe).
    """

    def __init__(
        self,
        argv: list[str],
        env: dict[str, str],
        key: str,
        log_path: Path,
        on_event: EventHandler | None = None,
    ) -> None:
        self.key = key
        self.log_path = log_path
        self.on_event = on_event
        self.served = 0  # probes it finished with a result
        self.callback_error: BaseException | None = None
        self.probe_ended = threading.Event()
        self._record: ChildRun | None = None
        self._log_offset = 0
        self._lock = threading.Lock()
        self.proc: subprocess.Popen[bytes] | None = None
        self.start_error = ""  # why it could not start, when it could not
        started = start_guarded(argv, env, log_path, mode="ab", serving=True)
        if isinstance(started, str):
            self.start_error = started
            return
        self.proc = started
        self.tree = Tree(self.proc.pid)
        assert self.proc.stdout is not None
        self._reader = threading.Thread(
            target=self._read_events,
            args=(self.proc.stdout,),
            name=f"resident-events-{self.proc.pid}",
            daemon=True,
        )
        self._reader.start()

    @property
    def alive(self) -> bool:
        return self.proc is not None and not has_exited(self.proc)

    def begin(self, record: ChildRun) -> bool:
        """Hand it the probe of `record` (its spec file is written); False if it is gone."""
        if self.proc is None or self.proc.stdin is None or not self.alive:
            return False
        with self._lock:
            self._record = record
            self.probe_ended.clear()
            self.callback_error = None
        record.served_before = self.served
        self._log_offset = _size(self.log_path)
        try:
            # a JSON string a line: no path (a newline in --out, say) can split it
            self.proc.stdin.write((json.dumps(str(record.spec_path)) + "\n").encode())
            self.proc.stdin.flush()
        except OSError:  # it died between two probes
            return False
        return True

    def finish(self, record: ChildRun, serves_on: bool) -> None:
        """The probe is over: copy its stderr out; count it when the worker serves on after
        it (its result, or an error it found itself sound after)."""
        with self._lock:
            self._record = None
        if serves_on:
            self.served += 1
        _copy_from(self.log_path, self._log_offset, record.stderr_path)

    def stop(self, grace_s: float, *, gently: bool = True) -> int | None:
        """End the process and everything below it; its exit status (None: never started).

        Gently: stdin is closed (a serving worker exits at EOF) before any signal.
        """
        proc = self.proc
        if proc is None:
            return None
        try:
            if gently and proc.stdin is not None and not has_exited(proc):
                with contextlib.suppress(OSError):
                    proc.stdin.close()
                wait_exit(proc, time.monotonic() + grace_s)
            if not has_exited(proc):
                self.tree.record()
                signal_group(proc, signal.SIGTERM)
                wait_exit(proc, time.monotonic() + grace_s)
        finally:
            if not has_exited(proc):
                self.tree.record()
            signal_group(proc, signal.SIGKILL)
            self.tree.kill(signal.SIGKILL)
            code = proc.wait()
            self._reader.join(_READER_JOIN_S)
            if not self._reader.is_alive() and proc.stdout is not None:
                proc.stdout.close()
            if proc.stdin is not None and not proc.stdin.closed:
                with contextlib.suppress(OSError):
                    proc.stdin.close()
        return code

    def _read_events(self, stream: IO[bytes]) -> None:
        """Reader thread: each event goes to the probe under way and to on_event."""
        for raw in stream:
            line = raw.decode("utf-8", errors="replace").rstrip("\r\n")
            event = parse_event(line)
            with self._lock:
                record = self._record
            if record is None:
                continue  # between probes nothing is expected; a stray line is dropped
            if event is None:
                if line.strip():
                    record.stdout_log.append(line)
                continue
            record.events.append(event)
            self._hear(event)
            if isinstance(event, (ResultEvent, ErrorEvent)):
                self.probe_ended.set()

    def _hear(self, event: Event) -> None:
        if self.on_event is None or self.callback_error is not None:
            return
        try:
            self.on_event(event)
        except Exception as exc:  # handed to the runner, which re-raises it in its own thread
            self.callback_error = exc


def _size(path: Path) -> int:
    try:
        return path.stat().st_size
    except OSError:
        return 0


def _copy_from(source: Path, offset: int, target: Path) -> None:
    """The bytes of `source` from `offset` on, written to `target`."""
    try:
        with source.open("rb") as src, target.open("wb") as dst:
            src.seek(offset)
            while chunk := src.read(1 << 16):
                dst.write(chunk)
    except OSError:
        pass


class KeptWorker:
    """The one serving worker a runner keeps between probes, and the ones it let go.

    Args:
        start: the argument list and environment of a new serving worker (asked at
            each start, so it follows the runner's launcher of the moment).
        on_event: what every worker's events are handed to.
        grace_s: how long a worker stopped for good gets to exit before SIGKILL.
    """

    def __init__(
        self,
        start: Callable[[], tuple[list[str], dict[str, str]]],
        on_event: EventHandler | None,
        grace_s: float,
    ) -> None:
        self.start = start
        self.on_event = on_event
        self.grace_s = grace_s
        self.worker: ResidentWorker | None = None
        self._retiring: list[threading.Thread] = []

    def for_key(self, key: str, record: ChildRun) -> ResidentWorker:
        """The kept worker when it serves `key` and lives; else a new one (the old retires)."""
        kept = self.worker
        if kept is not None and kept.key == key and kept.alive:
            return kept
        self.retire()
        log = record.stderr_path.with_name(record.spec_path.stem + ".serving.stderr.log")
        argv, env = self.start()
        self.worker = ResidentWorker(argv, env, key, log, on_event=self.on_event)
        return self.worker

    def forget(self) -> None:
        """The kept worker is being stopped by its caller (its probe failed)."""
        self.worker = None

    def retire(self) -> None:
        """Let the idle kept worker go in the background: at the end of its stdin it exits
        on its own; past a short grace it is stopped like any other."""
        worker, self.worker = self.worker, None
        if worker is None:
            return
        retiring = threading.Thread(
            target=worker.stop, args=(_RETIRE_GRACE_S,), name="retire-worker", daemon=True
        )
        retiring.start()
        self._retiring = [t for t in self._retiring if t.is_alive()] + [retiring]

    def close(self) -> None:
        """Stop the kept worker, and wait for the ones retired before it to be gone."""
        worker, self.worker = self.worker, None
        if worker is not None:
            worker.stop(self.grace_s)
        for retiring in self._retiring:
            retiring.join()
        self._retiring.clear()
