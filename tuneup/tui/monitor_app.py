"""`tuneup monitor` full-screen: an App whose only screen is the monitor screen.

The panels, the poller and their handlers live in `tuneup.tui.screens.monitor`,
which the app's `m` shows too; this App adds the keys of the standalone
monitor: q quits, space or p pauses, + and - change the interval.
"""

from __future__ import annotations

from typing import ClassVar

from textual.app import App
from textual.binding import Binding, BindingType
from textual.screen import Screen

from tuneup.tui.poller import SampleFeed
from tuneup.tui.screens.monitor import MonitorScreen
from tuneup.tui.widgets.gpu_panel import GpuPanel


class MonitorApp(App[None]):
    """Live GPU panels; + and - change the interval, space or p pauses, q quits.

    Args:
        monitor: the screen it shows, made with `close_backend=False`: the app
            starts and stops the feed and leaves closing its backend to the caller.
    """

    TITLE = "tuneup monitor"
    ENABLE_COMMAND_PALETTE = False
    BINDINGS: ClassVar[list[BindingType]] = [
        Binding("q", "quit", "quit"),
        Binding("space,p", "screen.toggle_pause", "pause"),
        Binding("plus,equals_sign", "screen.slower", "interval up"),
        Binding("minus", "screen.faster", "interval down"),
    ]

    def __init__(self, monitor: MonitorScreen) -> None:
        super().__init__()
        self.monitor = monitor

    def get_default_screen(self) -> Screen[None]:
        return self.monitor

    @property
    def feed(self) -> SampleFeed:
        return self.monitor.feed

    @property
    def interval(self) -> float:
        return self.monitor.interval

    @property
    def paused(self) -> bool:
        return self.monitor.paused

    def panels(self) -> list[GpuPanel]:
        return self.monitor.panels()
