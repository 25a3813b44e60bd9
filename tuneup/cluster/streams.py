"""The process's standard streams, as a shell may hand them over: closed, or a pipe whose
reader goes away (`| head`).

A closed stream (`0<&-`, `2>&-`) is opened on /dev/null before any work, so no file
tuneup opens takes its number and nothing calls a method of None. Diagnostics (stderr)
that cannot be written any more are dropped, and the stream points at /dev/null from
then on: a ladder never stops because its progress lines have no reader. Results
(stdout) whose reader went away end the command quietly with PIPE_EXIT, as SIGPIPE would
end a C tool: what a ladder measured is journaled before its results are printed.
"""

from __future__ import annotations

import contextlib
import errno
import os
import signal
import sys
from collections.abc import Iterator
from typing import Any, TextIO

PIPE_EXIT = 128 + signal.SIGPIPE  # 141: the status a shell shows for a reader gone
_NAMES = ("stdin", "stdout", "stderr")


class GuardedStream:
    """A text stream whose failures are the caller's choice: `drop` swallows any OSError
    (diagnostics), otherwise only a reader gone (EPIPE) is noted before it is raised.

    Either way the descriptor is pointed at /dev/null once the stream failed, so the
    interpreter's last flush and the processes started later do not meet it again.
    """

    def __init__(self, inner: TextIO, *, drop: bool) -> None:
        self.inner = inner
        self.drop = drop
        self.gone = False

    def write(self, text: str) -> int:
        if self.gone and self.drop:
            return len(text)
        try:
            return self.inner.write(text)
        except OSError as exc:
            return self._failed(exc, len(text))

    def flush(self) -> None:
        if self.gone and self.drop:
            return
        try:
            self.inner.flush()
        except OSError as exc:
            self._failed(exc, 0)

    def _failed(self, exc: OSError, size: int) -> int:
        if not self.drop and exc.errno != errno.EPIPE:
            raise exc
        self.gone = True
        _to_null(self.inner)
        if self.drop:
            return size
        raise exc

    def __getattr__(self, name: str) -> Any:
        return getattr(self.inner, name)


def _to_null(stream: TextIO) -> None:
    """Point the stream's descriptor at /dev/null (a stream without one: nothing to do)."""
    with contextlib.suppress(OSError, ValueError, AttributeError):
        fd = stream.fileno()
        null = os.open(os.devnull, os.O_WRONLY)
        try:
            os.dup2(null, fd)
        finally:
            os.close(null)


def open_closed_streams() -> None:
    """Open /dev/null on each standard descriptor that is closed, and give Python a stream
    for each it found missing at start-up (None)."""
    for fd in (0, 1, 2):
        try:
            os.fstat(fd)
        except OSError:
            null = os.open(os.devnull, os.O_RDWR)  # the lowest free number: often fd itself
            if null != fd:
                os.dup2(null, fd)
                os.close(null)
    for fd, name in enumerate(_NAMES):
        if getattr(sys, name) is None:
            mode = "r" if fd == 0 else "w"
            setattr(sys, name, open(fd, mode, encoding="utf-8", closefd=False))  # noqa: SIM115


@contextlib.contextmanager
def guarded_streams() -> Iterator[GuardedStream]:
    """Within: stderr drops what cannot be written; stdout notes a reader gone. Yields the
    guarded stdout (its `gone` says whether its reader went away)."""
    open_closed_streams()
    out, err = sys.stdout, sys.stderr
    guarded = GuardedStream(out, drop=False)
    sys.stdout = guarded  # type: ignore[assignment]
    sys.stderr = GuardedStream(err, drop=True)  # type: ignore[assignment]
    try:
        yield guarded
    finally:
        sys.stdout, sys.stderr = out, err
