"""The RESULTS screen of a results folder (review mode), through the Pilot."""

from __future__ import annotations

import asyncio
import importlib.util
import json
import re
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

# GPU nodes' offline installs lack textual and plotext: the app's tests skip there.
pytest.importorskip("textual")
pytest.importorskip("plotext")

from textual.app import App
from textual.widgets import Static
from tuneup_plugins.sim import sim_backend, sim_stage_plans

from tuneup.config import load_config
from tuneup.errors import UsageError
from tuneup.hardware.types import MachineInfo
from tuneup.preset.load import load_preset
from tuneup.trainers.adapters import load_trainer
from tuneup.tui.screens.results import ResultsScreen, load_results
from tuneup.tui.widgets.gain_bars import GainBars
from tuneup.tuning.results.journal import ResultsDir
from tuneup.tuning.results.summary import Summary
from tuneup.tuning.session.probe_session import ProbeSession

SIZE = (120, 40)
MACHINE = MachineInfo(cuda=True, gpu_count=1, cpus_usable=32)


def finished_session(folder: Path, seed: int = 3) -> Summary:
    """Run the sim ladder headless into `folder`, as `tuneup probe --trainer sim` does."""
    preset = load_preset("cpu-smoke")
    session = ProbeSession(
        preset=preset,
        adapter=load_trainer("sim"),
        backend=sim_backend(seed),
        results=ResultsDir(folder),
        machine=MACHINE,
        base_values={**preset.train, "device": "cuda"},
        plans=sim_stage_plans(MACHINE),
    )
    session.start(resume=False)
    session.run()
    return ResultsDir(folder).summary()


class Review(App[None]):
    def __init__(self, folder: Path) -> None:
        super().__init__()
        self.folder = folder

    def on_mount(self) -> None:
        self.push_screen(ResultsScreen.from_folder(self.folder))


def test_a_results_folder_shows_headline_gains_and_verdict_and_exports(tmp_path: Path) -> None:
    folder = tmp_path / "run"
    summary = finished_session(folder)
    app = Review(folder)

    async def go() -> None:
        async with app.run_test(size=SIZE) as pilot:
            await pilot.pause(0.1)
            screen = app.screen
            assert isinstance(screen, ResultsScreen)
            headline = str(screen.query_one("#results-headline", Static).content)
            assert headline == summary.recommendation.headline
            bars = screen.query_one(GainBars).render().plain
            for entry in summary.stages:
                assert entry.stage in bars
            adopted = [e for e in summary.stages if e.winner]
            assert adopted and all(f"adopted {e.winner}" in bars for e in adopted)
            # a stage that adopted nothing draws no bar: it contributed nothing
            for entry in (e for e in summary.stages if not e.winner and e.gain_pct is not None):
                line = next(ln for ln in bars.splitlines() if ln.startswith(entry.stage + " "))
                assert "█" not in line and "not adopted" in line and "+0.0%" in line
            verdict = str(screen.query_one("#results-verdict", Static).content)
            assert verdict.startswith("before: ") and "\nafter: " in verdict
            await pilot.click("#export")
            await pilot.pause(0.1)
            assert len(screen.exported) == 5

    asyncio.run(go())
    values = summary.recommendation.values
    cfg = load_config(folder / "tuned.yaml", "tuned")
    assert cfg.global_batch_size == values["global_batch_size"]
    assert cfg.amp_mode == values["amp_mode"]


def test_the_header_states_the_gain_the_decisions_had_to_clear(tmp_path: Path) -> None:
    folder = tmp_path / "run"
    summary = finished_session(folder)
    document = json.loads((folder / "summary.json").read_text())
    # every decision on pairs names its needed gain in its words, and the header that one
    stated = sorted(float(m) for m in re.findall(r"needed above (\d\.\d+)x", json.dumps(document)))
    assert stated, "the sim ladder decides on pairs"
    low, high = 100 * (stated[0] - 1), 100 * (stated[-1] - 1)
    # no adopted gain reads smaller than what the header says a gain had to clear
    adopted = [e for e in summary.stages if e.winner and e.gain_pct is not None]
    assert adopted and all(e.gain_pct > e.needed_pct for e in adopted)  # type: ignore[operator]
    app = Review(folder)

    async def go() -> None:
        async with app.run_test(size=SIZE) as pilot:
            await pilot.pause(0.1)
            title = str(app.screen.query_one("#results-comparison").border_title)
            assert "noise margin" not in title
            shown = re.search(r"a gain had to clear ([\d.]+)(?:-([\d.]+))?%", title)
            assert shown is not None, title
            assert float(shown.group(1)) == pytest.approx(low, abs=0.06)
            assert float(shown.group(2) or shown.group(1)) == pytest.approx(high, abs=0.06)

    asyncio.run(go())


