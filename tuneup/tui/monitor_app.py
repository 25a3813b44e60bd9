"""`tuneup monitor` full-screen: an App whose only screen is the monitor screen.

The panels, the poller and their handlers live in `tuneup.tui.screens.monitor`,
which the app's `m` shows too; this App adds the keys of the standalone
monitor: q quits, space or p pauses, + and - change the interval.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import ClassVar

from textual.app import App
from textual.binding import Binding, BindingType
from textual.screen import Screen

from tuneup.tui.poller import SampleFeed, TrainFeed
from tuneup.tui.screens.monitor import MonitorScreen
from tuneup.tui.widgets.gpu_panel import GpuPanel


class MonitorApp(App[None]):
    """Live GPU panels; + and - change the interval, space or p pauses, q quits.

    Args:
        feed: the GPU readings (a `Sampler`); the app starts and stops it, and
            leaves closing its backend to the caller.
        source: what the readings are, for the header ("NVML", "replay FILE").
        job_id, visible_gpus: the SLURM job and the GPUs it may use, for the header.
        train_feed, train_source: an attached training run's metrics and their name.
        window_s: how far back the charts reach.
        redraw_s: the least time between two redraws, whatever the interval.
    """

    TITLE = "tuneup monitor"
    ENABLE_COMMAND_PALETTE = False
    BINDINGS: ClassVar[list[BindingType]] = [
        Binding("q", "quit", "quit"),
        Binding("space,p", "screen.toggle_pause", "pause"),
        Binding("plus,equals_sign", "screen.slower", "interval up"),
        Binding("minus", "screen.faster", "interval down"),
    ]

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
        self.monitor = MonitorScreen(
            feed,
            source=source,
            job_id=job_id,
            visible_gpus=visible_gpus,
            train_feed=train_feed,
            train_source=train_source,
            window_s=window_s,
            redraw_s=redraw_s,
            close_backend=False,
        )

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
