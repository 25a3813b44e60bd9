"""The TUNE screen: the ladder filling in live while a SessionDriver runs on a thread.

The driver posts messages; every widget changes in a handler here. When the
session ends the RESULTS screen is pushed (unless `results_on_finish=False`).
"""

from __future__ import annotations

from typing import Any, ClassVar

from textual.app import ComposeResult
from textual.binding import Binding, BindingType
from textual.containers import Horizontal
from textual.screen import Screen
from textual.widgets import Footer, ProgressBar, RichLog, Static

from tuneup.costs.estimate import time_left_text
from tuneup.errors import UsageError
from tuneup.probe.describe import result_line, session_ranks, sps_text
from tuneup.probe.events import ErrorEvent, Event, StartEvent, TrialEvent, WarmupEvent
from tuneup.tui.driver import SessionDriver
from tuneup.tui.screens.probe import ProbeScreen
from tuneup.tui.screens.results import ResultsScreen, export_all, session_hints
from tuneup.tui.widgets.chart import Chart, Series
from tuneup.tui.widgets.confirm import Confirm
from tuneup.tui.widgets.ladder import LadderTable
from tuneup.tuning.results.journal import quoted, where_it_stands
from tuneup.tuning.results.summary import Summary
from tuneup.tuning.results.verdicts import bottleneck

HELP = (
    "p pause/resume after the current probe · s skip the rest of this stage · "
    "e export (when finished) · m monitor · r resume a stopped ladder · "
    "q quit (stops the ladder; the journal stays, and tuneup says how to resume it)"
)


def phase_text(event: Event) -> str | None:
    """What the running probe is doing, from one worker event (None: nothing to show)."""
    if isinstance(event, StartEvent):
        return "starting the worker"
    if isinstance(event, WarmupEvent):
        steps = "?" if event.steps is None else event.steps
        return f"warmed up in {steps} steps; measuring"
    if isinstance(event, TrialEvent):
        index = "?" if event.index is None else event.index
        return f"{event.phase.upper()} trial {index}: {sps_text(event.samples_per_s)} samples/s"
    if isinstance(event, ErrorEvent):
        return f"error: {event.kind}"
    return None