def test_an_unfinished_folder_is_refused_with_how_to_resume(tmp_path: Path) -> None:
    ResultsDir(tmp_path).create({"preset": "cpu-smoke", "trainer": "sim"})
    with pytest.raises(UsageError, match="--resume"):
        load_results(tmp_path)
    _summary, probes = load_results(_finished(tmp_path / "done"))
    assert probes and probes[0].stage == "baseline"


def _finished(folder: Path) -> Path:
    finished_session(folder)
    return folder


@pytest.mark.skipif(
    importlib.util.find_spec("pytest_textual_snapshot") is None,
    reason="needs pytest-textual-snapshot (the test extra)",
)
@pytest.mark.parametrize("size", [(80, 24), (120, 40)], ids=["80x24", "120x40"])
def test_screenshot_of_the_results_screen(
    snap_compare: Callable[..., bool],
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    size: tuple[int, int],
) -> None:
    monkeypatch.chdir(tmp_path)
    finished_session(Path("run"), seed=7)

    async def settle(pilot: Any) -> None:
        await pilot.pause(0.2)

    assert snap_compare(Review(Path("run")), terminal_size=size, run_before=settle)


def test_a_profiled_session_shows_where_a_step_goes_as_bars_with_its_findings(
    tmp_path: Path,
) -> None:
    folder = tmp_path / "run"
    finished_session(folder)
    document = json.loads((folder / "summary.json").read_text())
    assert document["profile"] is None  # the sim takes no profile: no box below
    parts = {"data": 0.004, "h2d": 0.0001, "forward": 0.002, "backward": 0.003}
    document["profile"] = {
        "baseline": {"step_s": 0.0092, "parts_s": parts},
        "recommendation": {"step_s": 0.0052, "parts_s": {**parts, "data": 0.0001}},
        "findings": [{"text": "data wait is 43% of the step (rule: above 5%)"}],
        "left": "backward 58%",
    }
    (folder / "summary.json").write_text(json.dumps(document))
    app = Review(folder)

    async def go() -> None:
        async with app.run_test(size=SIZE) as pilot:
            await pilot.pause(0.1)
            box = app.screen.query_one("#results-breakdown", Static)
            assert "where a step's time goes" in str(box.border_title)
            found = str(app.screen.query_one("#results-findings", Static).content)
            assert "data wait is 43%" in found and "left: backward 58%" in found

    asyncio.run(go())
    from rich.console import Console

    from tuneup.tui.widgets.breakdown import breakdown_table

    console = Console(width=100, record=True)
    console.print(breakdown_table(document["profile"]))
    rows = {line.split()[0]: line for line in console.export_text().splitlines() if line.strip()}
    # the baseline's 4 ms of data wait is the longest bar; the recommendation's a sliver
    assert rows["data"].count("█") == 16 + 1 and "4.0 ms" in rows["data"]
    assert "0.1 ms" in rows["data"] and rows["step"].split()[1:] == ["9.2", "ms", "5.2", "ms"]


class Opened(App[None]):
    """The results screen of `folder`, its probes profiled again by `profiler`."""

    def __init__(self, folder: Path, profiler: Callable[[Path, int], Any]) -> None:
        super().__init__()
        self.folder, self.profiler = folder, profiler

    def on_mount(self) -> None:
        summary, probes = load_results(self.folder)
        self.push_screen(ResultsScreen(summary, probes, self.folder, profiler=self.profiler))


def test_a_probes_row_opens_its_breakdown_and_p_profiles_it_again(tmp_path: Path) -> None:
    from tuneup.probe.profile_rules import StageOutcome, findings
    from tuneup.tui.screens.probe import ProbeScreen
    from tuneup.tui.widgets.ladder import LadderTable
    from tuneup.tuning.session.profile_again import ProfiledAgain

    folder = tmp_path / "run"
    finished_session(folder)
    journaled = ResultsDir(folder).results()
    asked: list[int] = []
    parts = {"data": 0.006, "forward": 0.002, "backward": 0.003}

    def profiler(where: Path, number: int) -> ProfiledAgain:
        asked.append(number)
        assert where == folder
        now = {"step_s": 0.0112, "parts_s": parts, "trace": "0099-profile.trace.json.gz"}
        said = {"workers": StageOutcome(tried=True, summary="adopted 8 workers")}
        fired = findings(now, said, journaled[number - 1].config)
        return ProfiledAgain(number, journaled[number - 1], None, now, tuple(fired))

    app = Opened(folder, profiler)

    async def go() -> None:
        async with app.run_test(size=SIZE) as pilot:
            await pilot.pause(0.1)
            table = app.screen.query_one(LadderTable)
            assert table.row_count == sum(1 for p in journaled if not p.retried)
            table.focus()
            table.move_cursor(row=2)
            await pilot.press("enter")
            await pilot.pause(0.1)
            opened = app.screen
            assert isinstance(opened, ProbeScreen) and opened.result == journaled[2]
            shown = str(opened.query_one("#probe-breakdown", Static).content)
            assert shown == "not profiled in the ladder"  # the sim takes no profile
            await pilot.press("p")
            for _ in range(50):
                await pilot.pause(0.05)
                if "profiled again" in str(opened.query_one("#probe-hint", Static).content):
                    break
            assert asked == [3]  # the journal's number of the row opened
            hint = str(opened.query_one("#probe-hint", Static).content)
            assert "probes/0099-profile.trace.json.gz" in hint
            found = str(opened.query_one("#probe-findings", Static).content)
            assert "data wait" in found and "adopted 8 workers" in found
            await pilot.press("escape")
            await pilot.pause(0.05)
            assert isinstance(app.screen, ResultsScreen)

    asyncio.run(go())


