"""The probe ladder as a table that fills in as probes finish; enter on a row opens it."""

from __future__ import annotations

from collections.abc import Sequence

from textual.message import Message
from textual.widgets import DataTable

from tuneup.probe.describe import (
    fair_baseline,
    sps_text,
    status_text,
    variant_text,
    versus_baseline,
)
from tuneup.probe.types import ProbeResult

COLUMNS = ("stage", "variant", "IO", "SYNTHETIC", "FULL", "vs baseline", "status")


VARIANT_WIDTH = 32


def ladder_row(
    result: ProbeResult, baseline: ProbeResult | None, reused: bool = False
) -> tuple[str, ...]:
    """One table row: the same columns and words as `tuneup probe`'s final table."""
    variant = variant_text(result)
    if len(variant) > VARIANT_WIDTH:
        variant = variant[: VARIANT_WIDTH - 1] + "…"
    return (
        result.stage,
        variant,
        sps_text(result.io_sps),
        sps_text(result.synthetic_sps),
        sps_text(result.full_sps),
        versus_baseline(result, baseline),
        status_text(result, reused),
    )


class LadderTable(DataTable[str]):
    """Stage, variant, IO, SYNTHETIC, FULL, vs baseline and status, one row per probe.

    A row selected (enter, or a click) posts `ProbeChosen`: the screen opens that probe.
    """

    class ProbeChosen(Message):
        """A row was chosen: its probe, and the baseline the table compares it with."""

        def __init__(self, result: ProbeResult, baseline: ProbeResult | None) -> None:
            super().__init__()
            self.result = result
            self.baseline = baseline

    DEFAULT_CSS = """
    LadderTable {
        height: 1fr;
        border: round $primary;
        border-title-align: left;
    }
    """

    def __init__(
        self,
        *,
        id: str | None = None,
        classes: str | None = None,
        shown: Sequence[ProbeResult] = (),
    ) -> None:
        """`shown`: the rows of a finished ladder, added once the columns are (on mount)."""
        super().__init__(id=id, classes=classes, cursor_type="row", zebra_stripes=True)
        self.border_title = "probe ladder"
        self.baseline: ProbeResult | None = None  # the first fair one: rows compare with it
        self.results: list[ProbeResult] = []
        self._shown = list(shown)

    def on_mount(self) -> None:
        # The variant column is as wide as its longest text from the start: a width that
        # grew as rows arrived made the table jump, and crowded out the columns after it.
        for column in COLUMNS:
            self.add_column(column, width=VARIANT_WIDTH if column == "variant" else None)
        for result in self._shown:
            self.add_result(result, follow=False)

    def restart(self) -> None:
        """Empty, as before the first probe (a resume replays the journal into it)."""
        self.clear()
        self.baseline = None
        self.results = []

    def add_result(self, result: ProbeResult, reused: bool = False, follow: bool = True) -> None:
        """Append a finished probe; the first ok, uncontended baseline is what later rows
        compare with. `follow`: a live ladder's newest row is shown with the cursor on it, so
        enter opens the row the user sees highlighted; a cursor the user moved up stays, and
        the view with it. False keeps the view and the cursor.
        """
        if fair_baseline(result) and self.baseline is None:
            self.baseline = result
        on_newest = self.cursor_row >= self.row_count - 1  # before the row is added
        self.results.append(result)
        self.add_row(*ladder_row(result, self.baseline, reused))
        if follow and on_newest:
            self.move_cursor(row=self.row_count - 1, animate=False)  # scrolled into view

    def on_data_table_row_selected(self, event: DataTable.RowSelected) -> None:
        event.stop()
        if 0 <= event.cursor_row < len(self.results):
            self.post_message(self.ProbeChosen(self.results[event.cursor_row], self.baseline))
