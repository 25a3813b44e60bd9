"""The monitor's polling thread: it reads the feeds and posts what is new, touching no widget.

The data sources are passed in (a `Sampler` over any `GpuBackend`, and
optionally a tail of training metrics), so a slow driver call or a file on a
busy filesystem never freezes the screen, and tests swap in scripted sources.
"""

from __future__ import annotations

import threading
from typing import Any, Protocol

from textual.message import Message
from textual.message_pump import MessagePump

from tuneup.hardware.types import GpuBackend, GpuDevice, GpuSample


class SampleFeed(Protocol):
    """What the monitor reads GPUs through: `tuneup.telemetry.sampler.Sampler` fits."""

    backend: GpuBackend
    interval_s: float

    def start(self) -> None: ...

    def stop(self) -> None: ...

    def history(self, seconds: float | None = None) -> list[GpuSample]: ...


class TrainFeed(Protocol):
    """New JSON-lines records of a training run since the last call."""

    def read_new(self) -> list[dict[str, Any]]: ...


class Poller:
    """A thread that reads the feeds and posts what is new to `target`; it touches no widget.

    Pausing stops the sampler too, so a replayed trace waits where it was and
    a recording has a gap where the screen was frozen.
    """

    class Devices(Message):
        """The GPUs found, or why none can be read (`reason`)."""

        def __init__(self, devices: list[GpuDevice], reason: str | None) -> None:
            super().__init__()
            self.devices = devices
            self.reason = reason

    class Samples(Message):
        """A new round of readings, one per GPU."""

        def __init__(self, samples: list[GpuSample]) -> None:
            super().__init__()
            self.samples = samples

    class Train(Message):
        """New training metrics records."""

        def __init__(self, records: list[dict[str, Any]]) -> None:
            super().__init__()
            self.records = records

    class Failed(Message):
        """A feed raised: shown in the header, and polling goes on."""

        def __init__(self, error: str) -> None:
            super().__init__()
            self.error = error

    def __init__(
        self,
        target: MessagePump,
        feed: SampleFeed,
        *,
        train_feed: TrainFeed | None = None,
        interval_s: float = 1.0,
    ) -> None:
        self.target = target
        self.feed = feed
        self.train_feed = train_feed
        self.interval_s = interval_s
        self.paused = False
        self._changed = False
        self._error: str | None = None
        self._lock = threading.Lock()
        self._wake = threading.Event()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def start(self) -> None:
        self._thread = threading.Thread(target=self._run, name="monitor-poller", daemon=True)
        self._thread.start()

    def stop(self, timeout: float = 3.0) -> None:
        self._stop.set()
        self._wake.set()
        if self._thread is not None:
            self._thread.join(timeout)

    def set_interval(self, seconds: float) -> None:
        with self._lock:
            self.interval_s = seconds
            self._changed = True
        self._wake.set()

    def set_paused(self, paused: bool) -> None:
        with self._lock:
            self.paused = paused
            self._changed = True
        self._wake.set()

    def _tick_s(self) -> float:
        # Poll twice per sampling interval so a reading reaches the screen
        # within half an interval of being taken, but at least twice a second.
        return max(0.05, min(self.interval_s / 2, 0.5))

    def _run(self) -> None:
        reading = self._open()
        seen: dict[int, float] = {}  # each GPU's newest reading posted
        sampling = reading
        while not self._stop.is_set():
            with self._lock:
                changed, self._changed = self._changed, False
                paused, interval = self.paused, self.interval_s
            if changed and reading:
                self.feed.interval_s = interval
                # Restart so a new interval applies now, not after the old one ends.
                if sampling:
                    self.feed.stop()
                sampling = not paused
                if sampling:
                    self.feed.start()
            if not paused:
                self._poll(reading, seen)
            self._wake.wait(self._tick_s())
            self._wake.clear()
        if sampling:
            self.feed.stop()

    def _open(self) -> bool:
        backend = self.feed.backend
        try:
            ok, why = backend.available()
            devices = backend.devices() if ok else []
        except Exception as exc:  # a broken driver is a state to show, not a crash
            ok, why, devices = False, f"{type(exc).__name__}: {exc}", []
        if ok and not devices:
            ok, why = False, "none visible to this process"
        self.target.post_message(Poller.Devices(devices, None if ok else why))
        if ok:
            self.feed.start()
        return ok

    def _poll(self, reading: bool, seen: dict[int, float]) -> None:
        # The sampler keeps a failing backend's error instead of raising it.
        error = getattr(self.feed, "last_error", None)
        if error and error != self._error:
            self.target.post_message(Poller.Failed(error))
        self._error = error
        try:
            if reading:
                # Every reading newer than the last posted, not just the newest
                # round: a late tick must not drop a round from the charts.
                samples = [
                    s for s in self.feed.history() if s.time > seen.get(s.index, float("-inf"))
                ]
                if samples:
                    for s in samples:
                        seen[s.index] = max(s.time, seen.get(s.index, s.time))
                    self.target.post_message(Poller.Samples(samples))
            if self.train_feed is not None:
                records = self.train_feed.read_new()
                if records:
                    self.target.post_message(Poller.Train(records))
        except Exception as exc:  # shown in the header; the next tick tries again
            self.target.post_message(Poller.Failed(f"{type(exc).__name__}: {exc}"))
