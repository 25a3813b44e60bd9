"""The RESULTS screen: baseline against recommendation, what each stage gave, export, and
the real runs against the claim (`v`: `tuneup verify DIR` in a worker thread).

It needs only summary.json's content and the probes, so a finished live
session and a results folder opened for review (`load_results`) look the same.
Where a step's time goes is shown as journaled, then read again from the traces in
the folder on a worker's thread (tuning/results/profile_traces.py): a session
recorded before the device was read tells the device's story without a GPU.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any, ClassVar

from rich.table import Table
from textual.app import ComposeResult
from textual.binding import Binding, BindingType
from textual.containers import Horizontal, VerticalScroll
from textual.message import Message
from textual.screen import Screen
from textual.widgets import Button, Footer, Static

from tuneup.errors import UsageError
from tuneup.export.session import SessionExport, read_session_export, render_session
from tuneup.export.slurm import hints_from_session
from tuneup.paths import atomic_write_text
from tuneup.probe.describe import sps_text
from tuneup.probe.types import ProbeResult
from tuneup.trainers.adapters import load_trainer
from tuneup.tui.screens.probe import ProbeScreen, Profiler
from tuneup.tui.widgets.breakdown import breakdown_table, findings_text
from tuneup.tui.widgets.gain_bars import GainBars, stage_gains
from tuneup.tui.widgets.ladder import LadderTable
from tuneup.tui.widgets.verify_panel import Verifier, VerifyPanel
from tuneup.tuning.results.journal import ResultsDir
from tuneup.tuning.results.profile_traces import read_again
from tuneup.tuning.results.stage_rows import stopped_during, unfinished
from tuneup.tuning.results.summary import Summary
from tuneup.tuning.results.verdicts import gain_text
from tuneup.verify.session import verify_folder

# tuneup's export formats -> file name in the results folder (a trainer that exports its
# sessions in formats of its own names their files: SessionExport.file_name).
EXPORT_FILES = {
    "yaml": "tuned.yaml",
    "flags": "flags.txt",
    "env": "env.sh",
    "sbatch": "job.sbatch",
    "tuneup": "tuneup.yaml",
}


def load_results(folder: Path) -> tuple[Summary, list[ProbeResult]]:
    """A finished session's summary and journaled probes, for review.

    Raises:
        UsageError: not a results folder, or the session never finished.
    """
    results = ResultsDir(Path(folder))
    results.session()  # a clear error when this is not a results folder at all
    return results.summary(), results.results()


def session_hints(folder: Path) -> dict[str, Any]:
    """Export hints from session.json: the preset's, with the probed layout and job over them.

    Empty when session.json is unreadable, as `tuneup export` would fail on it.
    """

    try:
        return hints_from_session(ResultsDir(Path(folder)).session())
    except UsageError:
        return {}


def export_all(
    values: Mapping[str, Any], folder: Path, hints: Mapping[str, Any] | None = None
) -> list[Path]:
    """Write every export format of the session in `folder` there; returns the files written.

    What the session recorded (the ranks and data measured, a command trainer's
    command) shapes the exports as `tuneup export` makes them; `values` and
    `hints` are the ones shown.
    """

    try:
        recorded = read_session_export(Path(folder))
    except UsageError:  # no finished session there: the values and hints alone
        recorded = SessionExport(values=dict(values))
    export = dataclasses.replace(
        recorded,
        values=dict(values),
        hints=dict(hints) if hints is not None else recorded.hints,
        # values changed on the screen are no session's answer: every format carries them
        answers=recorded.answers if dict(values) == recorded.values else (),
    )
    written = []
    for fmt in export.formats:
        name = export.file_name(fmt) or EXPORT_FILES.get(fmt, f"export.{fmt}")
        target = Path(folder) / name
        atomic_write_text(target, render_session(export, fmt), "an export")
        written.append(target)
    return written


def answers_lines(summary: Summary) -> list[str]:
    """A line per run the user may do whose answer is not the recommendation as it is (the
    tutorial's train.py, where it cannot run the GPU-resident loader): its own settings and
    its own measured factor."""
    lines = []
    for answer in summary.targets[1:]:
        if answer.same:
            continue
        own = ", ".join(f"{k}={v}" for k, v in answer.changes.items()) or "the baseline"
        if answer.factor is not None and answer.upheld is not False:
            lines.append(f"{answer.label}: {answer.factor:.2f}x with {own}")
        else:
            lines.append(f"{answer.label}: {answer.note or 'keeps its baseline'}")
    return lines


def comparison_table(summary: Summary) -> Table:
    """Baseline and recommendation side by side: IO, SYNTHETIC, FULL and the FULL spread."""
    table = Table(expand=True, box=None, header_style="bold")
    for column in ("", "IO", "SYNTHETIC", "FULL", "IQR"):
        table.add_column(column, justify="left" if not column else "right")
    for name, rates in (("baseline", summary.baseline), ("recommendation", summary.recommendation)):
        iqr = rates.iqr_pct
        table.add_row(
            name,
            sps_text(rates.io_sps),
            sps_text(rates.synthetic_sps),
            sps_text(rates.full_sps),
            "-" if iqr is None else f"{iqr:.1f}%",
        )
    return table


def speedup_text(summary: Summary) -> str:
    """The confirmed speedup with its spread, and how it was measured."""
    gain = summary.speedup
    if gain.value is None:
        return "speedup: unknown"
    return f"speedup: {gain_text(gain.value, gain.low, gain.high, gain.pairs)} [{gain.method}]"


def notes_text(summary: Summary, probes: Sequence[ProbeResult] = ()) -> str:
    """A ladder stopped before its end (a stage under way with the probes it ran, never said
    as not run), the stages it could not measure, and what the session saw of the machine
    (unstable, contended, drifting): shown first."""
    lines = []
    if summary.partial is not None:
        under_way, never = unfinished(summary.partial.not_run, probes)
        stopped = [f"; {stage}: {stopped_during(n)}" for stage, n in under_way]
        not_run = ", ".join(never) or "none"
        lines.append(
            f"partial: {summary.partial.why}{''.join(stopped)}; not run: {not_run} "
            "(r resumes the ladder)"
        )
    for stage, why in summary.unmeasured:
        lines.append(f"not measured: {stage} ({why}); r measures it again (as --retry-failed)")
    return "\n".join(lines + [f"note: {n}" for n in summary.notes])


def confirmation_text(summary: Summary) -> str:
    """Whether the confirmation upheld the search's pick, in one line."""
    conf = summary.confirmation
    if conf is None and summary.partial is not None:
        return "confirmation: not yet (the ladder stopped before it)"
    if conf is None:
        return "confirmation: none ran (nothing was adopted)"
    if conf.status == "confirmed":
        return "confirmation: the search's pick held up in interleaved pairs"
    searched = " + ".join(conf.search_path)
    kept = " + ".join(conf.path) or "the baseline"
    return f"confirmation: {conf.status}: the search picked {searched}; it upheld {kept}"


def changes_text(summary: Summary) -> str:
    base = summary.baseline.values
    changes = summary.recommendation.changes
    if not changes:
        return "changes: none (keep the baseline)"
    parts = [f"{k}: {base.get(k, 'default')} -> {v}" for k, v in changes.items()]
    return "changes: " + ", ".join(parts)


def verdict_text(summary: Summary) -> str:
    lines = []
    for moment, verdict in (("before", summary.before), ("after", summary.after)):
        if verdict is not None and verdict.sentence:
            lines.append(f"{moment}: {verdict.sentence}")
    return "\n".join(lines) or "no verdict"


class ResultsScreen(Screen[None]):
    """One session's results; `e` (or the button) writes every export format to its folder.

    Args:
        summary: the session's summary.json, typed.
        probes: the session's probes, in order (for the count of what ran).
        results_dir: the session's folder, where exports are written.
        hints: the preset's machine hints for env/sbatch; read from session.json when None.
        profiler: profiles a probe again from its row (tuning/session/profile_again.py when None).
        verifier: runs the real runs of `v` (verify/session.verify_folder by default).
    """

    DEFAULT_CSS = """
    ResultsScreen #results-body { height: 1fr; }
    ResultsScreen .box {
        height: auto;
        border: round $primary;
        border-title-align: left;
        padding: 0 1;
    }
    ResultsScreen #results-headline { text-style: bold; padding: 0 1; }
    ResultsScreen #results-notes { color: $warning; text-style: bold; padding: 0 1; }
    ResultsScreen #results-actions { height: auto; padding: 0 1; }
    ResultsScreen #results-exported { padding: 0 1; height: auto; }
    ResultsScreen #results-probes { height: auto; max-height: 20; }
    ResultsScreen #results-actions Button { margin-right: 1; }
    """

    BINDINGS: ClassVar[list[BindingType]] = [
        Binding("e", "export", "export"),
        Binding("v", "verify", "verify"),
        Binding("r", "resume", "resume / retry"),
        Binding("escape", "back", "back"),
        Binding("q", "quit_app", "quit"),
    ]

    class RetryFailed(Message):
        """`r` on a finished session that left stages unmeasured: the app measures them
        again (`tuneup probe --resume DIR --retry-failed`); a host without a session to
        rebuild lets it pass."""

        def __init__(self, folder: Path) -> None:
            super().__init__()
            self.folder = folder

    def __init__(
        self,
        summary: Summary,
        probes: Sequence[ProbeResult],
        results_dir: Path,
        *,
        hints: Mapping[str, Any] | None = None,
        profiler: Profiler | None = None,
        verifier: Verifier = verify_folder,
    ) -> None:
        super().__init__()
        self.profiler = profiler
        self.verifier = verifier
        self.summary = summary
        self.probes = list(probes)
        self.results_dir = Path(results_dir)
        self.hints = dict(hints) if hints is not None else None
        self.exported: list[Path] = []

    @classmethod
    def from_folder(cls, folder: Path) -> ResultsScreen:
        """Review mode: the screen of a finished session's results folder."""
        summary, probes = load_results(folder)
        return cls(summary, probes, folder)

    def compose(self) -> ComposeResult:
        summary = self.summary
        headline = summary.recommendation.headline
        ran = sum(1 for p in self.probes if p.status.value != "skipped")
        title = f"{summary.preset} / {summary.trainer}: {summary.search} search, {ran} probes"
        needed = summary.needed_text()
        if needed:  # the noise the decisions used, not a bound for pairs that never ran
            title += f", a gain had to clear {needed}"
        simulated = _simulated(summary.trainer)
        with VerticalScroll(id="results-body"):
            notes = notes_text(summary, self.probes)
            if notes:
                yield Static(notes, id="results-notes")
            yield Static(headline, id="results-headline")
            comparison = Static(comparison_table(summary), id="results-comparison", classes="box")
            comparison.border_title = title
            yield comparison
            batch = summary.recommendation.batch_note
            yield Static(
                "\n".join(
                    [speedup_text(summary), confirmation_text(summary), changes_text(summary)]
                    + ([f"batch: {batch}"] if batch else [])
                    + answers_lines(summary)
                ),
                id="results-speedup",
                classes="box",
            )
            verified = VerifyPanel(
                summary.verify,
                self.results_dir,
                simulated=simulated,
                verifier=self.verifier,
                id="results-verified",
                classes="box",
            )
            verified.border_title = "verified: real runs against the claim"
            yield verified
            yield GainBars(stage_gains(summary.stages), id="results-gains")
            verdict = Static(verdict_text(summary), id="results-verdict", classes="box")
            verdict.border_title = "bottleneck"
            yield verdict
            profile = summary.document.get("profile")
            bars = breakdown_table(profile)
            if bars is not None:  # as journaled; read again from the traces on mount
                steps = Static(bars, id="results-breakdown", classes="box")
                steps.border_title = "where a step's time goes (profiled steps)"
                yield steps
                found = Static(findings_text(profile), id="results-findings", classes="box")
                found.display = bool(findings_text(profile))
                yield found
            with Horizontal(id="results-actions"):
                yield Button("Export all formats (e)", id="export", variant="success")
                yield Button(
                    "Verify: run it for real (v)",
                    id="verify",
                    variant="primary",
                    disabled=simulated,  # nothing real to run: the panel says why on v
                )
            yield Static("", id="results-exported")
            shown = [result for result in self.probes if not result.retried]
            probes = LadderTable(id="results-probes", shown=shown)
            probes.border_title = "probes (enter opens one: its breakdown, p profiles it)"
            yield probes
        yield Footer()

    def on_mount(self) -> None:
        if isinstance(self.summary.document.get("profile"), Mapping):
            self.run_worker(self._read_traces, thread=True, exit_on_error=False, name="traces")

    def _read_traces(self) -> None:
        """On a worker's thread (a trace takes a fraction of a second to read): the profiles
        derived again from their traces; the widgets change on the app's thread."""
        document = read_again(self.summary.document, self.results_dir)
        self.app.call_from_thread(self._show_profile, document.get("profile"))

    def _show_profile(self, block: Any) -> None:
        bars = breakdown_table(block)
        shown = self.query("#results-breakdown")
        if bars is None or not shown:
            return
        shown.first(Static).update(bars)
        said = self.query_one("#results-findings", Static)
        said.update(findings_text(block))
        said.display = bool(findings_text(block))

    def on_ladder_table_probe_chosen(self, message: LadderTable.ProbeChosen) -> None:
        opened = ProbeScreen(message.result, message.baseline, self.results_dir)
        if self.profiler is not None:
            opened.profiler = self.profiler
        self.app.push_screen(opened)

    def on_button_pressed(self, event: Button.Pressed) -> None:
        if event.button.id == "export":
            self.action_export()
        elif event.button.id == "verify":
            self.action_verify()

    def action_export(self) -> None:
        values = self.summary.recommendation.values
        shown = self.query_one("#results-exported", Static)
        if not values:
            shown.update("nothing to export: the summary has no recommended values")
            return
        hints = self.hints if self.hints is not None else session_hints(self.results_dir)
        try:
            self.exported = export_all(values, self.results_dir, hints)
        except (UsageError, OSError) as exc:
            shown.update(f"export failed: {exc}")
            self.notify(str(exc), severity="error")
            return
        shown.update("written:\n" + "\n".join(f"  {p}" for p in self.exported))
        # said where it is seen, whatever the terminal's height: the list is below the fold
        names = ", ".join(p.name for p in self.exported)
        self.notify(f"wrote {names} in {self.results_dir}", title="exported", timeout=8)

    def action_verify(self) -> None:
        self.query_one(VerifyPanel).start()

    def check_action(self, action: str, parameters: tuple[object, ...]) -> bool | None:
        """`r` only for a ladder that stopped before its end (a partial summary), or one
        that left stages unmeasured."""
        if action == "resume":
            return self.summary.partial is not None or bool(self.summary.unmeasured)
        return True

    def action_resume(self) -> None:
        """Back to the ladder this partial summary stopped, and on with it; a finished one
        measures its unmeasured stages again (`tuneup probe --resume DIR --retry-failed`)."""
        if self.summary.partial is None:
            if self.summary.unmeasured:
                self.post_message(self.RetryFailed(self.results_dir))
            return
        if len(self.app.screen_stack) <= 2:
            return
        self.app.pop_screen()
        self.app.call_later(self.app.run_action, "resume_session")

    def action_back(self) -> None:
        if len(self.app.screen_stack) > 2:
            self.app.pop_screen()

    def action_quit_app(self) -> None:
        self.app.exit()


def _simulated(trainer: str) -> bool:
    """Whether the session's trainer simulated its probes (nothing real to verify); a
    trainer not installed here is not known to: verify says what it can run."""
    try:
        return load_trainer(trainer).simulated
    except UsageError:
        return False
