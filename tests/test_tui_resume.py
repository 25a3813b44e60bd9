"""The app after a stop, as a new user on a shared machine meets it (issue 50, the app):
`s` then `q`, the folder reopened, `r`. A stage the user skipped stays skipped, the stage
under way when the ladder stopped says so with its probes, and the resumed table lists the
probes in the journal's order, once each."""

from __future__ import annotations

import contextlib
import threading
from collections import Counter
from pathlib import Path
from typing import Any

import pytest

# GPU nodes' offline installs lack textual and plotext: the app's tests skip there.
pytest.importorskip("textual")
pytest.importorskip("plotext")

from textual.widgets import Static
from tuneup_plugins.sim import sim_backend

from tests.test_tui_app import SIZE, make_app, results_shown, run, text, until
from tuneup.probe.backend import ProbeBackend
from tuneup.probe.types import Candidate, ProbeResult, Status
from tuneup.tui.app import TuneupApp
from tuneup.tui.screens.setup import SetupScreen
from tuneup.tui.screens.tune import TuneScreen
from tuneup.tui.widgets.confirm import Confirm
from tuneup.tui.widgets.ladder import LadderTable, ladder_row
from tuneup.tuning.results.journal import ResultsDir
from tuneup.tuning.results.stage_rows import stage_rows
from tuneup.tuning.search.search_records import SearchProgress, StagePlan
from tuneup.tuning.search.staged import partial_outcome, staged_search
from tuneup.tuning.session.engine import Engine


class Paced(ProbeBackend):
    """The sim trainer, holding the probe that follows the n-th of a stage at each stop
    `(stage, n)` until the test lets it go (or the session interrupts it); the probes of
    the stages in `failing` crash while `failing` names them."""

    def __init__(self, *stops: tuple[str, int], failing: set[str] | None = None) -> None:
        self.sim = sim_backend(0)
        self.stops = list(stops)
        self.failing = failing or set()
        self.reached = [threading.Event() for _ in stops]
        self.go = [threading.Event() for _ in stops]
        self.seen: Counter[str] = Counter()

    def __call__(self, stage: str, candidate: Candidate, values: dict[str, Any]) -> ProbeResult:
        for stop, reached, go in zip(self.stops, self.reached, self.go, strict=True):
            if stop == (stage, self.seen[stage]) and not reached.is_set():
                reached.set()
                go.wait(10)
        self.seen[stage] += 1
        if stage in self.failing and candidate.values:
            return ProbeResult(stage, dict(candidate.values), values, Status.CRASH, "boom")
        return self.sim(stage, candidate, values)

    def interrupt(self) -> None:
        for go in self.go:
            go.set()


def paced_app(tmp_path: Path, backend: Paced) -> TuneupApp:
    """The app over the sim trainer, its probes run by `backend`."""
    return make_app(tmp_path, engine=lambda *args, **kwargs: Engine(backend))


def journal(folder: Path) -> list[ProbeResult]:
    return ResultsDir(folder).results()


def stopped_session(tmp_path: Path) -> Path:
    """A ladder started in the app: `s` during workers' third probe, `q` during threads'
    fifth. Returns its folder: a partial summary and the journal so far."""
    backend = Paced(("workers", 2), ("threads", 4))

    async def scenario() -> None:
        app = paced_app(tmp_path, backend)
        async with app.run_test(size=SIZE) as pilot:
            await until(lambda: isinstance(app.screen, SetupScreen), pilot)
            await pilot.click("#start")
            await until(backend.reached[0].is_set, pilot)
            await pilot.press("s")
            backend.go[0].set()
            await until(backend.reached[1].is_set, pilot)
            await pilot.press("q")
            await until(lambda: isinstance(app.screen, Confirm), pilot)
            await pilot.press("y")
            await until(app.driver.finished.is_set, pilot)

    run(scenario)
    return tmp_path / "session"


def resumed_with_r(tmp_path: Path, folder: Path) -> dict[str, Any]:
    """The stopped folder reopened in the app and resumed with `r` on its results: the notes
    the results showed first, the status of the TUNE screen under them, and its table's rows
    once the ladder has finished."""
    shown: dict[str, Any] = {}

    async def scenario() -> None:
        app = make_app(tmp_path, review=folder)
        async with app.run_test(size=SIZE) as pilot:
            await until(lambda: results_shown(app), pilot)
            shown["notes"] = text(app, "#results-notes")
            tune = next(s for s in app.screen_stack if isinstance(s, TuneScreen))
            shown["status"] = str(tune.query_one("#tune-status", Static).content)
            await pilot.press("r")
            await until(lambda: app.driver.started.is_set(), pilot)
            await until(app.driver.finished.is_set, pilot, timeout=20)
            table = tune.query_one(LadderTable)
            ran = [p for p in journal(folder) if not p.retried]
            await until(lambda: table.row_count >= len(ran), pilot)
            await pilot.pause(0.2)  # any row still on its way (a duplicate, say) arrives
            shown["rows"] = [tuple(table.get_row_at(i)) for i in range(table.row_count)]

    run(scenario)
    return shown


