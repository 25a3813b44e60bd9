"""The sampler: a thread that reads every GPU at a set interval into a ring buffer.

It runs in the parent process, so the probes it watches cannot disturb it
and it cannot crash them: a backend that raises is counted and sampled
again at the next tick. Readers (the probe join, the live panel) never wait
on the backend: the only lock guards the buffer.
"""

from __future__ import annotations

import threading
import time
from collections import deque
from collections.abc import Callable
from types import TracebackType

from tuneup.errors import UsageError
from tuneup.hardware.types import GpuBackend, GpuSample
from tuneup.telemetry.window import WindowStats, window_stats

MIN_INTERVAL_S = 0.1
_JOIN_S = 2.0  # a backend call stuck in the driver must not hold up stop() for longer


class Sampler:
    """Reads `backend` every `interval_s` seconds on a daemon thread.

    Args:
        backend: where readings come from; the sampler never closes it (its
            owner does).
        interval_s: seconds between rounds, at least 0.1.
        capacity: rounds kept (one round is one reading of every GPU); the
            oldest go first. The default holds 20 minutes at 0.5 s.
        clock: the readings' clock (epoch seconds), for `history`.
    """

    def __init__(
        self,
        backend: GpuBackend,
        interval_s: float = 0.5,
        capacity: int = 2400,
        clock: Callable[[], float] = time.time,
    ) -> None:
        if not interval_s >= MIN_INTERVAL_S:
            raise UsageError(
                f"GPU sampling interval {interval_s} s is too short: use {MIN_INTERVAL_S} s or more"
            )
        if capacity < 1:
            raise UsageError(f"sampler capacity must be at least 1 round, got {capacity}")
        self.backend = backend
        self.interval_s = float(interval_s)
        self.capacity = capacity
        self.clock = clock
        self.rounds = 0  # rounds recorded
        self.errors = 0  # rounds the backend failed
        self.last_error: str | None = None
        self._buffer: deque[tuple[GpuSample, ...]] = deque(maxlen=capacity)
        self._lock = threading.Lock()
        self._thread: threading.Thread | None = None
        self._stop: threading.Event | None = None

    @property
    def running(self) -> bool:
        return self._thread is not None and self._thread.is_alive()

    def start(self) -> None:
        """Start sampling (the first round at once); does nothing when already running."""
        if self.running and self._stop is not None and not self._stop.is_set():
            return
        # A fresh event per thread: a thread still stuck in the backend after an
        # earlier stop() ends on its own event and never races the new one.
        self._stop = threading.Event()
        self._thread = threading.Thread(
            target=self._loop, args=(self._stop,), name="gpu-sampler", daemon=True
        )
        self._thread.start()

    def stop(self) -> None:
        """Stop sampling; returns within the backend's current call (at most ~2 s)."""
        if self._stop is not None:
            self._stop.set()
        if self._thread is not None:
            self._thread.join(_JOIN_S)
        self._thread = None

    def sample_now(self) -> list[GpuSample]:
        """One round now, in the caller's thread, recorded like the thread's; [] if it failed."""
        try:
            samples = tuple(self.backend.sample())
        except Exception as exc:  # a failed round is data, not a crash: counted, shown, retried
            with self._lock:
                self.errors += 1
                self.last_error = f"{type(exc).__name__}: {exc}"
            return []
        with self._lock:
            self._buffer.append(samples)
            self.rounds += 1
        return list(samples)

    def latest(self) -> list[GpuSample]:
        """The most recent round, one reading per GPU; [] before the first."""
        with self._lock:
            return list(self._buffer[-1]) if self._buffer else []

    def history(self, seconds: float | None = None) -> list[GpuSample]:
        """Readings of the last `seconds` by the clock (all kept ones when None), oldest first."""
        with self._lock:
            rounds = list(self._buffer)
        samples = [s for r in rounds for s in r]
        if seconds is None:
            return samples
        since = self.clock() - seconds
        return [s for s in samples if s.time >= since]

    def window(
        self, start: float, end: float, samples_processed: float | None = None
    ) -> dict[int, WindowStats]:
        """Per-GPU statistics of the readings between `start` and `end` (see `window_stats`)."""
        with self._lock:
            rounds = list(self._buffer)
        return window_stats((s for r in rounds for s in r), start, end, samples_processed)

    def _loop(self, stop: threading.Event) -> None:
        # The schedule runs on the monotonic clock: a wall-clock step (NTP) must not
        # stall or burst the sampling.
        due = time.monotonic()
        while not stop.is_set():
            self.sample_now()
            due += self.interval_s
            now = time.monotonic()
            if due <= now:  # a slow round: skip the missed ticks and rest a full interval
                due = now + self.interval_s
            stop.wait(due - now)

    def __enter__(self) -> Sampler:
        self.start()
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.stop()
