"""What a front end and a running session say to each other: the stops a session ends
with, the controls a front end may use from any thread, and what a reporter hears."""

from __future__ import annotations

import threading
from dataclasses import dataclass
from typing import Any, Protocol

from tuneup.probe.events import Event
from tuneup.probe.types import ProbeResult


class SessionInterrupted(Exception):
    """The user stopped the session; everything finished so far is journaled."""


class OutOfTime(SessionInterrupted):
    """The allocation (or the time budget) ends before the next probe could finish: it was
    not started."""

    def __init__(
        self, left_s: float, need_s: float, measured: bool, where: str = "in the allocation"
    ) -> None:
        self.left_s = left_s
        self.need_s = need_s
        self.where = where
        how = "the slowest probe so far, with a margin" if measured else "its time limit"
        super().__init__(
            f"{left_s:.0f} s left {where}, and the next probe may take "
            f"{need_s:.0f} s ({how}): not started"
        )


class DataGone(SessionInterrupted):
    """A data file the probes read went away mid-ladder and tuneup cannot make it again:
    the ladder stops (a partial summary) rather than fail every later probe."""


@dataclass
class StopRequest:
    """A stop asked from a signal handler: plain attributes, no lock a handler could wait on
    (`SessionControl.stop` is the app's, from a thread). `why` goes into the partial
    summary."""

    asked: bool = False
    why: str = ""

    def ask(self, why: str) -> None:
        self.why = why
        self.asked = True


class SessionControl:
    """What a front end may ask of a running session, from any thread.

    `pause()` holds the ladder before its next probe (the running one finishes),
    `skip_stage()` drops the rest of the current stage, `stop()` ends the session
    after the running probe is interrupted (the caller also interrupts the
    backend); finished probes stay journaled and `--resume` continues.
    """

    def __init__(self) -> None:
        self._running = threading.Event()
        self._running.set()
        self._stop = threading.Event()
        self._skip_stage: str | None = None
        self.current_stage: str | None = None

    @property
    def paused(self) -> bool:
        return not self._running.is_set()

    @property
    def stopped(self) -> bool:
        return self._stop.is_set()

    def pause(self) -> None:
        self._running.clear()

    def resume(self) -> None:
        self._running.set()

    def stop(self) -> None:
        self._stop.set()
        self._running.set()  # wake a paused ladder so it can end

    def skip_stage(self) -> None:
        self._skip_stage = self.current_stage

    def wait_if_paused(self) -> None:
        while not self._running.wait(timeout=0.1):
            if self._stop.is_set():
                return

    def skipping(self, stage: str) -> bool:
        return stage == self._skip_stage and stage not in ("baseline", "confirm")


class Reporter(Protocol):
    """What a front end (plain lines, rich bars, JSON, the app) hears from a session.

    Every method is called: a front end with no use for one gives it an empty body, so a
    session never asks what its reporter can do (mypy checks each front end against this).
    """

    def session_start(self, info: dict[str, Any], total: int) -> None: ...

    def probe_start(self, stage: str, label: str) -> None: ...

    def probe_done(self, result: ProbeResult, reused: bool) -> None: ...

    def total_changed(self, total: int) -> None:
        """The expected number of probes changed: re-measures and extra pairs made the
        ladder longer, quick decisions shorter, or it ended (the exact count)."""
        ...

    def time_left(self, seconds: float, basis: str) -> None:
        """The ladder's expected time left, after each probe (and at the start), and what it
        rests on in words ("measured here", or the preset's costs, a record, a guess)."""
        ...

    def note(self, line: str) -> None:
        """Something the session did on its own that the user must know (data made again,
        journaled failures measured again)."""
        ...

    def event(self, event: Event) -> None:
        """One event of the running probe's worker, from the runner's reader thread (the
        backend's `on_event`)."""
        ...

    def close(self) -> None:
        """The session is over: give back what the front end holds (a live display)."""
        ...


class SilentReporter:
    """Hears nothing: for tests and `--json`."""

    def session_start(self, info: dict[str, Any], total: int) -> None:
        pass

    def total_changed(self, total: int) -> None:
        pass

    def time_left(self, seconds: float, basis: str) -> None:
        pass

    def probe_start(self, stage: str, label: str) -> None:
        pass

    def probe_done(self, result: ProbeResult, reused: bool) -> None:
        pass

    def note(self, line: str) -> None:
        pass

    def event(self, event: Event) -> None:
        pass

    def close(self) -> None:
        pass
