"""The TUNE screen driving a real ProbeSession over the `sim` trainer, through the Pilot."""

from __future__ import annotations

import asyncio
import importlib.util
import json
import threading
import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import pytest

# GPU nodes' offline installs lack textual and plotext: the app's tests skip there.
pytest.importorskip("textual")
pytest.importorskip("plotext")

from rich.text import Text
from textual.app import App
from textual.screen import Screen
from textual.widgets import Static
from tuneup_plugins.sim import sim_backend, sim_stage_plans

from tuneup.config import load_config
from tuneup.hardware.types import MachineInfo
from tuneup.preset.load import load_preset
from tuneup.probe.types import Candidate, ProbeResult, Status
from tuneup.trainers.adapters import load_trainer
from tuneup.tui.driver import SessionDriver
from tuneup.tui.screens.results import ResultsScreen
from tuneup.tui.screens.tune import TuneScreen
from tuneup.tui.widgets.confirm import Confirm
from tuneup.tui.widgets.ladder import LadderTable
from tuneup.tuning.results.journal import ResultsDir
from tuneup.tuning.session.probe_session import ProbeSession

SIZE = (120, 40)
MACHINE = MachineInfo(cuda=True, gpu_count=1, cpus_usable=32)


class GatedSim:
    """The sim trainer, holding the probes of `hold` until the gate opens (or interrupt())."""

    def __init__(self, hold: str | None = None, seed: int = 1) -> None:
        self.sim = sim_backend(seed)
        self.hold = hold
        self.held = threading.Event()
        self.gate = threading.Event()
        self.interrupted = False

    def __call__(self, stage: str, candidate: Candidate, values: dict[str, Any]) -> ProbeResult:
        if stage == self.hold and not self.gate.is_set():
            self.held.set()
            self.gate.wait(10)
        return self.sim(stage, candidate, values)

    def interrupt(self) -> None:
        self.interrupted = True
        self.gate.set()


def make_driver(folder: Path, backend: Any) -> SessionDriver:
    preset = load_preset("cpu-smoke")
    driver = SessionDriver()
    session = ProbeSession(
        preset=preset,
        adapter=load_trainer("sim"),
        backend=backend,
        results=ResultsDir(folder),
        machine=MACHINE,
        base_values={**preset.train, "device": "cuda"},
        plans=sim_stage_plans(MACHINE),
        reporter=driver,
    )
    return driver.attach(session)


class Host(App[None]):
    """A bare app that shows one screen, as the real app shell will."""

    def __init__(self, make: Callable[[], Screen[Any]]) -> None:
        super().__init__()
        self.make = make

    def on_mount(self) -> None:
        self.push_screen(self.make())


def run(test: Callable[[], Awaitable[None]]) -> None:
    asyncio.run(test())


async def until(condition: Callable[[], bool], pilot: Any, timeout: float = 15.0) -> None:
    loop = asyncio.get_running_loop()
    end = loop.time() + timeout
    while not condition():
        if loop.time() > end:
            raise AssertionError("the screen did not get there in time")
        await pilot.pause(0.05)


def ladder(app: App[Any]) -> LadderTable:
    return next(s for s in app.screen_stack if isinstance(s, TuneScreen)).query_one(LadderTable)


def test_the_ladder_fills_in_and_the_results_screen_shows_the_headline(tmp_path: Path) -> None:
    driver = make_driver(tmp_path / "run", GatedSim())
    app = Host(lambda: TuneScreen(driver))

    async def go() -> None:
        async with app.run_test(size=SIZE) as pilot:
            await until(lambda: results_shown(app), pilot)
            journal = ResultsDir(tmp_path / "run").results()
            assert ladder(app).row_count == len(journal) == len(driver.outcome.probes)  # type: ignore[union-attr]
            stages = {ladder(app).get_row_at(i)[0] for i in range(ladder(app).row_count)}
            assert {"baseline", "workers", "amp", "confirm"} <= stages
            headline = str(app.screen.query_one("#results-headline", Static).content)
            assert headline.startswith("recommendation:") and "x faster" in headline
            assert headline == driver.summary.recommendation.headline  # type: ignore[union-attr]

    run(go)


