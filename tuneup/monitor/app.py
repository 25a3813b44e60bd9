"""The full-screen monitor: a panel per GPU, the processes, and an attached training run.

The data source is passed in (a `Sampler` over any `GpuBackend`, and
optionally a tail of training metrics). A polling thread reads them and
only posts messages; widgets change in the message handlers, so a slow
driver call or a file on a busy filesystem never freezes the screen.
"""

from __future__ import annotations

import threading
from collections import deque
from collections.abc import Sequence
from typing import Any, ClassVar, Protocol

from textual.app import App, ComposeResult
from textual.binding import Binding, BindingType
from textual.containers import VerticalScroll
from textual.message import Message
from textual.message_pump import MessagePump
from textual.reactive import reactive
from textual.widgets import Footer, Static

from tuneup.hardware.types import GpuBackend, GpuDevice, GpuSample
from tuneup.monitor.widgets.gpu_panel import GpuPanel
from tuneup.monitor.widgets.header import MonitorHeader
from tuneup.monitor.widgets.process_table import ProcessTable
from tuneup.monitor.widgets.readings import no_gpu_message
from tuneup.monitor.widgets.train_panel import TrainPanel

MIN_INTERVAL_S = 0.1
# The steps + and - move between; an interval given on the command line that is
# not one of them moves to the next step either way.
INTERVAL_STEPS = (0.1, 0.2, 0.5, 1.0, 2.0, 5.0, 10.0, 30.0, 60.0)
_TRAIN_RECORDS_KEPT = 20_000
COMPACT_ABOVE_GPUS = 2


def next_interval(current: float, direction: int) -> float:
    """The next interval step up (direction > 0) or down, never below 0.1 s."""
    if direction > 0:
        return next((s for s in INTERVAL_STEPS if s > current + 1e-9), INTERVAL_STEPS[-1])
    return next(
        (s for s in reversed(INTERVAL_STEPS) if s < current - 1e-9), max(MIN_INTERVAL_S, current)
    )


class SampleHistory:
    """Each GPU's readings of the last `window_s` seconds, by the readings' own clock.

    The readings' clock, not the wall clock: a replayed trace from last week
    charts the same as a live one.
    """

    def __init__(self, window_s: float) -> None:
        self.window_s = window_s
        self.now: float | None = None  # the newest reading's time
        self._by_gpu: dict[int, deque[GpuSample]] = {}

    def add(self, samples: Sequence[GpuSample]) -> None:
        for sample in samples:
            self._by_gpu.setdefault(sample.index, deque()).append(sample)
            if self.now is None or sample.time > self.now:
                self.now = sample.time
        if self.now is None:
            return
        oldest = self.now - self.window_s
        for readings in self._by_gpu.values():
            while readings and readings[0].time < oldest:
                readings.popleft()

    def gpus(self) -> list[int]:
        return sorted(self._by_gpu)

    def of(self, index: int) -> list[GpuSample]:
        return list(self._by_gpu.get(index, ()))

    def latest(self) -> list[GpuSample]:
        """The newest reading of each GPU."""
        return [self._by_gpu[i][-1] for i in self.gpus() if self._by_gpu[i]]


class SampleFeed(Protocol):
    """What the monitor reads GPUs through: `tuneup.monitor.sampler.Sampler` fits."""

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


class GpuPanelHandlers:
    """What the monitor app and the app's monitor screen share: poller messages to GPU panels.

    The host provides `devices`, `window_s`, `history`, `_dirty` and `gpu_reason`,
    a `#gpus` container and a MonitorHeader; Textual finds these handlers
    through the host's MRO.
    """

    devices: dict[int, GpuDevice]
    window_s: float
    history: SampleHistory
    _dirty: bool
    gpu_reason: str | None

    def on_poller_devices(self, message: Poller.Devices) -> None:
        self.gpu_reason = message.reason
        gpus = self.query_one("#gpus", VerticalScroll)  # type: ignore[attr-defined]
        if message.reason is not None:
            gpus.mount(Static(no_gpu_message(message.reason), id="no-gpu"))
            self.query_one(MonitorHeader).status = "no GPU"  # type: ignore[attr-defined]
            return
        for device in sorted(message.devices, key=lambda d: d.index):
            self._add_panel(device)

    def on_poller_samples(self, message: Poller.Samples) -> None:
        self.history.add(message.samples)
        self._dirty = True

    def on_poller_failed(self, message: Poller.Failed) -> None:
        self.query_one(MonitorHeader).status = message.error  # type: ignore[attr-defined]

    def panels(self) -> list[GpuPanel]:
        return list(self.query(GpuPanel))  # type: ignore[attr-defined]

    def _add_panel(self, device: GpuDevice) -> GpuPanel:
        self.devices[device.index] = device
        panel = GpuPanel(device, window_s=self.window_s)
        gpus = self.query_one("#gpus", VerticalScroll)  # type: ignore[attr-defined]
        gpus.mount(panel)
        # Past two GPUs, shorter charts keep more of them on one screen.
        gpus.set_class(len(self.devices) > COMPACT_ABOVE_GPUS, "compact")
        return panel


