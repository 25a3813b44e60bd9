"""The monitor screen: a panel per GPU, the processes, and an attached training run.

One screen for both hosts: `tuneup monitor` shows it as its only screen
(`MonitorApp`), and the app pushes it on `m`. The host binds its keys to the
actions here. A `Poller` thread reads the feeds and only posts messages;
widgets change in the handlers below, so the screen never waits on a driver.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Sequence
from typing import Any, ClassVar

from textual.app import ComposeResult
from textual.binding import Binding, BindingType
from textual.containers import VerticalScroll
from textual.reactive import reactive
from textual.screen import Screen
from textual.widgets import Footer, Static

from tuneup.hardware.types import GpuDevice
from tuneup.telemetry.history import SampleHistory
from tuneup.telemetry.readings import no_gpu_message
from tuneup.tui.poller import Poller, SampleFeed, TrainFeed
from tuneup.tui.widgets.gpu_panel import GpuPanel
from tuneup.tui.widgets.header import MonitorHeader
from tuneup.tui.widgets.process_table import ProcessTable
from tuneup.tui.widgets.train_panel import TrainPanel

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


class MonitorScreen(Screen[None]):
    """Live GPU panels, the processes on the GPUs and, when attached, a training run.

    Actions for the host's keys: `toggle_pause`, `slower` and `faster`.
    Escape (or m) goes back to the screen below, where there is one.

    Args:
        feed: the GPU readings (a `Sampler` over NVML or a replayed trace);
            the screen starts and stops it.
        source: what the readings are, for the header ("NVML", "replay FILE").
        job_id, visible_gpus: the SLURM job and the GPUs it may use, for the header.
        train_feed, train_source: an attached training run's metrics and their name.
        window_s: how far back the charts reach.
        redraw_s: the least time between two redraws, whatever the interval.
        close_backend: close the feed's backend when the screen leaves (the
            app makes a fresh feed each time it opens the monitor).
    """

    DEFAULT_CSS = """
    MonitorScreen #gpus { height: 1fr; }
    MonitorScreen #gpus.compact GpuPanel > Horizontal { height: 7; }
    MonitorScreen #no-gpu { padding: 1 2; color: $warning; }
    """
    BINDINGS: ClassVar[list[BindingType]] = [
        Binding("escape,m", "back", "back"),
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
        close_backend: bool = True,
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
        self.close_backend = close_backend
        self.history = SampleHistory(window_s)
        self.train_records: deque[dict[str, Any]] = deque(maxlen=_TRAIN_RECORDS_KEPT)
        self.devices: dict[int, GpuDevice] = {}
        self.gpu_reason: str | None = None
        self._dirty = False
        self._train_dirty = False
        self.set_reactive(MonitorScreen.interval, feed.interval_s)
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
        if self.close_backend:
            self.feed.backend.close()

    def panels(self) -> list[GpuPanel]:
        return list(self.query(GpuPanel))

    # Keys

    def check_action(self, action: str, parameters: tuple[object, ...]) -> bool | None:
        if action == "back":  # as the only screen (`tuneup monitor`) there is nothing below
            return len(self.app.screen_stack) > 1
        return True

    def action_back(self) -> None:
        self.app.pop_screen()

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

    def on_poller_devices(self, message: Poller.Devices) -> None:
        self.gpu_reason = message.reason
        gpus = self.query_one("#gpus", VerticalScroll)
        if message.reason is not None:
            gpus.mount(Static(no_gpu_message(message.reason), id="no-gpu"))
            self.query_one(MonitorHeader).status = "no GPU"
            return
        for device in sorted(message.devices, key=lambda d: d.index):
            self._add_panel(device)

    def on_poller_samples(self, message: Poller.Samples) -> None:
        self.history.add(message.samples)
        self._dirty = True

    def on_poller_train(self, message: Poller.Train) -> None:
        self.train_records.extend(message.records)
        self._train_dirty = True

    def on_poller_failed(self, message: Poller.Failed) -> None:
        self.query_one(MonitorHeader).status = message.error

    # Drawing

    def _add_panel(self, device: GpuDevice) -> GpuPanel:
        self.devices[device.index] = device
        panel = GpuPanel(device, window_s=self.window_s)
        gpus = self.query_one("#gpus", VerticalScroll)
        gpus.mount(panel)
        # Past two GPUs, shorter charts keep more of them on one screen.
        gpus.set_class(len(self.devices) > COMPACT_ABOVE_GPUS, "compact")
        return panel

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