def test_pause_holds_the_ladder_until_p_again(tmp_path: Path) -> None:
    backend = GatedSim(hold="workers")
    driver = make_driver(tmp_path / "run", backend)
    app = Host(lambda: TuneScreen(driver))

    async def go() -> None:
        async with app.run_test(size=SIZE) as pilot:
            await until(backend.held.is_set, pilot)
            await pilot.press("p")
            assert driver.paused
            before = ladder(app).row_count
            backend.gate.set()  # the running probe finishes; the next one must wait
            await until(lambda: ladder(app).row_count == before + 1, pilot)
            await pilot.pause(0.4)
            assert ladder(app).row_count == before + 1 and not driver.finished.is_set()
            status = str(app.screen.query_one("#tune-status", Static).content)
            assert "PAUSED" in status
            await pilot.press("p")
            await until(lambda: results_shown(app), pilot)
            assert ladder(app).row_count > before + 1

    run(go)


def test_skip_marks_the_rest_of_the_stage_skipped(tmp_path: Path) -> None:
    backend = GatedSim(hold="workers")
    driver = make_driver(tmp_path / "run", backend)
    app = Host(lambda: TuneScreen(driver))

    async def go() -> None:
        async with app.run_test(size=SIZE) as pilot:
            await until(backend.held.is_set, pilot)
            await pilot.press("s")
            assert driver.session.control.skipping("workers")
            backend.gate.set()
            await until(lambda: results_shown(app), pilot)
            table = ladder(app)
            rows = [table.get_row_at(i) for i in range(table.row_count)]
            workers = [r for r in rows if r[0] == "workers"]
            assert len(workers) > 1
            assert workers[0][-1] == "ok" and workers[0][1] == "num_data_workers=4"
            assert all(r[-1].startswith("skipped: skipped by the user") for r in workers[1:])
            assert any(r[0] == "amp" and r[-1] == "ok" for r in rows), "later stages still run"

    run(go)


def test_quit_while_running_asks_then_stops_with_the_journal_intact(tmp_path: Path) -> None:
    backend = GatedSim(hold="workers")
    driver = make_driver(tmp_path / "run", backend)
    app = Host(lambda: TuneScreen(driver))

    async def go() -> None:
        async with app.run_test(size=SIZE) as pilot:
            await until(backend.held.is_set, pilot)
            await pilot.press("q")
            await until(lambda: isinstance(app.screen, Confirm), pilot)
            assert not driver.finished.is_set(), "nothing stops before the answer"
            await pilot.press("y")
            await until(driver.finished.is_set, pilot)
            await pilot.pause(0.2)

    run(go)
    assert backend.interrupted and driver.interrupted and not app.is_running
    lines = (tmp_path / "run" / "journal.jsonl").read_text().splitlines()
    stages = [json.loads(line)["stage"] for line in lines]
    assert stages and stages[0] == "baseline" and "confirm" not in stages
    summary = json.loads((tmp_path / "run" / "summary.json").read_text())
    assert summary["partial"]["why"].startswith("stopped by the user")  # the answer so far


def test_e_on_the_results_screen_writes_exports_that_load_back(tmp_path: Path) -> None:
    folder = tmp_path / "run"
    driver = make_driver(folder, GatedSim())
    app = Host(lambda: TuneScreen(driver))

    async def go() -> None:
        async with app.run_test(size=SIZE) as pilot:
            await until(lambda: results_shown(app), pilot)
            await pilot.press("e")
            await until(lambda: bool(app.screen.exported), pilot)  # type: ignore[attr-defined]
            listed = str(app.screen.query_one("#results-exported", Static).content)
            assert all(str(p) in listed for p in app.screen.exported)  # type: ignore[attr-defined]

    run(go)
    changes = driver.summary.recommendation.changes  # type: ignore[union-attr]
    assert changes, "the sim ladder recommends something"
    for cfg in (load_config(folder / "tuned.yaml", "tuned"), load_config(folder / "tuneup.yaml")):
        for knob, value in changes.items():
            assert getattr(cfg, knob) == value
    for name in ("flags.txt", "env.sh", "job.sbatch"):
        assert (folder / name).read_text().strip()