class TuneScreen(Screen[None]):
    """A live probe session; starts `driver.run()` in a thread worker when mounted."""

    DEFAULT_CSS = """
    TuneScreen #tune-title { height: 1; padding: 0 1; text-style: bold; }
    TuneScreen #tune-status { height: 1; padding: 0 1; }
    TuneScreen #tune-progress { height: 1; padding: 0 1; }
    TuneScreen #tune-bottom { height: 12; }
    TuneScreen #tune-chart { width: 1fr; height: 1fr; border: round $primary; }
    TuneScreen #tune-gpu-util, TuneScreen #tune-gpu-power {
        width: 1fr;
        height: 1fr;
        border: round $panel;
    }
    TuneScreen #tune-verdict {
        width: 1fr;
        height: 1fr;
        border: round $secondary;
        border-title-align: left;
        padding: 0 1;
    }
    TuneScreen #tune-log { height: 7; border: round $panel; }
    /* a short terminal (80x24): the table first; the charts go, the log keeps its last lines */
    TuneScreen.-short #tune-bottom { display: none; }
    TuneScreen.-short #tune-log { height: 4; }
    """
    SHORT = 32  # rows below which the charts make way for the table

    BINDINGS: ClassVar[list[BindingType]] = [
        Binding("p", "pause", "pause/resume"),
        Binding("s", "skip", "skip stage"),
        Binding("e", "export", "export"),
        Binding("m", "monitor", "monitor"),
        Binding("r", "resume", "resume the ladder"),
        Binding("question_mark", "help", "help"),
        Binding("q", "quit_session", "quit"),
    ]

    def __init__(
        self,
        driver: SessionDriver,
        *,
        start: bool = True,
        results_on_finish: bool = True,
        gpu_feed: Any = None,
    ) -> None:
        super().__init__()
        self.driver = driver
        self.gpu_feed = gpu_feed  # a Sampler (live or replayed): GPU charts when given
        self.start_on_mount = start
        self.results_on_finish = results_on_finish
        self.ranks = 1  # the session's ranks, from its start
        self.done = 0
        self.total = 0
        self.finished = False
        self.quitting = False
        self.current = ""
        self.left = ""  # the ladder's expected time left, as the session last said it
        self.exported: list[Any] = []
        self._points: list[tuple[float, float]] = []

    def compose(self) -> ComposeResult:
        yield Static("tuneup: starting", id="tune-title")
        yield Static("", id="tune-status")
        yield ProgressBar(total=None, show_eta=False, id="tune-progress")
        yield LadderTable(id="tune-ladder")
        with Horizontal(id="tune-bottom"):
            yield Chart("FULL samples/s per probe", id="tune-chart")
            if self.gpu_feed is not None:
                yield Chart("GPU utilization %", color="green", id="tune-gpu-util")
                yield Chart("GPU power W", color="yellow", id="tune-gpu-power")
            verdict = Static("waiting for the baseline", id="tune-verdict")
            verdict.border_title = "bottleneck"
            yield verdict
        yield RichLog(id="tune-log", wrap=False, markup=False, highlight=False)
        yield Footer()

    def on_resize(self) -> None:
        self.set_class(self.size.height < self.SHORT, "-short")

    def on_mount(self) -> None:
        self.set_class(self.app.size.height < self.SHORT, "-short")
        if self.gpu_feed is not None:
            self.set_interval(1.0, self._refresh_gpu_charts)
        if self.start_on_mount:
            self._run_session()
        else:
            self.driver.post = self.post_message
            self._show_journal()

    def _run_session(self) -> None:
        """The driver's session on a thread worker, its messages handled here."""
        self.driver.post = self.post_message
        self.run_worker(self.driver.run, thread=True, exit_on_error=False, name="probe-session")

    def _show_journal(self) -> None:
        """An interrupted session reopened: what its journal holds, and what r would do."""
        results = self.driver.session.results
        info = results.session()
        self.query_one("#tune-title", Static).update(
            f"tuneup: preset {info.get('preset')} · trainer {info.get('trainer')} · "
            f"{results.path} (stopped)"
        )
        probes = [r for r in results.results() if not r.retried]
        ladder = self.query_one(LadderTable)
        for result in probes:
            ladder.add_result(result, reused=True)
        baseline = next((r for r in probes if r.stage == "baseline" and r.ok), None)
        if baseline is not None:
            _kind, sentence = bottleneck(baseline.io_sps, baseline.synthetic_sps, baseline.full_sps)
            self.query_one("#tune-verdict", Static).update(f"baseline: {sentence}")
        ran = sum(1 for r in probes if not r.user_skipped)  # those the user's s dropped did not
        self._show_status(
            f"stopped after {ran} probe(s): r resumes the ladder from there "
            "(finished probes are not run again, nor those skipped with s)"
        )

    def check_action(self, action: str, parameters: tuple[object, ...]) -> bool | None:
        """`r` is offered only on a stopped session not yet resumed."""
        if action == "resume":
            return not self.start_on_mount and not self.driver.started.is_set()
        return True

    def action_resume(self) -> None:
        """The stopped ladder goes on here, from its journal."""
        if self.driver.started.is_set():
            return
        self._run_session()  # its Started empties the table, which the journal's replay fills
        self.refresh_bindings()

    def _refresh_gpu_charts(self) -> None:
        """Redraw the GPU charts from the sampler's ring buffer (a copy under its lock)."""
        util, power = gpu_series(self.gpu_feed.history(GPU_WINDOW_S))
        self.query_one("#tune-gpu-util", Chart).plot(util)
        self.query_one("#tune-gpu-power", Chart).plot(power)

    # Messages from the driver (posted from its thread, handled here).

    def on_session_driver_started(self, message: SessionDriver.Started) -> None:
        # A resume replays its journal from the first probe, in the journal's order, however
        # it was started (here, or r on the results of a partial summary): the rows shown
        # before it go, or they would stand twice and out of order.
        self.query_one(LadderTable).restart()
        self._points.clear()
        self.done = 0
        info = message.info
        self.total = message.total
        self.ranks = session_ranks(info)
        ranks = f" · {self.ranks} ranks" if self.ranks > 1 else ""
        stages = len(info.get("stages", []))
        self.query_one("#tune-title", Static).update(
            f"tuneup: preset {info.get('preset')} · trainer {info.get('trainer')}{ranks} · "
            f"{info.get('search')} search, {stages} stage(s)"
        )
        self.query_one(ProgressBar).update(total=message.total, progress=0)

    def on_session_driver_total_changed(self, message: SessionDriver.TotalChanged) -> None:
        self.total = message.total
        self.query_one(ProgressBar).update(total=max(self.total, self.done))

    def on_session_driver_time_left(self, message: SessionDriver.TimeLeft) -> None:
        self.left = time_left_text(message.seconds, message.basis)

    def on_session_driver_note(self, message: SessionDriver.Note) -> None:
        self.query_one(RichLog).write(f"tuneup: {message.line}")

    def on_session_driver_probe_started(self, message: SessionDriver.ProbeStarted) -> None:
        self.current = f"{message.stage}: {message.label}"
        self._show_status("running")

    def on_session_driver_worker_event(self, message: SessionDriver.WorkerEvent) -> None:
        text = phase_text(message.event)
        if text is not None:
            self._show_status(text)

    def on_session_driver_probe_done(self, message: SessionDriver.ProbeDone) -> None:
        result = message.result
        ladder = self.query_one(LadderTable)
        first_baseline = ladder.baseline is None
        ladder.add_result(result, message.reused)
        self.done += 1
        bar = self.query_one(ProgressBar)
        bar.update(total=max(self.total, self.done), progress=self.done)
        line = result_line(result, ladder.baseline, message.reused, ranks=self.ranks)
        self.query_one(RichLog).write(f"[{self.done}/~{max(self.total, self.done)}] {line}")
        if result.ok and result.full_sps is not None:
            self._points.append((float(self.done), float(result.full_sps)))
            xs, ys = zip(*self._points, strict=True)
            self.query_one(Chart).plot(Series(xs=tuple(xs), ys=tuple(ys)))
        if first_baseline and ladder.baseline is not None:
            _kind, sentence = bottleneck(result.io_sps, result.synthetic_sps, result.full_sps)
            self.query_one("#tune-verdict", Static).update(f"baseline: {sentence}")
        self.current = ""
        self._show_status("paused" if self.driver.paused else "between probes")

    def on_session_driver_finished(self, message: SessionDriver.Finished) -> None:
        self.finished = True
        log = self.query_one(RichLog)
        if message.error:
            log.write(f"tuneup: the session failed: {message.error}")
            self._show_status(f"failed: {message.error.splitlines()[0]}")
            self.notify(message.error.splitlines()[0], severity="error", timeout=10)
        elif message.interrupted:
            folder = self.driver.session.results.path
            for line in where_it_stands(folder):
                log.write(f"tuneup: stopped; {line}")
            self._show_status(f"stopped (resume with tuneup probe --resume {quoted(folder)})")
        else:
            summary = message.summary or Summary()
            verdicts = (("before", summary.before), ("after", summary.after))
            lines = [f"{moment}: {v.sentence}" for moment, v in verdicts if v is not None]
            self.query_one("#tune-verdict", Static).update("\n".join(lines))
            headline = summary.recommendation.headline
            for note in summary.notes:
                log.write(f"note: {note}")
            log.write(headline)
            self._show_status("finished: " + headline)
        if self.quitting:
            self.app.exit()
            return
        if message.summary is not None and self.results_on_finish:
            self.app.push_screen(
                ResultsScreen(
                    message.summary,
                    message.outcome.probes if message.outcome else [],
                    self.driver.session.results.path,
                    hints=session_hints(self.driver.session.results.path),
                )
            )

    def _show_status(self, doing: str) -> None:
        head = "PAUSED · " if self.driver.paused and not self.finished else ""
        where = f"{self.current} · " if self.current else ""
        left = f" · ladder: {self.left}" if self.left and not self.finished else ""
        self.query_one("#tune-status", Static).update(f"{head}{where}{doing}{left}")

    # Keys.

    def action_pause(self) -> None:
        if self.finished:
            return
        if self.driver.paused:
            self.driver.resume()
            self.query_one(RichLog).write("tuneup: resumed")
            self._show_status("resumed")
        else:
            self.driver.pause()
            self.query_one(RichLog).write("tuneup: pausing after the current probe")
            self._show_status("pausing after the current probe")

    def action_skip(self) -> None:
        if self.finished:
            return
        self.driver.skip_stage()
        stage = self.driver.session.control.current_stage or "the current stage"
        self.query_one(RichLog).write(f"tuneup: skipping the rest of {stage}")

    def action_export(self) -> None:
        summary = self.driver.summary
        if not self.finished or summary is None:
            self.notify("export is possible once the ladder has finished", severity="warning")
            return
        folder = self.driver.session.results.path
        hints = session_hints(folder)
        try:
            self.exported = export_all(summary.recommendation.values, folder, hints)
        except (UsageError, OSError) as exc:  # a full disk, say: earlier exports stay whole
            self.query_one(RichLog).write(f"tuneup: export failed: {exc}")
            self.notify(str(exc), severity="error")
            return
        for path in self.exported:
            self.query_one(RichLog).write(f"exported {path}")

    def on_ladder_table_probe_chosen(self, message: LadderTable.ProbeChosen) -> None:
        """A row opened: its breakdown, and `p` to profile it once the ladder is not running."""

        def why_not() -> str | None:
            if self.driver.running:
                return "once the ladder has stopped or finished (beside it, both share the machine)"
            return None

        folder = self.driver.session.results.path
        self.app.push_screen(ProbeScreen(message.result, message.baseline, folder, why_not))

    async def action_monitor(self) -> None:
        if hasattr(self.app, "action_monitor"):
            await self.app.run_action("monitor")
        else:
            self.notify("the monitor is not available here")

    def action_help(self) -> None:
        self.notify(HELP, title="keys", timeout=8)

    def action_quit_session(self) -> None:
        if self.finished or not self.driver.running:
            self.app.exit()
            return

        def answered(yes: bool | None) -> None:
            if yes:
                self.quitting = True
                self._show_status("stopping the current probe")
                self.driver.stop()  # the Finished message then exits the app

        self.app.push_screen(
            Confirm(
                "A probe is running. Stop the session? Finished probes stay journaled; "
                "tuneup says how to resume it when the app closes."
            ),
            answered,
        )


GPU_WINDOW_S = 300.0


def gpu_series(history: Any) -> tuple[Series, Series]:
    """Mean utilization and total power over the watched GPUs, per reading time."""
    util: dict[float, list[float]] = {}
    power: dict[float, list[float]] = {}
    for sample in history:
        stamp = round(sample.time, 1)
        if sample.util_gpu_pct is not None:
            util.setdefault(stamp, []).append(sample.util_gpu_pct)
        if sample.power_w is not None:
            power.setdefault(stamp, []).append(sample.power_w)
    newest = max([*util, *power], default=0.0)

    def series(points: dict[float, list[float]], combine: Any, y_lim: Any) -> Series:
        xs = tuple(t - newest for t in sorted(points))
        ys = tuple(combine(points[t]) for t in sorted(points))
        return Series(xs=xs, ys=ys, x_lim=(-GPU_WINDOW_S, 0.0), y_lim=y_lim)

    return (
        series(util, lambda v: sum(v) / len(v), (0.0, 100.0)),
        series(power, sum, None),
    )
