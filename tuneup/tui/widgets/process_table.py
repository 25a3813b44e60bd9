"""The compute processes on the watched GPUs and the memory each holds."""

from __future__ import annotations

from collections.abc import Sequence

from textual.widgets import DataTable

from tuneup.hardware.types import GpuSample
from tuneup.telemetry.readings import process_rows


class ProcessTable(DataTable):
    """GPU, PID, process name and GPU memory of every compute process, newest reading."""

    DEFAULT_CSS = """
    ProcessTable {
        height: auto;
        max-height: 10;
        border: round $secondary;
    }
    """

    def __init__(self) -> None:
        super().__init__(cursor_type="none", zebra_stripes=True, id="processes")
        self.border_title = "processes"
        self.rows_shown: list[tuple[str, str, str, str]] = []

    def on_mount(self) -> None:
        self.add_columns("GPU", "PID", "process", "GPU memory")

    def show(self, samples: Sequence[GpuSample]) -> None:
        """Replace the rows with the processes of the newest readings."""
        rows = process_rows(samples)
        if rows == self.rows_shown:
            return
        self.rows_shown = rows
        self.clear()
        self.add_rows(rows)