@pytest.mark.skipif(
    importlib.util.find_spec("pytest_textual_snapshot") is None,
    reason="needs pytest-textual-snapshot (the test extra)",
)
@pytest.mark.parametrize("size", [(80, 24), (120, 40)], ids=["80x24", "120x40"])
def test_screenshot_of_the_finished_ladder(
    snap_compare: Callable[..., bool],
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    size: tuple[int, int],
) -> None:
    monkeypatch.chdir(tmp_path)
    driver = make_driver(Path("run"), GatedSim(seed=7))
    app = Host(lambda: TuneScreen(driver, results_on_finish=False))

    async def settle(pilot: Any) -> None:
        await until(lambda: driver.finished.is_set(), pilot)
        await until(lambda: app.screen.finished, pilot)  # type: ignore[attr-defined]
        table = ladder(app)
        await until(lambda: table.row_count == len(driver.outcome.probes), pilot)  # type: ignore[union-attr]

        def widths_caught_up() -> bool:
            """Every column is as wide as its widest cell: the table measures new rows
            when it is idle, later than they arrive (much later on a loaded machine)."""
            rows = [table.get_row_at(i) for i in range(table.row_count)]
            return all(
                column.content_width
                >= max(Text.from_markup(str(row[index])).cell_len for row in rows)
                for index, column in enumerate(table.ordered_columns)
            )

        await until(widths_caught_up, pilot, timeout=30.0)
        # then the table's width, as drawn, holds still for a few looks
        steady, last = 0, None
        for _ in range(50):
            await pilot.pause(0.1)
            width = table.virtual_size.width
            steady, last = (steady + 1 if width == last else 0), width
            if steady >= 3:
                break
        # the table follows new rows; pin its view so the picture does not depend on timing
        table.scroll_end(animate=False, immediate=True)
        await pilot.wait_for_scheduled_animations()
        await pilot.pause(0.3)

    assert snap_compare(app, terminal_size=size, run_before=settle)


def test_failed_probes_show_their_reason(tmp_path: Path) -> None:
    results = [
        ProbeResult("baseline", {}, {}, Status.OK, io_sps=90, synthetic_sps=380, full_sps=88),
        ProbeResult("batch_size", {"global_batch_size": 256}, {}, Status.OOM, "needs 60 GB"),
    ]
    from tuneup.tui.widgets.ladder import ladder_row

    assert ladder_row(results[1], results[0])[-1] == "oom: needs 60 GB"
    assert ladder_row(results[0], results[0])[5] == "+0.0%"


def test_the_table_and_the_log_word_a_probe_alike(tmp_path: Path) -> None:
    from tuneup.commands.progress import probe_table
    from tuneup.probe.describe import result_line
    from tuneup.probe.types import Contention
    from tuneup.tui.widgets.ladder import ladder_row

    base = ProbeResult("baseline", {}, {}, Status.OK, io_sps=90, synthetic_sps=380, full_sps=88)
    again = ProbeResult("amp", {}, {}, Status.OK, synthetic_sps=380.0)
    busy = Contention(other_cpus=1.5, usable_cpus=2, note="other processes used 75% of the CPUs")
    crowded = ProbeResult(
        "channels_last", {"channels_last": True}, {}, Status.OK, full_sps=21.2, contention=busy
    )
    bf16 = ProbeResult("amp", {"amp_mode": "bf16"}, {}, Status.OK, synthetic_sps=570.0)
    # a SYNTHETIC-only probe reports SYNTHETIC, against the baseline's SYNTHETIC
    assert "SYNTHETIC      570.0 samples/s (+50.0% vs baseline)" in result_line(bf16, base)
    assert ladder_row(bf16, base)[5] == "+50.0%"
    # a contended probe says so, with the reason, wherever it is listed
    said = "ok (contended, left out: other processes used 75% of the CPUs)"
    assert ladder_row(crowded, base)[-1] == said and said in result_line(crowded, base)
    # the re-measured incumbent has one name
    assert ladder_row(again, base)[1] == "incumbent" and " incumbent " in result_line(again, base)
    out = tmp_path / "table.txt"
    with out.open("w") as stream:
        probe_table([base, again, crowded, bf16], stream, width=160)
    table = " ".join(out.read_text().split())
    assert "incumbent" in table and "contended, left out" in table and "+50.0%" in table


