"""What a session measures with: the one typed seam between the search and a trainer.

A `ProbeBackend` runs one probe per call and answers what the session asks of it
between probes: its own per-probe limit, stop the running probe, give back what
it keeps, follow a probe replayed from the journal. tuneup's backends subclass
it. A trainer plugin may still hand over a plain callable, or an object with
some of those methods; `as_backend` makes either a ProbeBackend once, when the
session is built, so nothing later probes for a method.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, Protocol, runtime_checkable

from tuneup.probe.types import Candidate, ProbeResult

Backend = Callable[[str, Candidate, dict[str, Any]], ProbeResult]
"""Runs one probe: `backend(stage, candidate, values) -> ProbeResult`."""


class ProbeBackend:
    """One probe per call; the rest does nothing unless a backend overrides it."""

    @property
    def limit_s(self) -> float | None:
        """Its own per-probe wall-clock limit, where it has one (the command trainer's
        `command.limit_s`); None: the preset's budget decides."""
        return None

    def __call__(self, stage: str, candidate: Candidate, values: dict[str, Any]) -> ProbeResult:
        raise NotImplementedError

    def interrupt(self) -> None:
        """Stop the running probe. It only sets a flag, so a signal handler or another
        thread may call it."""

    def close(self) -> None:
        """Give back what it keeps between probes (a serving worker)."""

    def replayed(self, stage: str, candidate: Candidate, values: dict[str, Any]) -> None:
        """A probe of the journal stood in for one (a backend that keeps count follows)."""

    def confine_threads(self, threads: int) -> bool:
        """Run the later probes whose config leaves the thread count to torch on `threads`,
        each result saying so (confine.py); False: it cannot, and nothing changes."""
        return False


@runtime_checkable
class _Interrupts(Protocol):
    def interrupt(self) -> None: ...


@runtime_checkable
class _Closes(Protocol):
    def close(self) -> None: ...


@runtime_checkable
class _Replays(Protocol):
    def replayed(self, stage: str, candidate: Candidate, values: dict[str, Any]) -> None: ...


@runtime_checkable
class _Confines(Protocol):
    def confine_threads(self, threads: int) -> bool: ...


class _Wrapped(ProbeBackend):
    """A plugin's backend that is not a ProbeBackend: what it offers, typed once."""

    def __init__(self, run: Backend) -> None:
        self._run = run
        self._interrupts = run if isinstance(run, _Interrupts) else None
        self._closes = run if isinstance(run, _Closes) else None
        self._replays = run if isinstance(run, _Replays) else None
        self._confines = run if isinstance(run, _Confines) else None

    def __call__(self, stage: str, candidate: Candidate, values: dict[str, Any]) -> ProbeResult:
        return self._run(stage, candidate, values)

    def interrupt(self) -> None:
        if self._interrupts is not None:
            self._interrupts.interrupt()

    def close(self) -> None:
        if self._closes is not None:
            self._closes.close()

    def replayed(self, stage: str, candidate: Candidate, values: dict[str, Any]) -> None:
        if self._replays is not None:
            self._replays.replayed(stage, candidate, values)

    def confine_threads(self, threads: int) -> bool:
        return self._confines is not None and bool(self._confines.confine_threads(threads))


def as_backend(backend: Backend | ProbeBackend) -> ProbeBackend:
    """`backend` as a ProbeBackend (itself, or wrapped once)."""
    if isinstance(backend, ProbeBackend):
        return backend
    return _Wrapped(backend)
