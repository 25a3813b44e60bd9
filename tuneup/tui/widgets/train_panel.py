"""Training progress read from `tuneup train --metrics FILE`: samples/s and loss by step."""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import Any

from rich.text import Text
from textual.app import ComposeResult
from textual.containers import Horizontal, Vertical
from textual.widgets import Static

from tuneup.tui.widgets.chart import Chart, Series


def _number(record: Mapping[str, Any], key: str) -> float | None:
    value = record.get(key)
    if isinstance(value, bool) or not isinstance(value, int | float):
        return None
    return float(value) if math.isfinite(value) else None


def step_series(records: Sequence[Mapping[str, Any]], key: str) -> Series:
    """`key` by training step, from the "train" records that carry both."""
    points = [
        (step, value)
        for r in records
        if r.get("kind") == "train"
        and (step := _number(r, "step")) is not None
        and (value := _number(r, key)) is not None
    ]
    return Series(xs=tuple(p[0] for p in points), ys=tuple(p[1] for p in points))


def progress_text(records: Sequence[Mapping[str, Any]]) -> Text:
    """The newest train record as one line, or what the panel is waiting for."""
    latest = next((r for r in reversed(records) if r.get("kind") == "train"), None)
    if latest is None:
        return Text("waiting for training metrics…", style="dim")
    text = Text(no_wrap=True, overflow="ellipsis")
    for label, key, fmt in (
        ("epoch", "epoch", "{:.0f}"),
        ("step", "step", "{:.0f}"),
        ("loss", "loss", "{:.4g}"),
        ("samples/s", "samples_per_s", "{:.1f}"),
    ):
        value = _number(latest, key)
        if value is None:
            continue
        if text:
            text.append("  ")
        text.append(f"{label} ", style="dim")
        text.append(fmt.format(value))
    return text


class TrainPanel(Vertical):
    """Throughput and loss of the training run attached with `--attach FILE`."""

    DEFAULT_CSS = """
    TrainPanel {
        height: auto;
        border: round $accent;
        padding: 0 1;
    }
    TrainPanel > .train-progress {
        height: 1;
    }
    TrainPanel > Horizontal {
        height: 10;
    }
    """

    def __init__(self, source: str) -> None:
        super().__init__(id="train")
        self.border_title = f"training · {source}"
        self.records_shown = 0

    def compose(self) -> ComposeResult:
        yield Static(progress_text([]), classes="train-progress")
        with Horizontal():
            yield Chart("samples/s", color="cyan", classes="throughput")
            yield Chart("loss", color="red", classes="loss")

    def show(self, records: Sequence[Mapping[str, Any]]) -> None:
        """Show every record so far (oldest first)."""
        self.records_shown = len(records)
        self.query_one(".train-progress", Static).update(progress_text(records))
        self.query_one(".throughput", Chart).plot(step_series(records, "samples_per_s"))
        self.query_one(".loss", Chart).plot(step_series(records, "loss"))
