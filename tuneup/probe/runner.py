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

A probe the caller marks reusable (`reuse`: its process key) runs in a
serving worker kept from the probe before when that one had the same key
and ended with its result (tuneup.probe.resident); any other probe, and every
probe after a failure, starts a fresh process, and a one-probe child never
runs beside a serving one.

Classification of an ended child into a status and one human reason is
pure (`classify`, `build_result`); process handling lives in `ProbeRunner`.
"""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import threading
import time
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path
from typing import IO, Any

from tuneup.cluster.launch import Launcher
from tuneup.cluster.leftovers import MARKER
from tuneup.cluster.proctree import Tree
from tuneup.errors import UsageError
from tuneup.probe.childproc import (
    POLL_S,
    ChildRun,
    has_exited,
    signal_group,
    start_guarded,
    tail_lines,
    wait_exit,
)
from tuneup.probe.events import ErrorEvent, EventHandler, ResultEvent, parse_event
from tuneup.probe.outcome import (
    CALLBACK_FAILED,
    EXITED,
    INTERRUPTED,
    TIMEOUT,
    build_result,
    classify,
    oom_kill_count,
    transient,
)
from tuneup.probe.plan import ProbeSpec
from tuneup.probe.resident import KeptWorker, ResidentWorker, ServingLauncher
from tuneup.probe.types import ProbeResult, Status

_TREE_EVERY_S = 0.5  # how often the child's descendants are recorded (a /proc scan: ms)

# Enough for torchrun's error summary (7 lines a failed rank) on a node of 8 ranks.
_STDERR_TAIL_LINES = 200

_READER_JOIN_S = 2.0  # a process that escaped the group may hold the pipe open; don't wait on it

__all__ = [
    "ChildRun",
    "ProbeRunner",
]


class ProbeRunner:
    """Runs probes one at a time, each in a child process group: a fresh one, or a serving
    worker kept from the probe before (`run`'s `reuse`).

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
        self._kept = KeptWorker(self._serving_start, on_event, grace_s)

    def interrupt(self) -> None:
        """Stop the current child (SIGTERM, then SIGKILL after grace_s) and any later run.

        Safe from another thread and from a signal handler: it only sets a
        flag that run() looks at every few milliseconds.
        """
        self.interrupted = True

    def close(self) -> None:
        """Stop the serving worker, if one is kept (it exits at the end of its stdin), and
        wait for the ones let go before it to be gone."""
        self._kept.close()

    def _retire(self) -> None:
        self._kept.retire()

    def _serving_start(self) -> tuple[list[str], dict[str, str]]:
        """A new serving worker's command and environment, from the launcher of the moment."""
        launcher = self.launcher
        assert isinstance(launcher, ServingLauncher)
        return launcher.serve_command(), self._child_env(launcher)

    def run(
        self,
        stage: str,
        variant: dict[str, Any],
        spec: ProbeSpec,
        limit_s: float | None = None,
        launcher: Launcher | None = None,
        *,
        reuse: str | None = None,
        fresh: bool = False,
    ) -> ProbeResult:
        """Run one probe to its end and classify it; never raises for a child's failure.

        Args:
            stage: the stage name, recorded on the result and in file names.
            variant: the knob values this probe tries, recorded as given.
            spec: what the worker runs; written to a JSON file it reads.
            limit_s: wall-clock limit; `spec.plan.limit_s` when None.
            launcher: how to start this probe (its rank count may differ from
                the last one's); the runner's own launcher when None.
            reuse: the probe's process key: it may run in the serving worker
                kept from a probe of the same key (one is started when none
                is kept). None: a process of its own. Only the runner's own
                launcher serves, and only if it can (`ServingLauncher`).
            fresh: with `reuse`, start a new serving worker for this probe even
                when one of its key is kept: nothing runs before it in its
                process, while later probes of its key may follow it there.

        A KeyboardInterrupt in the calling thread kills the child's group at
        once and propagates; for a graceful stop, have the SIGINT handler
        call interrupt() instead.
        """
        limit = spec.plan.limit_s if limit_s is None else limit_s
        if not limit > 0:
            raise UsageError(f"probe time limit must be positive, got {limit} s; raise limit_s")
        spec_path, stderr_path = self._next_paths(stage)
        spec_path.write_text(json.dumps(spec.to_dict(), indent=2) + "\n", encoding="utf-8")
        record = ChildRun(
            spec_path=spec_path,
            stderr_path=stderr_path,
            limit_s=limit,
            oom_kills_before=oom_kill_count(),
        )
        self.last_run = record
        self._callback_error = None

        started = time.monotonic()
        serving = launcher is None and isinstance(self.launcher, ServingLauncher)
        if self.interrupted:
            record.ended = INTERRUPTED
        elif reuse is not None and serving:
            if fresh:
                self._retire()
            self._run_served(record, started + limit, reuse)
        else:
            self._retire()  # a probe of its own never runs beside a serving worker
            self._run_child(record, started + limit, launcher or self.launcher)
        wall_s = time.monotonic() - started

        if self._callback_error is not None:
            raise self._callback_error
        status, reason = classify(
            record.events,
            record.returncode,
            record.ended,
            limit,
            record.stderr_tail,
            record.oom_kills_before,
        )
        result = build_result(stage, variant, spec, record.events, status, reason, wall_s)
        again = status is not Status.OK and transient(
            record.events, record.returncode, record.ended, record.stderr_tail
        )
        return replace(result, transient=again, served_before=record.served_before)

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

    def _child_env(self, launcher: Launcher) -> dict[str, str]:
        return {**launcher.env(dict(os.environ)), MARKER: str(self.workdir.resolve())}

    def _run_child(self, record: ChildRun, deadline: float, launcher: Launcher) -> None:
        """Start, watch, stop and reap one child and everything it started; fills `record`."""
        argv = launcher.command(record.spec_path)
        env = self._child_env(launcher)
        proc = start_guarded(argv, env, record.stderr_path, mode="wb", serving=False)
        if isinstance(proc, str):  # the launch itself failed: a crash, no raise
            record.stderr_tail = [proc]
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
            record.ended = self._watch(
                proc, deadline, tree, failed=lambda: self._callback_error is not None
            )
            if record.ended != EXITED:
                # torchrun and srun pass SIGTERM on to their ranks: a chance to exit cleanly.
                tree.record()
                signal_group(proc, signal.SIGTERM)
                wait_exit(proc, time.monotonic() + self.grace_s)
        finally:
            # Also after a clean exit: whatever the worker left in its group goes, so the
            # next probe starts with free GPU memory and no pipe is held open. On a
            # KeyboardInterrupt in this thread this is the only stop the group gets: it is
            # in a session of its own, so the terminal's SIGINT never reached it. Ranks
            # in sessions of their own are reached through the recorded tree.
            if not has_exited(proc):
                tree.record()
            signal_group(proc, signal.SIGKILL)
            tree.kill(signal.SIGKILL)
            record.returncode = proc.wait()
            reader.join(_READER_JOIN_S)
            if not reader.is_alive():
                proc.stdout.close()
        record.stderr_tail = tail_lines(record.stderr_path, _STDERR_TAIL_LINES)

    def _run_served(self, record: ChildRun, deadline: float, key: str) -> None:
        """Run one probe in a serving worker; give the worker up unless it ended with its result.

        A kept worker found gone before this probe began (it died between two probes,
        after the last one's result) is no failure of this probe: the probe runs in a
        fresh worker instead, once.
        """
        kept = self._kept
        for attempt in (1, 2):
            resident = kept.for_key(key, record)
            if resident.proc is None:
                record.stderr_tail = [resident.start_error]
                kept.forget()
                return
            began = resident.begin(record)
            if began and (self._serve(record, deadline, resident) or attempt == 2):
                break
            if not began:
                kept.close()
                if attempt == 2:
                    record.stderr_tail = ["the serving worker is gone"]
                    return
            _forget_attempt(record)
        record.stderr_tail = tail_lines(record.stderr_path, _STDERR_TAIL_LINES)

    def _serve(self, record: ChildRun, deadline: float, resident: ResidentWorker) -> bool:
        """Watch one probe in `resident` to its end; False when the worker was gone before
        the probe began (a reused one that ended without a single event)."""
        proc = resident.proc
        assert proc is not None
        done = False
        stop_now = False
        try:
            record.ended = self._watch(
                proc,
                deadline,
                resident.tree,
                ended=resident.probe_ended.is_set,
                failed=lambda: resident.callback_error is not None,
            )
            self._callback_error = resident.callback_error
            # Its share of the process ended with its result, or with an error after which
            # the worker found itself sound (ErrorEvent.kept): either way it serves on.
            done = (
                record.ended == EXITED
                and any(
                    isinstance(e, ResultEvent) or (isinstance(e, ErrorEvent) and e.kept)
                    for e in record.events
                )
                and not has_exited(proc)
            )
        except BaseException:  # a KeyboardInterrupt in this thread: the probe goes at once
            stop_now = True
            raise
        finally:
            if done:
                record.returncode = 0
            else:
                # Anything else (an error it did not survive, a crash, a timeout, an
                # interrupt): the process goes, and with it whatever the failed probe left
                # in it. After its error event the worker exits by itself and gets the
                # grace to do so; one still in its probe is signalled at once.
                self._kept.forget()
                ended_itself = record.ended == EXITED and resident.probe_ended.is_set()
                grace = 0.0 if stop_now else self.grace_s
                record.returncode = resident.stop(grace, gently=ended_itself and not stop_now)
            resident.finish(record, done)
        # Not a word from a reused worker that ended: it was gone before the probe began
        # (any failure of the probe's own says something first: an error, its start).
        return not (record.served_before > 0 and record.ended == EXITED and not record.events)

    def _watch(
        self,
        proc: subprocess.Popen[bytes],
        deadline: float,
        tree: Tree,
        *,
        ended: Callable[[], bool] = lambda: False,
        failed: Callable[[], bool],
    ) -> str:
        """Wait for the child to exit (or `ended`), the deadline, an interrupt or a failed callback.

        Meanwhile the child's descendants are recorded now and then: once the
        child dies, its orphans are reparented and can no longer be found from it.
        """
        next_record = time.monotonic() + _TREE_EVERY_S
        while not has_exited(proc) and not ended():
            if time.monotonic() >= next_record:
                tree.record()
                next_record = time.monotonic() + _TREE_EVERY_S
            if self.interrupted:
                return INTERRUPTED
            if failed():
                return CALLBACK_FAILED
            now = time.monotonic()
            if now >= deadline:
                return TIMEOUT
            # A plain sleep, not an Event: interrupt() must stay safe inside a signal handler.
            time.sleep(min(POLL_S, deadline - now))
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


def _forget_attempt(record: ChildRun) -> None:
    """Clear what a worker that was gone left on `record`, before the probe runs again."""
    record.events.clear()
    record.stdout_log.clear()
    record.returncode = None
    record.ended = EXITED
    record.served_before = 0
