"""The monitor as a screen of the app: the same widgets and poller as `tuneup monitor`.

`MonitorApp` is an App, so it cannot be pushed; this screen hosts the same
widgets (`MonitorHeader`, `GpuPanel`, `ProcessTable`) fed by the same
`Poller` thread, which posts to the screen and never touches a widget.
Escape (or m) goes back to the screen it was opened from.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import ClassVar

from textual.app import ComposeResult
from textual.binding import Binding, BindingType
from textual.containers import VerticalScroll
from textual.screen import Screen
from textual.widgets import Footer

from tuneup.hardware.types import GpuDevice
from tuneup.monitor.app import GpuPanelHandlers, Poller, SampleFeed, SampleHistory
from tuneup.monitor.widgets.header import MonitorHeader
from tuneup.monitor.widgets.process_table import ProcessTable


class MonitorScreen(GpuPanelHandlers, Screen[None]):
    """Live GPU panels inside the app; the feed is started on mount and stopped on leaving.

    Args:
        feed: the GPU readings (a `Sampler` over NVML or a replayed trace).
        source: what the readings are, for the header.
        job_id, visible_gpus: the SLURM job and its GPUs, for the header.
        window_s: how far back the charts reach.
        redraw_s: the least time between two redraws.
    """

    DEFAULT_CSS = """
    MonitorScreen #gpus { height: 1fr; }
    MonitorScreen #gpus.compact GpuPanel > Horizontal { height: 7; }
    MonitorScreen #no-gpu { padding: 1 2; color: $warning; }
    """
    BINDINGS: ClassVar[list[BindingType]] = [
        Binding("escape,m", "back", "back"),
    ]

    def __init__(
        self,
        feed: SampleFeed,
        *,
        source: str,
        job_id: str | None = None,
        visible_gpus: Sequence[int] | None = None,
        window_s: float = 300.0,
        redraw_s: float = 0.25,
    ) -> None:
        super().__init__()
        self.feed = feed
        self.source = source
        self.job_id = job_id
        self.visible_gpus = visible_gpus
        self.window_s = window_s
        self.redraw_s = redraw_s
        self.history = SampleHistory(window_s)
        self.devices: dict[int, GpuDevice] = {}
        self.gpu_reason: str | None = None
        self._dirty = False
        self.poller = Poller(self, feed, interval_s=feed.interval_s)

    def compose(self) -> ComposeResult:
        yield MonitorHeader(
            source=self.source,
            job_id=self.job_id,
            visible_gpus=self.visible_gpus,
            interval=self.feed.interval_s,
        )
        yield VerticalScroll(id="gpus")
        yield ProcessTable()
        yield Footer()

    def on_mount(self) -> None:
        self.poller.start()
        self.set_interval(self.redraw_s, self._redraw)

    def on_unmount(self) -> None:
        # The screen owns its feed: a fresh one is made each time the monitor opens.
        self.poller.stop()
        self.feed.backend.close()

    def action_back(self) -> None:
        self.app.pop_screen()

    def _redraw(self) -> None:
        if not self._dirty or self.history.now is None:
            return
        self._dirty = False
        shown = {panel.device.index: panel for panel in self.panels()}
        for index in self.history.gpus():
            panel = shown.get(index) or self._add_panel(GpuDevice(index=index))
            if panel.is_mounted:
                panel.show(self.history.of(index), self.history.now)
            else:
                self._dirty = True
        self.query_one(ProcessTable).show(self.history.latest())
