"""How a tuneup run ends when its allocation does: SIGINT, SIGTERM and SIGHUP alike.

SLURM ends a job at its time limit with SIGTERM (SIGKILL follows after its
KillWait, 30 s by default); a closed terminal sends SIGHUP; Ctrl-C sends
SIGINT. Once a session runs (`arm`), the first of them stops the running
probe and the ladder gently: what finished is journaled, the resume command
is printed, and the exit status is 128 + the signal (130, 143, 129). A
second one, or one before there is anything to stop gently, aborts at once
(`Stopped`, which unwinds like KeyboardInterrupt).
"""

from __future__ import annotations

import contextlib
import os
import signal
import sys
import threading
from collections.abc import Callable
from types import FrameType, TracebackType
from typing import IO, Any

STOP_SIGNALS = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)


class Stopped(BaseException):
    """A stop signal arrived where nothing could be stopped gently."""

    def __init__(self, signum: int) -> None:
        super().__init__(f"stopped by {signal_name(signum)}")
        self.signum = signum

    @property
    def exit_code(self) -> int:
        return 128 + self.signum


def signal_name(signum: int) -> str:
    try:
        return signal.Signals(signum).name
    except ValueError:
        return f"signal {signum}"


class StopSignals:
    """Handles the stop signals while in a `with` block (main thread only; a no-op elsewhere).

    Args:
        stream: where the one-line notice goes (stderr).
        hard_abort: a second signal ends the process at once (os._exit) instead of
            raising: where an event loop would swallow the exception (the app).
    """

    def __init__(self, stream: IO[str] | None = None, *, hard_abort: bool = False) -> None:
        self.stream = stream
        self.hard_abort = hard_abort
        self.signum: int | None = None
        self._on_stop: Callable[[], None] | None = None
        self._previous: dict[int, Any] = {}

    @property
    def requested(self) -> bool:
        return self.signum is not None

    @property
    def exit_code(self) -> int:
        return 128 + (self.signum or signal.SIGINT)

    def arm(self, on_stop: Callable[[], None]) -> None:
        """From now on the first signal calls `on_stop` (flags only) instead of aborting."""
        self._on_stop = on_stop

    def __enter__(self) -> StopSignals:
        if threading.current_thread() is threading.main_thread():
            for signum in STOP_SIGNALS:
                self._previous[signum] = signal.signal(signum, self._handle)
        return self

    def __exit__(
        self,
        kind: type[BaseException] | None,
        value: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        for signum, handler in self._previous.items():
            signal.signal(signum, handler)
        self._previous = {}

    def _handle(self, signum: int, frame: FrameType | None) -> None:
        first = self.signum is None
        self.signum = self.signum or signum
        if not first and self.hard_abort:
            os._exit(128 + signum)
        if not first or self._on_stop is None:
            raise Stopped(signum)
        self._say(
            f"\ntuneup: {signal_name(signum)}: stopping the current probe "
            "(a second signal aborts at once)"
        )
        self._on_stop()

    def _say(self, text: str) -> None:
        with contextlib.suppress(OSError, ValueError):  # SIGHUP: the terminal may be gone
            print(text, file=self.stream or sys.stderr, flush=True)
