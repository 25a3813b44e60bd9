"""The monitor's top line: the source, the SLURM job and its GPUs, the interval, pause."""

from __future__ import annotations

from collections.abc import Sequence

from rich.text import Text
from textual.reactive import reactive
from textual.widget import Widget

from tuneup.telemetry.readings import job_text


class MonitorHeader(Widget):
    """One line saying what is watched and how; changes only through its reactives."""

    DEFAULT_CSS = """
    MonitorHeader {
        height: 1;
        background: $primary-background;
        color: $text;
        padding: 0 1;
    }
    """

    interval: reactive[float] = reactive(1.0)
    paused: reactive[bool] = reactive(False)
    status: reactive[str] = reactive("")

    def __init__(
        self,
        *,
        source: str,
        job_id: str | None = None,
        visible_gpus: Sequence[int] | None = None,
        interval: float = 1.0,
    ) -> None:
        super().__init__(id="header")
        self.source = source
        self.job = job_text(job_id, visible_gpus)
        self.set_reactive(MonitorHeader.interval, interval)

    def render(self) -> Text:
        text = Text(no_wrap=True, overflow="ellipsis")
        text.append("tuneup monitor", style="bold")
        text.append(f"  {self.source}  │  {self.job}  │  every {self.interval:g} s")
        if self.paused:
            text.append("  │  ")
            text.append("PAUSED", style="bold reverse")
        if self.status:
            text.append(f"  │  {self.status}")
        return text
