"""What each stage contributed: a horizontal bar of its gain in percent."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from rich.text import Text
from textual.widget import Widget

from tuneup.tuning.results.summary import StageOutcome


@dataclass(frozen=True)
class StageGain:
    """One stage's line: its gain (None: not measured) and whether it was adopted."""

    stage: str
    gain_pct: float | None
    adopted: bool
    note: str = ""


def stage_gains(stages: Sequence[StageOutcome]) -> list[StageGain]:
    """The bars from summary.json's `stages` list: an adopted stage's gain on the phase that
    decided it; a stage that adopted nothing contributed nothing (no bar), and its note
    says what its best candidate measured."""
    gains = []
    for entry in stages:
        phase = entry.decided_on if entry.decided_on and entry.decided_on != "full" else ""
        on = f" on {phase.upper()}" if phase else ""
        if entry.winner:
            gains.append(
                StageGain(entry.stage, entry.gain_pct, True, f"adopted {entry.winner}{on}")
            )
        elif entry.reason.startswith("skipped"):
            gains.append(StageGain(entry.stage, None, False, "skipped"))
        elif entry.gain_pct is None:
            gains.append(StageGain(entry.stage, None, False, "kept"))
        else:
            best = f"kept (best {entry.gain_pct:+.1f}%{on}, not adopted)"
            gains.append(StageGain(entry.stage, 0.0, False, best))
    return gains


def bar_lines(gains: Sequence[StageGain], width: int) -> Text:
    """The chart as text `width` cells wide: name, bar scaled to the largest gain, value, note."""
    text = Text(no_wrap=True, overflow="ellipsis")
    if not gains:
        return text.append("no stages", style="dim")
    name_w = max(len(g.stage) for g in gains)
    note_w = max(len(g.note) for g in gains)
    bar_w = max(width - name_w - note_w - 12, 4)
    top = max((g.gain_pct for g in gains if g.gain_pct is not None and g.gain_pct > 0), default=0.0)
    for i, g in enumerate(gains):
        if i:
            text.append("\n")
        text.append(f"{g.stage:<{name_w}} ")
        if g.gain_pct is None:
            text.append(" " * bar_w + f" {'-':>7} ", style="dim")
        else:
            cells = round(bar_w * g.gain_pct / top) if top > 0 and g.gain_pct > 0 else 0
            style = "bold green" if g.adopted else "yellow"
            text.append("█" * cells, style=style)
            text.append(" " * (bar_w - cells))
            text.append(f" {g.gain_pct:+6.1f}% ", style=style if g.gain_pct > 0 else "red")
        text.append(g.note, style="bold" if g.adopted else "dim")
    return text


class GainBars(Widget):
    """A bar per stage, drawn to the widget's width."""

    DEFAULT_CSS = """
    GainBars {
        height: auto;
        min-height: 3;
        border: round $secondary;
        border-title-align: left;
        padding: 0 1;
    }
    """

    def __init__(self, gains: Sequence[StageGain] = (), *, id: str | None = None) -> None:
        super().__init__(id=id)
        self.border_title = "what each stage contributed (vs the config before it)"
        self.gains = list(gains)

    def show(self, gains: Sequence[StageGain]) -> None:
        self.gains = list(gains)
        self.refresh(layout=True)

    def get_content_height(self, container: Any, viewport: Any, width: int) -> int:
        return max(len(self.gains), 1)

    def render(self) -> Text:
        return bar_lines(self.gains, self.content_size.width)