class MonitorApp(GpuPanelHandlers, App[None]):
    """Live GPU panels; + and - change the interval, space or p pauses, q quits.

    Args:
        feed: the GPU readings (a `Sampler`); the app starts and stops it.
        source: what the readings are, for the header ("NVML", "replay FILE").
        job_id, visible_gpus: the SLURM job and the GPUs it may use, for the header.
        train_feed, train_source: an attached training run's metrics and their name.
        window_s: how far back the charts reach.
        redraw_s: the least time between two redraws, whatever the interval.
    """

    TITLE = "tuneup monitor"
    ENABLE_COMMAND_PALETTE = False
    CSS = """
    #gpus {
        height: 1fr;
    }
    #gpus.compact GpuPanel > Horizontal {
        height: 7;
    }
    #no-gpu {
        padding: 1 2;
        color: $warning;
    }
    """
    BINDINGS: ClassVar[list[BindingType]] = [
        Binding("q", "quit", "quit"),
        Binding("space,p", "toggle_pause", "pause"),
        Binding("plus,equals_sign", "slower", "interval up"),
        Binding("minus", "faster", "interval down"),
    ]

    interval: reactive[float] = reactive(1.0, init=False)
    paused: reactive[bool] = reactive(False, init=False)

    def __init__(
        self,
        feed: SampleFeed,
        *,
        source: str,
        job_id: str | None = None,
        visible_gpus: Sequence[int] | None = None,
        train_feed: TrainFeed | None = None,
        train_source: str | None = None,
        window_s: float = 300.0,
        redraw_s: float = 0.25,
    ) -> None:
        super().__init__()
        self.feed = feed
        self.source = source
        self.job_id = job_id
        self.visible_gpus = visible_gpus
        self.train_feed = train_feed
        self.train_source = train_source or "metrics"
        self.window_s = window_s
        self.redraw_s = redraw_s
        self.history = SampleHistory(window_s)
        self.train_records: deque[dict[str, Any]] = deque(maxlen=_TRAIN_RECORDS_KEPT)
        self.devices: dict[int, GpuDevice] = {}
        self.gpu_reason: str | None = None
        self._dirty = False
        self._train_dirty = False
        self.set_reactive(MonitorApp.interval, feed.interval_s)
        self.poller = Poller(self, feed, train_feed=train_feed, interval_s=feed.interval_s)

    def compose(self) -> ComposeResult:
        yield MonitorHeader(
            source=self.source,
            job_id=self.job_id,
            visible_gpus=self.visible_gpus,
            interval=self.interval,
        )
        yield VerticalScroll(id="gpus")
        if self.train_feed is not None:
            yield TrainPanel(self.train_source)
        yield ProcessTable()
        yield Footer()

    def on_mount(self) -> None:
        self.poller.start()
        self.set_interval(self.redraw_s, self._redraw)

    def on_unmount(self) -> None:
        self.poller.stop()

    # Keys

    def action_toggle_pause(self) -> None:
        self.paused = not self.paused

    def action_slower(self) -> None:
        self.interval = next_interval(self.interval, +1)

    def action_faster(self) -> None:
        self.interval = next_interval(self.interval, -1)

    def watch_paused(self, paused: bool) -> None:
        self.poller.set_paused(paused)
        self.query_one(MonitorHeader).paused = paused
        if not paused:
            self._dirty = self._train_dirty = True

    def watch_interval(self, interval: float) -> None:
        self.poller.set_interval(interval)
        self.query_one(MonitorHeader).interval = interval

    # Messages from the poller

    def on_poller_train(self, message: Poller.Train) -> None:
        self.train_records.extend(message.records)
        self._train_dirty = True

    # Drawing

    def _redraw(self) -> None:
        if self.paused:
            return
        if self._dirty and self.history.now is not None:
            self._dirty = False
            shown = {panel.device.index: panel for panel in self.panels()}
            for index in self.history.gpus():
                panel = shown.get(index) or self._add_panel(GpuDevice(index=index))
                if panel.is_mounted:
                    panel.show(self.history.of(index), self.history.now)
                else:  # mounted on the next refresh: draw it then
                    self._dirty = True
            self.query_one(ProcessTable).show(self.history.latest())
        if self._train_dirty and self.train_feed is not None:
            self._train_dirty = False
            self.query_one(TrainPanel).show(list(self.train_records))
