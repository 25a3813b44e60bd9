"""The probe ladder as a table that fills in as probes finish."""

from __future__ import annotations

from textual.widgets import DataTable

from tuneup.probe.describe import sps_text
from tuneup.probe.types import ProbeResult, Status

COLUMNS = ("stage", "variant", "IO", "SYNTHETIC", "FULL", "vs baseline", "status")


VARIANT_WIDTH = 32


def variant_text(result: ProbeResult) -> str:
    """A short name for what the probe changed; the confirmation's long diff is "recommendation"."""
    if result.stage == "confirm":
        return "recommendation" if result.variant else "baseline"
    if not result.variant:
        return "baseline" if result.stage == "baseline" else "incumbent (again)"
    text = ", ".join(f"{k}={v}" for k, v in result.variant.items())
    return text if len(text) <= VARIANT_WIDTH else text[: VARIANT_WIDTH - 1] + "…"


def status_text(result: ProbeResult, reused: bool = False) -> str:
    """The status, with the reason when a probe did not run ok (people need the why)."""
    text = result.status.value
    if result.reason and result.status is not Status.OK:
        text += f": {result.reason}"
    if result.ok and result.throttled:
        text += " (throttled: noisy)"
    if reused:
        text += " [journal]"
    return text


def ladder_row(
    result: ProbeResult, baseline_sps: float | None, reused: bool = False
) -> tuple[str, ...]:
    """One table row: the same columns as `tuneup probe`'s final table."""
    versus = ""
    if result.ok and result.full_sps and baseline_sps:
        versus = f"{100 * (result.full_sps / baseline_sps - 1):+.1f}%"
    return (
        result.stage,
        variant_text(result),
        sps_text(result.io_sps),
        sps_text(result.synthetic_sps),
        sps_text(result.full_sps),
        versus,
        status_text(result, reused),
    )


class LadderTable(DataTable[str]):
    """Stage, variant, IO, SYNTHETIC, FULL, vs baseline and status, one row per probe."""

    DEFAULT_CSS = """
    LadderTable {
        height: 1fr;
        border: round $primary;
        border-title-align: left;
    }
    """

    def __init__(self, *, id: str | None = None, classes: str | None = None) -> None:
        super().__init__(id=id, classes=classes, show_cursor=False, zebra_stripes=True)
        self.border_title = "probe ladder"
        self.baseline_sps: float | None = None
        self.results: list[ProbeResult] = []

    def on_mount(self) -> None:
        self.add_columns(*COLUMNS)

    def restart(self) -> None:
        """Empty, as before the first probe (a resume replays the journal into it)."""
        self.clear()
        self.baseline_sps = None
        self.results = []

    def add_result(self, result: ProbeResult, reused: bool = False) -> None:
        """Append a finished probe; the first ok baseline is what later rows compare with."""
        if result.stage == "baseline" and result.ok and self.baseline_sps is None:
            self.baseline_sps = result.full_sps
        self.results.append(result)
        self.add_row(*ladder_row(result, self.baseline_sps, reused))
        self.scroll_end(animate=False)
