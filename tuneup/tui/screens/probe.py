"""One probe opened from the ladder table: its figures, where its step's time goes, and `p`
to profile it again (tuning/session/profile_again.py, what `tuneup profile DIR --probe N` runs).

A probe the ladder did not profile shows its figures and the key; profiling
runs a fresh worker on a thread, so only when no ladder is running beside it
(its timings would be shared): `can_profile` says why not otherwise. A profiled
probe's breakdown is read again from its trace on a worker's thread, where the trace
is in the folder (on a GPU: the device's work by part, tuning/results/profile_traces.py).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any, ClassVar

from textual.app import ComposeResult
from textual.binding import Binding, BindingType
from textual.containers import VerticalScroll
from textual.screen import ModalScreen
from textual.widgets import Footer, Static

from tuneup.errors import UsageError
from tuneup.probe.describe import sps_text, status_text, variant_text, versus_baseline
from tuneup.probe.profile_rules import findings
from tuneup.probe.types import ProbeResult
from tuneup.tui.widgets.breakdown import Side, breakdown_bars
from tuneup.tuning.results.journal import ResultsDir
from tuneup.tuning.results.profile_traces import PROBES, from_trace
from tuneup.tuning.session.profile_again import (
    NothingToProfile,
    ProfiledAgain,
    journal_number,
    ladder_stages,
    profile_again,
)

# (folder, journal number) -> the probe profiled again; tests pass a fake
Profiler = Callable[[Path, int], ProfiledAgain]


def figures_text(result: ProbeResult, baseline: ProbeResult | None) -> str:
    """The probe's rates and status, in the ladder table's words."""
    return (
        f"IO {sps_text(result.io_sps)} · SYNTHETIC {sps_text(result.synthetic_sps)} · "
        f"FULL {sps_text(result.full_sps)} · {versus_baseline(result, baseline)} · "
        f"{status_text(result)}"
    )


def profile_findings(
    profile: Mapping[str, Any] | None, result: ProbeResult, folder: Path | None
) -> str:
    """The rules that fire on `profile`, quoting what the ladder said at each stage."""
    if not profile:
        return ""
    stages = ladder_stages(ResultsDir(folder)) if folder is not None else {}
    return "\n".join(f"finding: {f.text}" for f in findings(profile, stages, result.config))


class ProbeScreen(ModalScreen[None]):
    """A probe's breakdown; `p` profiles it again, `escape` goes back.

    Args:
        result: the probe, as its row shows it.
        baseline: the row the ladder compares with.
        folder: the session's results folder (None: nothing to profile again from).
        can_profile: None where a profile may run now, else why not (a ladder running).
        profiler: runs the profile (tuning/session/profile_again.py by default).
    """

    DEFAULT_CSS = """
    ProbeScreen { align: center middle; }
    ProbeScreen #probe-body {
        width: 90%;
        max-width: 110;
        height: auto;
        max-height: 90%;
        border: round $primary;
        border-title-align: left;
        background: $surface;
        padding: 0 1;
    }
    ProbeScreen #probe-hint { color: $text-muted; }
    """

    BINDINGS: ClassVar[list[BindingType]] = [
        Binding("p", "profile", "profile again"),
        Binding("escape", "dismiss", "back"),
    ]

    def __init__(
        self,
        result: ProbeResult,
        baseline: ProbeResult | None,
        folder: Path | None,
        can_profile: Callable[[], str | None] = lambda: None,
        profiler: Profiler = profile_again,
    ) -> None:
        super().__init__()
        self.result = result
        self.baseline = baseline
        self.folder = folder
        self.can_profile = can_profile
        self.profiler = profiler
        self.running = False

    def compose(self) -> ComposeResult:
        result = self.result
        with VerticalScroll(id="probe-body") as body:
            body.border_title = f"{result.stage}: {variant_text(result)}"
            yield Static(figures_text(result, self.baseline), id="probe-figures")
            yield Static(
                self._bars([("as the ladder profiled it", result.profile or None)]),
                id="probe-breakdown",
            )
            yield Static(profile_findings(result.profile, result, self.folder), id="probe-findings")
            yield Static(self._hint(), id="probe-hint")
        yield Footer()

    def on_mount(self) -> None:
        if self.folder is not None and self.result.profile.get("trace"):
            self.run_worker(self._read_trace, thread=True, exit_on_error=False, name="trace")

    def _read_trace(self) -> None:
        """On a worker's thread: the ladder's profile derived again from its trace (on a GPU,
        the device's work by part: tuning/results/profile_traces.py)."""
        if self.folder is None:
            return
        read = from_trace(self.result.profile, self.folder / PROBES)
        self.app.call_from_thread(self._show_read, read)

    def _show_read(self, profile: dict[str, Any]) -> None:
        if self.running:  # a profile taken again is on its way: it shows itself
            return
        shown = self._bars([("as the ladder profiled it", profile)])
        self.query_one("#probe-breakdown", Static).update(shown)
        said = profile_findings(profile, self.result, self.folder)
        self.query_one("#probe-findings", Static).update(said)

    @staticmethod
    def _bars(sides: list[Side]) -> Any:
        table = breakdown_bars(sides)
        return table if table is not None else "not profiled in the ladder"

    def _hint(self) -> str:
        if self.folder is None:
            return "no results folder: nothing to profile again from"
        why_not = self.can_profile()
        if why_not:
            return f"p profiles it again {why_not}"
        return "p profiles it again (a fresh worker: about one probe's time) · escape: back"

    def action_profile(self) -> None:
        hint = self.query_one("#probe-hint", Static)
        if self.running or self.folder is None:
            return
        why_not = self.can_profile()
        if why_not:
            hint.update(f"p profiles it again {why_not}")
            return
        number = journal_number(ResultsDir(self.folder), self.result)
        if number is None:
            hint.update("this probe is not in the journal: nothing to profile again")
            return
        self.running = True
        hint.update(f"profiling probe {number} again ...")
        folder = self.folder
        self.run_worker(
            lambda: self._run(folder, number), thread=True, exit_on_error=False, name="profile"
        )

    def _run(self, folder: Path, number: int) -> None:
        """On the worker's thread: the widgets change on the app's (call_from_thread)."""
        try:
            again = self.profiler(folder, number)
        except NothingToProfile as exc:  # the session's trainer takes none: its one line
            self.app.call_from_thread(self._failed, str(exc))
            return
        except UsageError as exc:
            self.app.call_from_thread(self._failed, f"profile failed: {exc}")
            return
        self.app.call_from_thread(self._show, again)

    def _failed(self, line: str) -> None:
        self.running = False
        self.query_one("#probe-hint", Static).update(line)

    def _show(self, again: ProfiledAgain) -> None:
        self.running = False
        sides: list[Side] = [("now", again.now)]
        if again.then:
            sides.insert(0, ("then", again.then))
        self.query_one("#probe-breakdown", Static).update(self._bars(sides))
        said = "\n".join(f"finding: {f.text}" for f in again.findings)
        self.query_one("#probe-findings", Static).update(said)
        trace = again.now.get("trace")
        where = f": probes/{trace}" if trace else ""
        notes = "".join(f"\n{note}" for note in again.notes)  # a box made again, a trace lost
        self.query_one("#probe-hint", Static).update(f"profiled again{where}{notes}")