def test_gpu_charts_follow_a_replayed_trace_while_the_ladder_runs(tmp_path: Path) -> None:
    """Demo mode: the sim ladder with GPU utilization and power from a replayed trace."""
    from tuneup.hardware.replay import ReplayBackend, TraceRecorder
    from tuneup.telemetry.sampler import Sampler
    from tuneup.testing.scripted_backend import busy_backend
    from tuneup.tui.widgets.chart import Chart

    trace = tmp_path / "gpus.jsonl"
    scripted = busy_backend(gpus=2, rounds=6)
    with TraceRecorder(trace) as recorder:
        for _ in range(6):
            samples = scripted.sample()
            recorder.write(samples[0].time, scripted.devices(), samples)
    sampler = Sampler(ReplayBackend(trace, loop=True, clock=time.time), interval_s=0.1)
    gated = GatedSim(hold="amp")
    driver = make_driver(tmp_path / "run", gated)
    driver.session.sampler = sampler  # started and stopped with the session
    app = Host(lambda: TuneScreen(driver, gpu_feed=sampler))

    async def go() -> None:
        async with app.run_test(size=SIZE) as pilot:
            await until(gated.held.is_set, pilot)
            screen = next(s for s in app.screen_stack if isinstance(s, TuneScreen))
            util = screen.query_one("#tune-gpu-util", Chart)
            power = screen.query_one("#tune-gpu-power", Chart)
            await until(lambda: len(util.series.ys) >= 3 and len(power.series.ys) >= 3, pilot)
            assert all(0 <= y <= 100 for y in util.series.ys)
            assert all(y > 0 for y in power.series.ys)
            gated.gate.set()
            await until(lambda: results_shown(app), pilot)
        assert not sampler.running, "the session stops its sampler when the ladder ends"

    run(go)


def results_shown(app: App[Any]) -> bool:
    """The results screen is up and composed (its headline can be queried)."""
    return isinstance(app.screen, ResultsScreen) and bool(app.screen.query("#results-headline"))


def test_a_row_opens_its_probe_and_p_waits_for_the_ladder_to_stop(tmp_path: Path) -> None:
    from tuneup.tui.screens.probe import ProbeScreen

    backend = GatedSim(hold="workers")
    driver = make_driver(tmp_path / "run", backend)
    app = Host(lambda: TuneScreen(driver, results_on_finish=False))

    async def go() -> None:
        async with app.run_test(size=SIZE) as pilot:
            await until(lambda: backend.held.is_set() and ladder(app).row_count > 0, pilot)
            table = ladder(app)
            table.focus()
            table.move_cursor(row=0)
            await pilot.press("enter")
            await until(lambda: isinstance(app.screen, ProbeScreen), pilot)
            opened = app.screen
            assert opened.result.stage == "baseline"  # type: ignore[attr-defined]
            hint = str(opened.query_one("#probe-hint", Static).content)
            assert "once the ladder has stopped or finished" in hint  # it runs: no profile
            await pilot.press("escape")
            backend.gate.set()
            await until(lambda: driver.finished.is_set(), pilot)
            await until(lambda: not driver.running, pilot)
            await pilot.press("enter")
            await until(lambda: isinstance(app.screen, ProbeScreen), pilot)
            hint = str(app.screen.query_one("#probe-hint", Static).content)
            assert hint.startswith("p profiles it again (a fresh worker")

    run(go)


def test_the_cursor_follows_the_rows_shown_so_enter_opens_the_highlighted_one(
    tmp_path: Path,
) -> None:
    """A live ladder's table scrolls to its newest row and the cursor goes with it; a cursor
    the user moved up stays there, in view, as rows arrive."""
    from tuneup.tui.screens.probe import ProbeScreen

    backend = GatedSim(hold="channels_last")
    driver = make_driver(tmp_path / "run", backend)
    app = Host(lambda: TuneScreen(driver, results_on_finish=False))

    def in_view(table: LadderTable) -> bool:
        shown = table.scrollable_content_region.height - table.header_height
        return table.scroll_y <= table.cursor_row < table.scroll_y + shown

    async def go() -> None:
        async with app.run_test(size=(80, 24)) as pilot:
            await until(backend.held.is_set, pilot)
            table = ladder(app)
            await until(lambda: table.row_count == len(driver.session.results.results()), pilot)
            await pilot.pause(0.2)
            assert table.max_scroll_y > 0, "more rows than the table shows"
            assert table.cursor_row == table.row_count - 1 and in_view(table)
            table.focus()
            await pilot.press("enter")
            await until(lambda: isinstance(app.screen, ProbeScreen), pilot)
            assert app.screen.result is table.results[-1]  # type: ignore[attr-defined]
            await pilot.press("escape")
            await pilot.press("up", "up")
            chosen, top = table.cursor_row, table.scroll_y
            backend.gate.set()
            await until(driver.finished.is_set, pilot)
            await until(lambda: table.row_count == len(driver.outcome.probes), pilot)  # type: ignore[union-attr]
            await pilot.pause(0.2)
            assert (table.cursor_row, table.scroll_y) == (chosen, top) and in_view(table)
            await pilot.press("enter")
            await until(lambda: isinstance(app.screen, ProbeScreen), pilot)
            assert app.screen.result is table.results[chosen]  # type: ignore[attr-defined]

    run(go)
