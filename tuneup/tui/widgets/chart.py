"""A line chart drawn by plotext into the widget's own size.

plotext draws into one process-wide figure, so charts are drawn only on the
UI thread (in `render`), never from the polling thread.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

from rich.text import Text
from textual.widget import Widget

Ticks = tuple[tuple[float, ...], tuple[str, ...]]


@dataclass(frozen=True)
class Series:
    """What one chart shows: points and the axes they sit on."""

    xs: tuple[float, ...] = ()
    ys: tuple[float, ...] = ()
    x_lim: tuple[float, float] | None = None
    y_lim: tuple[float, float] | None = None
    x_ticks: Ticks | None = None


def downsample(
    xs: Sequence[float], ys: Sequence[float], buckets: int
) -> tuple[list[float], list[float]]:
    """At most `buckets` points, each the mean of its slice of x.

    A chart a few dozen cells wide cannot show thousands of points, and
    plotext's cost grows with the points it is given.
    """
    if len(xs) <= buckets or buckets < 1:
        return list(xs), list(ys)
    lo, hi = xs[0], xs[-1]
    span = (hi - lo) or 1.0
    sums: dict[int, list[float]] = {}
    for x, y in zip(xs, ys, strict=True):
        slot = min(int((x - lo) / span * buckets), buckets - 1)
        acc = sums.setdefault(slot, [0.0, 0.0, 0.0])
        acc[0] += x
        acc[1] += y
        acc[2] += 1
    out_x = [acc[0] / acc[2] for _, acc in sorted(sums.items())]
    out_y = [acc[1] / acc[2] for _, acc in sorted(sums.items())]
    return out_x, out_y


def nice_ticks(lo: float, hi: float, count: int = 5) -> tuple[float, ...]:
    """Round tick positions (1, 2, 2.5 or 5 times a power of ten) covering [lo, hi]."""
    if not (math.isfinite(lo) and math.isfinite(hi)) or hi <= lo:
        return (lo,)
    raw = (hi - lo) / max(count - 1, 1)
    power = 10 ** math.floor(math.log10(raw))
    step = next(m * power for m in (1, 2, 2.5, 5, 10) if m * power >= raw)
    first = math.ceil(lo / step) * step
    ticks = []
    value = first
    while value <= hi + step * 1e-9:
        ticks.append(round(value, 10))
        value += step
    return tuple(ticks)


def tick_label(value: float) -> str:
    if value == int(value) and abs(value) < 1e6:
        return str(int(value))
    return f"{value:.3g}"


def render_chart(series: Series, *, width: int, height: int, title: str, color: str) -> str:
    """The chart as ANSI text exactly `width` x `height` cells (plotext's drawing)."""
    try:
        import plotext  # plotext: only when a chart is drawn
    except ImportError as exc:  # plotext's compiled part can be missing on odd platforms
        return f"{title}: chart unavailable ({exc})"
    figure = plotext.figure
    figure.clear()
    figure.theme("simple")
    figure.plot_size(width, height)
    figure.title(title)
    xs, ys = downsample(series.xs, series.ys, max(2 * width, 2))
    signal = figure.signal(xs, ys, marker=plotext.marker("braille", plotext.pixel(color)))
    signal.lines()
    figure.draw(signal)
    if series.x_lim is not None:
        figure.ruler("x").lim(*series.x_lim)
    if series.x_ticks is not None:
        figure.ruler("x").ticks(list(series.x_ticks[0]), list(series.x_ticks[1]))
    elif xs:
        lo, hi = series.x_lim or (min(xs), max(xs))
        positions = nice_ticks(lo, hi, max(2, width // 10))
        figure.ruler("x").ticks(list(positions), [tick_label(p) for p in positions])
    y_lim = series.y_lim
    if y_lim is None and ys:
        top = max(ys)
        y_lim = (min(0.0, min(ys)), top * 1.1 if top > 0 else 1.0)
    if y_lim is not None:
        figure.ruler("y").lim(*y_lim)
        positions = nice_ticks(y_lim[0], y_lim[1], max(2, min(5, height // 2)))
        figure.ruler("y").ticks(list(positions), [tick_label(p) for p in positions])
    return figure.build().string()


class Chart(Widget):
    """A titled line chart that redraws at whatever size the layout gives it."""

    DEFAULT_CSS = """
    Chart {
        height: 10;
        width: 1fr;
        min-width: 20;
    }
    """

    def __init__(
        self,
        title: str,
        *,
        color: str = "green",
        name: str | None = None,
        id: str | None = None,
        classes: str | None = None,
    ) -> None:
        super().__init__(name=name, id=id, classes=classes)
        self.chart_title = title
        self.color = color
        self.series = Series()
        self._drawn: tuple[Series, int, int, str] | None = None
        self._drawing = Text()

    def plot(self, series: Series, title: str | None = None) -> None:
        """Show `series` (and a new title) from the next refresh on."""
        self.series = series
        if title is not None:
            self.chart_title = title
        self.refresh()

    def render(self) -> Text:
        width, height = self.content_size.width, self.content_size.height
        if width < 12 or height < 4:
            return Text(self.chart_title)
        key = (self.series, width, height, self.chart_title)
        if key != self._drawn:  # a layout pass re-renders without new data: reuse the drawing
            drawing = render_chart(
                self.series, width=width, height=height, title=self.chart_title, color=self.color
            )
            self._drawing = Text.from_ansi(drawing, no_wrap=True)
            self._drawn = key
        return self._drawing
