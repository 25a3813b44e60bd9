"""One probe session run on a thread, heard through Textual messages.

The driver is the session's Reporter: everything the engine reports (and the
worker's event stream, through an `EventRelay`) is forwarded to `post`, which
a screen points at its thread-safe `post_message`. Widgets never see the
thread; pause, skip and stop go to the engine's SessionControl.
"""

from __future__ import annotations

import threading
import traceback
from collections.abc import Callable
from typing import Any

from textual.message import Message

from tuneup.errors import UsageError
from tuneup.probe.events import Event, EventHandler, StartEvent
from tuneup.probe.types import ProbeResult
from tuneup.tuning.results.summary import Summary
from tuneup.tuning.search.search_records import SearchOutcome
from tuneup.tuning.session.control import SessionInterrupted
from tuneup.tuning.session.probe_session import ProbeSession

Post = Callable[[Message], Any]


class EventRelay:
    """A worker `on_event` callback built before the driver exists (the backend comes first).

    Pass it as `WorkerBackend(on_event=relay)` and to `SessionDriver(relay=relay)`.
    """

    def __init__(self) -> None:
        self.target: EventHandler | None = None

    def __call__(self, event: Event) -> None:
        if self.target is not None:
            self.target(event)


class SessionDriver:
    """Runs one ProbeSession (built by the caller) and forwards what it hears to `post`.

    Made first, so the session is built with it as its reporter, then `attach`ed: the
    session is never rewired. `relay`: the EventRelay given to the backend as `on_event`.
    """

    class Started(Message):
        """The session began: its info (session.json content) and ~how many probes."""

        def __init__(self, info: dict[str, Any], total: int) -> None:
            super().__init__()
            self.info = info
            self.total = total

    class ProbeStarted(Message):
        """A probe is about to run."""

        def __init__(self, stage: str, label: str) -> None:
            super().__init__()
            self.stage = stage
            self.label = label

    class ProbeDone(Message):
        """A probe finished (or was taken from the journal: `reused`)."""

        def __init__(self, result: ProbeResult, reused: bool) -> None:
            super().__init__()
            self.result = result
            self.reused = reused

    class TotalChanged(Message):
        """The expected number of probes changed (~how many now; exact once it ended)."""

        def __init__(self, total: int) -> None:
            super().__init__()
            self.total = total

    class TimeLeft(Message):
        """The ladder's expected time left, and what it rests on in words."""

        def __init__(self, seconds: float, basis: str) -> None:
            super().__init__()
            self.seconds = seconds
            self.basis = basis

    class Note(Message):
        """Something the session did on its own that the user must know."""

        def __init__(self, line: str) -> None:
            super().__init__()
            self.line = line

    class WorkerEvent(Message):
        """One event of the running probe's worker (start, warmup, trial, loss, ...)."""

        def __init__(self, event: Event) -> None:
            super().__init__()
            self.event = event

    class Finished(Message):
        """The session ended: with an outcome, interrupted, or failed (`error`)."""

        def __init__(
            self,
            outcome: SearchOutcome | None,
            summary: Summary | None,
            interrupted: bool,
            error: str | None,
        ) -> None:
            super().__init__()
            self.outcome = outcome
            self.summary = summary
            self.interrupted = interrupted
            self.error = error

    def __init__(self, *, relay: EventRelay | None = None) -> None:
        self._session: ProbeSession | None = None
        self.on_end: Callable[[], None] | None = None  # run() ended: the lock goes back
        self.resuming = False
        if relay is not None:
            relay.target = self.event
        self.post: Post = lambda message: None
        self.outcome: SearchOutcome | None = None
        self.summary: Summary | None = None
        self.error: str | None = None
        self.interrupted = False
        self.started = threading.Event()
        self.finished = threading.Event()

    def attach(
        self,
        session: ProbeSession,
        *,
        resume: bool = False,
        on_end: Callable[[], None] | None = None,
    ) -> SessionDriver:
        """The session this driver runs, built with it as its reporter (never rewired)."""
        if session.reporter is not self:
            raise ValueError("build the session with this driver as its reporter")
        self._session, self.resuming, self.on_end = session, resume, on_end
        return self

    @property
    def session(self) -> ProbeSession:
        if self._session is None:
            raise RuntimeError("no session attached: build one with reporter=driver, attach it")
        return self._session

    # What a front end asks, from any thread.

    @property
    def running(self) -> bool:
        return self.started.is_set() and not self.finished.is_set()

    @property
    def paused(self) -> bool:
        return self.session.control.paused

    def pause(self) -> None:
        self.session.control.pause()

    def resume(self) -> None:
        self.session.control.resume()

    def skip_stage(self) -> None:
        self.session.control.skip_stage()

    def stop(self) -> None:
        """End after the running probe, which is interrupted when the backend can be."""
        self.session.control.stop()
        self.session.backend.interrupt()

    def wait(self, timeout: float | None = None) -> bool:
        """Block until run() has returned; False on timeout."""
        return self.finished.wait(timeout)

    def run(self) -> SearchOutcome | None:
        """Run the session to its end (blocking: call it from a thread worker).

        Returns:
            The outcome, or None when the session was stopped or failed (see `error`).
        """
        self.started.set()
        try:
            self.session.start(resume=self.resuming)
            self.outcome = self.session.run()
            self.summary = self.session.results.summary()
        except SessionInterrupted:
            self.interrupted = True
        except UsageError as exc:
            self.error = str(exc)
        except Exception as exc:  # the screen shows it; the thread must not die silently
            self.error = f"{type(exc).__name__}: {exc}\n{traceback.format_exc()}"
        finally:
            if self.on_end is not None:
                self.on_end()
            self.finished.set()
            self.post(self.Finished(self.outcome, self.summary, self.interrupted, self.error))
        return self.outcome

    # The Reporter protocol, called on the session's thread.

    def session_start(self, info: dict[str, Any], total: int) -> None:
        self.post(self.Started(info, total))

    def probe_start(self, stage: str, label: str) -> None:
        self.post(self.ProbeStarted(stage, label))

    def probe_done(self, result: ProbeResult, reused: bool) -> None:
        self.post(self.ProbeDone(result, reused))

    def total_changed(self, total: int) -> None:
        self.post(self.TotalChanged(total))

    def time_left(self, seconds: float, basis: str) -> None:
        self.post(self.TimeLeft(seconds, basis))

    def note(self, line: str) -> None:
        self.post(self.Note(line))

    def close(self) -> None:
        """The app's screens end with the session's messages: nothing to give back."""

    def event(self, event: Event) -> None:
        """The worker's events (called from the runner's reader thread); a compile cache the
        worker mended is said as the session's notes are."""
        if isinstance(event, StartEvent) and event.mended:
            self.note(event.mended)
        self.post(self.WorkerEvent(event))