def test_after_a_quit_the_stage_under_way_says_what_it_ran_and_r_keeps_the_skip(
    tmp_path: Path,
) -> None:
    """`s` in workers, `q` in threads, the folder reopened, `r` on its partial results."""
    folder = stopped_session(tmp_path)
    before = journal(folder)
    assert sum(p.stage == "threads" for p in before) == 4

    shown = resumed_with_r(tmp_path, folder)

    # the stage under way ran 4 probes: never "not run"
    assert "threads: stopped during it (4 probes)" in shown["notes"]
    not_run = shown["notes"].split("not run: ", 1)[1]
    assert "threads" not in not_run and "amp" in not_run
    # what the user skipped is never measured again; the rest of the ladder ran on
    after = journal(folder)
    assert workers_measured(after) == workers_measured(before) == 3
    assert any(p.stage == "amp" and p.ok for p in after)
    ran = sum(1 for p in before if not p.user_skipped)
    assert shown["status"].startswith(f"stopped after {ran} probe(s): r resumes the ladder")
    (stage,) = [s for s in ResultsDir(folder).summary().stages if s.stage == "workers"]
    assert stage.reason == "skipped by the user after 3 probe(s)"
    # the table: the journal's probes in its order, each once, the new ones after them
    listed = [p for p in after if not p.retried]
    assert [r[:2] for r in shown["rows"]] == [ladder_row(p, None)[:2] for p in listed]


def workers_measured(probes: list[ProbeResult]) -> int:
    """The workers probes that ran (not dropped by the user's `s`)."""
    return sum(p.stage == "workers" and not p.user_skipped for p in probes)


def test_r_on_a_finished_ladder_measures_a_failed_stage_again_never_a_skipped_one(
    tmp_path: Path,
) -> None:
    """`r` on the results (as --retry-failed): amp's crashed probes run again, workers'
    probes the user skipped with `s` do not."""
    backend = Paced(("workers", 2), failing={"amp"})
    folder = tmp_path / "session"
    seen: dict[str, Any] = {}

    async def scenario() -> None:
        app = paced_app(tmp_path, backend)
        async with app.run_test(size=SIZE) as pilot:
            await until(lambda: isinstance(app.screen, SetupScreen), pilot)
            await pilot.click("#start")
            await until(backend.reached[0].is_set, pilot)
            await pilot.press("s")
            backend.go[0].set()
            await until(lambda: results_shown(app), pilot, timeout=20)
            seen["notes"] = text(app, "#results-notes")
            seen["before"] = journal(folder)
            backend.failing.clear()  # whatever crashed amp is gone
            first = app.driver
            await pilot.press("r")
            await until(lambda: app.driver is not first, pilot)
            await until(app.driver.finished.is_set, pilot, timeout=20)

    run(scenario)
    assert "not measured: amp" in seen["notes"] and "workers" not in seen["notes"]
    before, after = seen["before"], journal(folder)
    assert workers_measured(after) == workers_measured(before) == 3
    assert any(p.stage == "amp" and p.ok for p in after[len(before) :]), "amp measured again"
    assert ResultsDir(folder).summary().unmeasured == ()


def test_the_ladders_rows_say_a_stage_stopped_during_it_with_its_probes() -> None:
    """`tuneup probe`'s final table words the stage under way as the app does."""
    progress = SearchProgress()
    plans = [
        StagePlan(name, [Candidate(f"{name}=on", {"speed": speed})])
        for name, speed in (("first", 130.0), ("second", 140.0), ("third", 150.0))
    ]
    seen: Counter[str] = Counter()

    def measure(stage: str, cand: Candidate, values: dict[str, Any]) -> ProbeResult:
        if stage == "second" and seen[stage] == 1:
            raise KeyboardInterrupt  # the stop, as a signal brings it
        seen[stage] += 1
        speed = float(values["speed"])
        trials = [speed * (1 + d / 1000) for d in (-2, -1, 0, 1, 2)]
        return ProbeResult(
            stage, dict(cand.values), dict(values), Status.OK, full_sps=speed,
            full_sps_trials=trials, losses=[0.12, 0.1, 0.09],
        )  # fmt: skip

    with contextlib.suppress(KeyboardInterrupt):
        staged_search({"speed": 100.0}, plans, measure, progress=progress)
    outcome = partial_outcome(progress, "stopped by the user", [p.name for p in plans])
    assert outcome is not None
    rows = {row.stage: row for row in stage_rows(outcome)}
    assert (rows["second"].result, rows["second"].probes) == ("stopped during it (1 probe)", 1)
    assert rows["third"].result == "not run: the ladder stopped"
