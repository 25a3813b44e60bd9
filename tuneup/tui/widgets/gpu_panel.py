"""One GPU's panel: its current readings and charts of the last minutes."""

from __future__ import annotations

from collections.abc import Callable, Sequence

from rich.text import Text
from textual.app import ComposeResult
from textual.containers import Horizontal, Vertical
from textual.widgets import Static

from tuneup.hardware.types import GpuDevice, GpuSample
from tuneup.telemetry import readings
from tuneup.tui.widgets.chart import Chart, Series, Ticks

_MIB_PER_GIB = 1024.0


def _used_gib(sample: GpuSample) -> float | None:
    return None if sample.memory_used_mb is None else sample.memory_used_mb / _MIB_PER_GIB


# Tick spacings a time axis may use: whole seconds, then whole minutes.
_TIME_STEPS_S = (1, 2, 5, 10, 15, 30, 60, 120, 300, 600, 900, 1800, 3600)


def time_ticks(window_s: float, most: int = 6) -> Ticks:
    """Ticks for an axis of seconds before now: "-5m" ... "-1m", "now" (seconds when short)."""
    step = next((s for s in _TIME_STEPS_S if window_s / s <= most - 1), _TIME_STEPS_S[-1])
    positions = tuple(-float(k * step) or 0.0 for k in range(int(window_s // step), -1, -1))
    labels = tuple(
        "now" if p == 0 else f"-{-p / 60:.0f}m" if step % 60 == 0 else f"-{-p:.0f}s"
        for p in positions
    )
    return positions, labels


def time_series(
    history: Sequence[GpuSample],
    value: Callable[[GpuSample], float | None],
    *,
    now: float,
    window_s: float,
    y_lim: tuple[float, float] | None,
) -> Series:
    """One reading over the window, x in seconds before `now`; unreported readings are left out."""
    points = [
        (s.time - now, v)
        for s in history
        if s.time >= now - window_s and (v := value(s)) is not None
    ]
    return Series(
        xs=tuple(p[0] for p in points),
        ys=tuple(p[1] for p in points),
        x_lim=(-window_s, 0.0),
        y_lim=y_lim,
        x_ticks=time_ticks(window_s),
    )


def readings_text(sample: GpuSample, device: GpuDevice | None) -> Text:
    """The one line of current readings above the charts."""
    slowed = readings.throttle_reasons(sample.throttle_reasons)
    parts: list[tuple[str, str, str]] = [
        ("util", readings.pct(sample.util_gpu_pct), ""),
        (
            "mem",
            readings.memory(sample.memory_used_mb, readings.total_memory_mb(device, sample)),
            "",
        ),
        ("power", readings.power(sample.power_w, readings.power_limit_w(device, sample)), ""),
        ("temp", readings.temperature(sample.temperature_c), ""),
        ("SM", readings.clock(sample.sm_clock_mhz), ""),
        ("mem clk", readings.clock(sample.mem_clock_mhz), ""),
        ("throttle", readings.throttle(sample.throttle_reasons), "bold red" if slowed else ""),
    ]
    text = Text(no_wrap=True, overflow="ellipsis")
    for label, value, style in parts:
        if text:
            text.append("  ")
        text.append(f"{label} ", style="dim")
        text.append(value, style=style)
    return text


class GpuPanel(Vertical):
    """Readings and utilisation, memory and power charts of one GPU."""

    DEFAULT_CSS = """
    GpuPanel {
        height: auto;
        border: round $primary;
        border-title-color: $text;
        padding: 0 1;
    }
    GpuPanel > .gpu-readings {
        height: 1;
    }
    GpuPanel > Horizontal {
        height: 10;
    }
    """

    def __init__(self, device: GpuDevice, *, window_s: float = 300.0) -> None:
        super().__init__(id=f"gpu-{device.index}")
        self.device = device
        self.window_s = window_s
        self.latest: GpuSample | None = None
        self.border_title = readings.gpu_title(device)
        if device.bus_id:
            self.border_subtitle = device.bus_id

    def compose(self) -> ComposeResult:
        yield Static("waiting for the first reading…", classes="gpu-readings")
        with Horizontal():
            yield Chart("utilization %", color="green", classes="util")
            yield Chart("memory GiB", color="magenta", classes="memory")
            yield Chart("power W", color="yellow", classes="power")

    def show(self, history: Sequence[GpuSample], now: float) -> None:
        """Show this GPU's readings up to `now` (the newest reading of any GPU)."""
        if not history:
            return
        self.latest = history[-1]
        self.query_one(".gpu-readings", Static).update(readings_text(self.latest, self.device))
        total_mb = readings.total_memory_mb(self.device, self.latest)
        limit_w = readings.power_limit_w(self.device, self.latest)
        charts: list[tuple[str, Callable[[GpuSample], float | None], tuple[float, float] | None]]
        charts = [
            ("util", lambda s: s.util_gpu_pct, (0.0, 100.0)),
            ("memory", _used_gib, (0.0, total_mb / _MIB_PER_GIB) if total_mb else None),
            ("power", lambda s: s.power_w, (0.0, limit_w) if limit_w else None),
        ]
        for name, value, y_lim in charts:
            series = time_series(history, value, now=now, window_s=self.window_s, y_lim=y_lim)
            self.query_one(f".{name}", Chart).plot(series)