def test_a_probe_is_not_profiled_beside_a_running_ladder_and_a_failure_is_said(
    tmp_path: Path,
) -> None:
    from tuneup.tui.screens.probe import ProbeScreen

    folder = tmp_path / "run"
    finished_session(folder)
    probe = ResultsDir(folder).results()[0]
    calls: list[int] = []

    def refused(where: Path, number: int) -> Any:
        calls.append(number)
        raise UsageError(f"probe {number} (baseline) did not run again here: failed")

    running = ["while the ladder runs"]
    screen = ProbeScreen(probe, probe, folder, lambda: running[0] or None, refused)

    class Host(App[None]):
        def on_mount(self) -> None:
            self.push_screen(screen)

    app = Host()

    async def go() -> None:
        async with app.run_test(size=SIZE) as pilot:
            await pilot.pause(0.1)
            await pilot.press("p")
            await pilot.pause(0.1)
            hint = str(screen.query_one("#probe-hint", Static).content)
            assert calls == [] and "while the ladder runs" in hint
            running[0] = ""  # the ladder finished
            await pilot.press("p")
            for _ in range(50):
                await pilot.pause(0.05)
                if calls and "failed" in str(screen.query_one("#probe-hint", Static).content):
                    break
            hint = str(screen.query_one("#probe-hint", Static).content)
            assert calls == [1] and hint.startswith("profile failed: probe 1")

    asyncio.run(go())


def test_p_on_a_sim_sessions_probe_says_there_is_nothing_to_profile(tmp_path: Path) -> None:
    from tuneup.tui.screens.probe import ProbeScreen

    folder = tmp_path / "run"
    finished_session(folder)
    probe = ResultsDir(folder).results()[1]
    screen = ProbeScreen(probe, probe, folder)  # the real profiler: nothing faked

    class Host(App[None]):
        def on_mount(self) -> None:
            self.push_screen(screen)

    app = Host()
    said = (
        "probe 2: there is nothing to profile: the probes of a sim session are simulated, "
        "no training step ran (a session of the unet trainer has profiles)"
    )

    async def go() -> None:
        async with app.run_test(size=SIZE) as pilot:
            await pilot.pause(0.1)
            await pilot.press("p")
            for _ in range(50):
                await pilot.pause(0.05)
                if str(screen.query_one("#probe-hint", Static).content) == said:
                    break
            assert str(screen.query_one("#probe-hint", Static).content) == said

    asyncio.run(go())
    assert not (folder / "probes").exists()  # no worker started


def test_the_tutorials_own_answer_is_shown_and_exported_beside_the_recommendation(
    tmp_path: Path,
) -> None:
    """A session whose recommendation the tutorial's train.py cannot run (the GPU-resident
    loader) records the tutorial's own answer: the screen says it with its factor, and the
    tutorial's export carries it while tuneup train's carries the recommendation."""
    folder = tmp_path / "run"
    finished_session(folder)
    document = json.loads((folder / "summary.json").read_text())
    own = document["targets"][0]
    values = {**own["values"], "data_loader_config": "gpu"}
    theirs = {**own["values"], "data_loader_config": "inmem", "num_data_workers": 8}
    document["recommendation"]["values"] = values
    document["targets"] = [
        {**own, "values": values},
        {
            "target": "tutorial",
            "label": "the tutorial's train.py",
            "values": theirs,
            "changes": {"data_loader_config": "inmem", "num_data_workers": 8},
            "factor": 3.99,
            "low": 3.14,
            "high": 5.06,
            "upheld": True,
            "left_out": {"data_loader_config": "the tutorial has no gpu loader"},
        },
    ]
    (folder / "summary.json").write_text(json.dumps(document))
    app = Review(folder)

    async def go() -> None:
        async with app.run_test(size=SIZE) as pilot:
            await pilot.pause(0.1)
            box = str(app.screen.query_one("#results-speedup", Static).content)
            assert (
                "the tutorial's train.py: 3.99x with data_loader_config=inmem, "
                "num_data_workers=8" in box
            )
            await pilot.click("#export")
            await pilot.pause(0.1)

    asyncio.run(go())
    assert load_config(folder / "tuned.yaml", "tuned").data_loader_config == "inmem"
    assert load_config(folder / "tuned.yaml", "tuned").num_data_workers == 8
    exported = (folder / "tuneup.yaml").read_text()
    assert "data_loader_config: gpu" in exported
