"""The app driven by the Pilot: SETUP, the estimate and its trim offer, Start, review, monitor."""

from __future__ import annotations

import asyncio
import importlib.util
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import pytest

# GPU nodes' offline installs lack textual and plotext: the app's tests skip there.
pytest.importorskip("textual")
pytest.importorskip("plotext")

from textual.widgets import Button, SelectionList, Static

from tuneup.cluster.job import JobEnv
from tuneup.costs.estimate import StepModel
from tuneup.errors import UsageError
from tuneup.hardware.types import MachineInfo
from tuneup.testing.scripted_backend import busy_backend
from tuneup.tui.app import TuneupApp
from tuneup.tui.screens.setup import SetupScreen

SIZE = (120, 40)
NOW = 1_700_000_000.0
CPU = MachineInfo(cuda=False, gpu_count=0, cpus_usable=4)
JOB = JobEnv(
    source="slurm",
    hostname="nid001",
    cpus_usable=4,
    job_id="4242",
    nodes=("nid001",),
    gpus=(0,),
    end_time=NOW + 2 * 3600,
)
MODEL = StepModel(startup_s=10.0, step_s=0.2)


def run(test: Callable[[], Awaitable[None]]) -> None:
    asyncio.run(test())


async def until(condition: Callable[[], bool], pilot: Any, timeout: float = 10.0) -> None:
    loop = asyncio.get_running_loop()
    end = loop.time() + timeout
    while not condition():
        if loop.time() > end:
            raise AssertionError("the app did not get there in time")
        await pilot.pause(0.05)


async def setup_screen(app: TuneupApp, pilot: Any) -> SetupScreen:
    """The app's setup screen, once it shows."""
    await until(lambda: isinstance(app.screen, SetupScreen), pilot)
    screen = app.screen
    assert isinstance(screen, SetupScreen)
    return screen


def make_app(tmp_path: Path, **kwargs: Any) -> TuneupApp:
    return TuneupApp(CPU, **{**make_kwargs(tmp_path), **kwargs})


def make_kwargs(tmp_path: Path) -> dict[str, Any]:
    return {
        "trainer": "sim",
        "preset_name": "cpu-smoke",
        "job": JOB,
        "clock": lambda: NOW,
        "step_model": MODEL,
        "out": tmp_path / "session",
    }


def text(app: TuneupApp, selector: str) -> str:
    return str(app.screen.query_one(selector, Static).render())


def test_setup_shows_the_machine_and_why_a_stage_cannot_run(tmp_path: Path) -> None:
    async def scenario() -> None:
        app = make_app(tmp_path)
        async with app.run_test(size=SIZE) as pilot:
            await until(lambda: isinstance(app.screen, SetupScreen), pilot)
            machine = text(app, "#machine")
            assert "none visible" in machine and "CPU cores usable: 4" in machine
            assert "4242" in machine and "2 h 00 min" in machine
            stages = app.screen.query_one("#stages", SelectionList)
            prompts = {
                str(stages.get_option_at_index(i).value): stages.get_option_at_index(i)
                for i in range(stages.option_count)
            }
            graphs = prompts["cuda_graphs"]
            assert graphs.disabled and "needs CUDA" in str(graphs.prompt)
            assert not prompts["workers"].disabled

    run(scenario)


def test_unchecking_a_stage_shortens_the_estimate(tmp_path: Path) -> None:
    async def scenario() -> None:
        app = make_app(tmp_path)
        async with app.run_test(size=SIZE) as pilot:
            screen = await setup_screen(app, pilot)
            before, shown_before = screen.estimate_s(), text(app, "#estimate")
            screen.query_one("#stages", SelectionList).deselect("workers")
            await pilot.pause()
            assert screen.estimate_s() < before
            assert text(app, "#estimate") != shown_before

    run(scenario)


def test_trim_is_offered_when_the_budget_is_too_small_and_makes_it_fit(tmp_path: Path) -> None:
    async def scenario() -> None:
        app = make_app(tmp_path)
        async with app.run_test(size=SIZE) as pilot:
            screen = await setup_screen(app, pilot)
            trim = screen.query_one("#trim", Button)
            assert not trim.has_class("offered")
            # A budget a little under the full ladder: some stages must go.
            screen.query_one("#time-budget").value = f"{0.8 * screen.estimate_s():.1f}s"
            await pilot.pause()
            assert trim.has_class("offered")
            assert "over the" in text(app, "#estimate")
            checked, trial_s = len(screen.chosen()), screen.budget.trial_s
            await pilot.click("#trim")
            await pilot.pause()
            # shorter trials first, then the stages of least expected gain per second
            assert len(screen.chosen()) < checked or screen.budget.trial_s < trial_s
            assert not trim.has_class("offered")
            assert "fits" in text(app, "#estimate")
            # a budget far smaller leaves stages out
            screen.query_one("#time-budget").value = f"{screen.estimate_s() / 3:.1f}s"
            await pilot.pause()
            await pilot.click("#trim")
            await pilot.pause()
            assert len(screen.chosen()) < checked

    run(scenario)


def test_trim_leaves_out_the_batch_stages_dearest_candidate_before_the_stage(
    tmp_path: Path, h200_with_256: Path
) -> None:
    # the H200's preset costs, with the batch 256 its third ladder tried: its cuDNN search
    # is priced at about 2 min, and 8 min holds the ladder without it, as
    # `tuneup probe --budget 8m` plans it there
    h200 = MachineInfo(cuda=True, gpu_count=1, cpus_usable=16)

    async def scenario() -> None:
        app = TuneupApp(h200, **{**make_kwargs(tmp_path), "preset_name": str(h200_with_256)})
        async with app.run_test(size=SIZE) as pilot:
            screen = await setup_screen(app, pilot)
            screen.query_one("#time-budget").value = "8m"
            await pilot.pause()
            assert "over the" in text(app, "#estimate")
            await pilot.click("#trim")
            await pilot.pause()
            chosen = {p.stage for p in screen.chosen()}
            assert "batch_size" in chosen and screen.fewer == {"batch_size": 1}
            assert "fits" in text(app, "#estimate")  # priced without batch 256
            # another budget: the trim decides again
            screen.query_one("#time-budget").value = "30m"
            await pilot.pause()
            assert screen.fewer == {}

    run(scenario)


def test_the_budget_field_takes_what_the_budget_flag_takes_and_refuses_in_its_words(
    tmp_path: Path,
) -> None:
    from tuneup.tuning.session.request import read_setting

    async def scenario() -> None:
        app = make_app(tmp_path)
        async with app.run_test(size=SIZE) as pilot:
            screen = await setup_screen(app, pilot)
            for given, seconds in (("10m", 600), ("1h30m", 5400), ("90s", 90)):
                screen.query_one("#time-budget").value = given
                await pilot.pause()
                assert screen.time_budget_s == seconds and text(app, "#budget-error") == ""
            for refused in ("ten", "-5"):
                screen.query_one("#time-budget").value = refused
                await pilot.pause()
                said = text(app, "#budget-error")
                with pytest.raises(UsageError) as flag:  # the words `--budget ten` prints
                    read_setting("time_budget_s", refused)
                assert said == str(flag.value) and said.startswith("--budget: ")
                assert "10m" in said and "1h30m" in said  # and the fix
            await pilot.click("#start")
            await pilot.pause()
            assert app.screen is screen and not (tmp_path / "session").exists()  # not started
            screen.query_one("#time-budget").value = ""
            await pilot.pause()
            assert screen.time_budget_s is None and text(app, "#budget-error") == ""

    run(scenario)


def test_start_runs_the_sim_ladder_on_the_tune_screen(tmp_path: Path) -> None:
    from tuneup.tui.screens.tune import TuneScreen

    async def scenario() -> None:
        app = make_app(tmp_path)
        async with app.run_test(size=SIZE) as pilot:
            await until(lambda: isinstance(app.screen, SetupScreen), pilot)
            await pilot.click("#start")
            # The sim ladder is quick: TUNE may already have pushed RESULTS on top.
            await until(lambda: any(isinstance(s, TuneScreen) for s in app.screen_stack), pilot)
            await until(lambda: app.driver.finished.is_set(), pilot, timeout=20)

    run(scenario)
    assert (tmp_path / "session" / "summary.json").is_file()
    assert (tmp_path / "session" / "journal.jsonl").read_text().count("\n") >= 2


def test_two_ranks_in_setup_open_the_ddp_stage_and_run_it(tmp_path: Path) -> None:
    import json

    async def scenario() -> None:
        app = make_app(tmp_path)
        async with app.run_test(size=SIZE) as pilot:
            await until(lambda: isinstance(app.screen, SetupScreen), pilot)
            stages = app.screen.query_one("#stages", SelectionList)

            def ddp_option() -> Any:
                return next(
                    stages.get_option_at_index(i)
                    for i in range(stages.option_count)
                    if stages.get_option_at_index(i).value == "ddp"
                )

            assert ddp_option().disabled and "multi-rank" in str(ddp_option().prompt)
            app.screen.query_one("#nproc").value = "2"
            await until(lambda: not ddp_option().disabled, pilot)
            assert "2 ranks" in text(app, "#layout-note")
            app.screen.query_one("#stages", SelectionList).select("ddp")
            await pilot.click("#start")
            await until(lambda: app.driver is not None and app.driver.finished.is_set(), pilot, 20)

    run(scenario)
    session = json.loads((tmp_path / "session" / "session.json").read_text())
    assert session["launch"]["world_size"] == 2 and session["machine"]["world_size"] == 2
    journal = [json.loads(line) for line in (tmp_path / "session" / "journal.jsonl").open()]
    ddp = [p for p in journal if p["stage"] == "ddp"]
    assert any(p["ranks"] == 1 for p in ddp) and any(p["variant"].get("noddp") for p in ddp)


def test_a_bad_data_file_is_named_before_anything_starts(tmp_path: Path) -> None:
    async def scenario() -> None:
        app = make_app(tmp_path)
        async with app.run_test(size=SIZE) as pilot:
            await until(lambda: isinstance(app.screen, SetupScreen), pilot)
            app.screen.query_one("#data").value = str(tmp_path / "missing.h5")
            await pilot.click("#start")
            await pilot.pause()
            assert "not found" in text(app, "#data-error")
            assert isinstance(app.screen, SetupScreen)

    run(scenario)
    assert not (tmp_path / "session").exists()


def _finished_session(tmp_path: Path) -> Path:
    from tuneup.commands.probe import run_probe_command
    from tuneup.tuning.session.request import SessionRequest

    folder = tmp_path / "done"
    request = SessionRequest(
        preset="cpu-smoke", stages=("workers", "amp"), trainer="sim", search="staged", seed=0
    )
    code = run_probe_command(request, out=folder, resume=None, as_json=True)
    assert code == 0
    return folder


def test_review_of_a_finished_session_opens_the_results(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    folder = _finished_session(tmp_path)
    capsys.readouterr()

    async def scenario() -> None:
        app = make_app(tmp_path, review=folder)
        async with app.run_test(size=SIZE) as pilot:
            await until(lambda: results_shown(app), pilot)
            await pilot.press("question_mark")  # every screen has a help key
            await pilot.pause(0.1)
            said = [n.message for n in app._notifications]
            assert said and "e export" in said[-1] and "q quit" in said[-1]

    run(scenario)


def test_review_of_an_interrupted_session_resumes_with_r(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from tuneup.tui.screens.tune import TuneScreen
    from tuneup.tui.widgets.ladder import LadderTable

    folder = _finished_session(tmp_path)
    capsys.readouterr()
    (folder / "summary.json").unlink()  # as if stopped before the end
    lines = (folder / "journal.jsonl").read_text().splitlines(keepends=True)
    (folder / "journal.jsonl").write_text("".join(lines[:3]))

    async def scenario() -> None:
        app = make_app(tmp_path, review=folder)
        async with app.run_test(size=SIZE) as pilot:
            await until(lambda: isinstance(app.screen, TuneScreen), pilot)
            await pilot.pause(0.2)
            screen = app.screen
            assert isinstance(screen, TuneScreen)
            assert not app.driver.started.is_set()  # nothing runs until asked
            # what the folder holds, and what r would do, before anything runs
            assert screen.query_one(LadderTable).row_count == 3
            status = str(screen.query_one("#tune-status", Static).content)
            assert status.startswith("stopped after 3 probe(s): r resumes the ladder")
            assert "(stopped)" in str(screen.query_one("#tune-title", Static).content)
            offered = [b.binding.key for b in app.active_bindings.values() if b.enabled]
            assert "r" in offered  # the footer offers it
            await pilot.press("r")
            await until(lambda: app.driver.finished.is_set(), pilot, timeout=20)
            assert screen.check_action("resume", ()) is False  # no longer offered

    run(scenario)
    assert (folder / "summary.json").is_file()


def test_m_opens_the_monitor_on_the_given_gpus_and_escape_returns(tmp_path: Path) -> None:
    from tuneup.tui.screens.monitor import MonitorScreen

    async def scenario() -> None:
        app = make_app(tmp_path, monitor_backend=lambda: (busy_backend(gpus=2), "scripted"))
        async with app.run_test(size=SIZE) as pilot:
            await until(lambda: isinstance(app.screen, SetupScreen), pilot)
            await pilot.press("m")
            await until(lambda: isinstance(app.screen, MonitorScreen), pilot)
            screen = app.screen
            assert isinstance(screen, MonitorScreen)
            await until(lambda: len(screen.panels()) == 2, pilot)
            await pilot.press("escape")
            await until(lambda: isinstance(app.screen, SetupScreen), pilot)

    run(scenario)


@pytest.mark.skipif(
    importlib.util.find_spec("pytest_textual_snapshot") is None,
    reason="needs pytest-textual-snapshot (the test extra)",
)
@pytest.mark.parametrize("size", [(80, 24), (120, 40)], ids=["80x24", "120x40"])
def test_screenshot_of_setup(
    snap_compare: Callable[..., bool], tmp_path: Path, size: tuple[int, int]
) -> None:
    async def settle(pilot: Any) -> None:
        await until(lambda: isinstance(pilot.app.screen, SetupScreen), pilot)
        await pilot.pause(0.2)

    app = make_app(tmp_path)
    assert snap_compare(app, terminal_size=size, run_before=settle)


def results_shown(app: Any) -> bool:
    """The results screen is up and composed (its headline can be queried)."""
    from tuneup.tui.screens.results import ResultsScreen

    return isinstance(app.screen, ResultsScreen) and bool(app.screen.query("#results-headline"))


def test_r_on_the_results_measures_the_unmeasured_stages_again(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    import json

    from tuneup.tui.screens.results import ResultsScreen
    from tuneup.tui.screens.tune import TuneScreen
    from tuneup.tuning.results.journal import ResultsDir, where_it_stands

    folder = _finished_session(tmp_path)
    capsys.readouterr()
    # as a ladder leaves it when amp's probes all crashed: journaled, left out of the answer
    lines = [json.loads(line) for line in (folder / "journal.jsonl").read_text().splitlines()]
    for line in lines:
        if line["stage"] == "amp":
            line.update(status="crash", reason="worker killed by SIGKILL", transient=True)
    (folder / "journal.jsonl").write_text("".join(json.dumps(line) + "\n" for line in lines))
    document = json.loads((folder / "summary.json").read_text())
    document["unmeasured"] = [{"stage": "amp", "why": "its probes failed"}]
    (folder / "summary.json").write_text(json.dumps(document))
    said = where_it_stands(folder)
    assert said[-1].startswith("not measured: amp; measure them again in the app")
    assert said[-1].endswith(f"tuneup probe --resume {folder} --retry-failed")

    async def scenario() -> None:
        app = make_app(tmp_path, review=folder)
        async with app.run_test(size=SIZE) as pilot:
            await until(lambda: results_shown(app), pilot)
            notes = text(app, "#results-notes")
            assert "not measured: amp (its probes failed); r measures it again" in notes
            assert app.screen.check_action("resume", ()) is True
            reviewed = app.screen
            await pilot.press("r")  # the sim's retry may run through its tune screen at once
            await until(lambda: app.driver is not None, pilot, timeout=60)
            await until(lambda: app.driver.finished.is_set(), pilot, timeout=120)
            shown = (TuneScreen, ResultsScreen)  # the retry's own screens, the review's gone
            assert reviewed not in app.screen_stack and isinstance(app.screen, shown)

    run(scenario)
    retried = ResultsDir(folder)
    assert retried.summary().unmeasured == ()
    amp = [p for p in retried.results() if p.stage == "amp"]
    assert any(p.ok for p in amp) and any(not p.ok for p in amp)  # the crash stays journaled


def test_a_preset_given_as_a_file_opens_setup_with_that_preset_chosen(tmp_path: Path) -> None:
    # `tuneup --preset ./mine.yaml`: the H200's app test (2026-11-28) crashed in the preset
    # Select, whose options held only the installed presets' names.
    import yaml

    root = Path(__file__).resolve().parent.parent
    document = yaml.safe_load((root / "presets" / "cpu-smoke.yaml").read_text())
    document["name"], document["description"] = "mine", "my own smoke preset"
    mine = tmp_path / "mine.yaml"
    mine.write_text(yaml.safe_dump(document))

    async def scenario() -> None:
        from textual.widgets import Select

        app = make_app(tmp_path, preset_name=str(mine))
        async with app.run_test(size=SIZE) as pilot:
            await until(lambda: isinstance(app.screen, SetupScreen), pilot)
            chosen = app.screen.query_one("#preset", Select)
            assert chosen.value == str(mine)
            assert "my own smoke preset" in text(app, "#preset-description")
            chosen.value = "cpu-smoke"  # the installed ones are still offered
            await pilot.pause()
            assert "my own" not in text(app, "#preset-description")

    run(scenario)


def test_the_app_says_the_broken_plugins_it_was_given_when_it_opens(tmp_path: Path) -> None:
    line = "stage 'pace' (x:PACE) is declared in pyproject.toml but not registered: run ..."

    async def scenario() -> None:
        app = make_app(tmp_path, plugin_warnings=[line])
        async with app.run_test(size=SIZE) as pilot:
            await until(lambda: isinstance(app.screen, SetupScreen), pilot)
            assert [n.message for n in app._notifications] == [line]

    run(scenario)


def test_the_app_uses_the_trainer_and_preset_its_command_loaded(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """`tuneup tui` loads the trainer and the preset once and hands them on: neither the
    app nor its setup screen loads them again (a plugin's import runs once)."""
    from tuneup.preset.load import load_preset
    from tuneup.trainers.adapters import load_trainer
    from tuneup.tui import app as app_module
    from tuneup.tui.screens import setup as setup_module

    adapter, preset = load_trainer("sim"), load_preset("cpu-smoke")

    def again(*_args: Any, **_kwargs: Any) -> None:
        raise AssertionError("loaded a second time")

    monkeypatch.setattr(app_module, "load_trainer", again)
    monkeypatch.setattr(setup_module, "load_preset", again)

    async def scenario() -> None:
        app = make_app(tmp_path, adapter=adapter, preset=preset)
        async with app.run_test(size=SIZE) as pilot:
            screen = await setup_screen(app, pilot)
            assert app.adapter is adapter and screen.preset is preset

    run(scenario)


def test_the_ranks_fields_read_as_their_flags_read_and_refuse_in_their_words(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Ranks have one parser: `--nproc 0` and the app's field refuse 0 in the same line,
    and each setup field is the one its setting declares (its id, placeholder and help)."""
    from tuneup.cli import main
    from tuneup.tuning.session.request import app_field, help_of

    async def scenario() -> None:
        app = make_app(tmp_path)
        async with app.run_test(size=SIZE) as pilot:
            screen = await setup_screen(app, pilot)
            for name in ("data_path", "time_budget_s", "nproc", "nodes"):
                face = app_field(name)
                field = screen.query_one(f"#{face.id}")
                assert field.placeholder == face.placeholder and field.tooltip == help_of(name)
            screen.query_one("#nproc").value = "0"
            await pilot.pause()
            said = text(app, "#layout-note")
            assert said == "--nproc: must be a whole number of at least 1, got '0'"

    run(scenario)
    capsys.readouterr()
    assert main(["probe", "--trainer", "sim", "--nproc", "0", "--out", str(tmp_path / "x")]) == 2
    assert capsys.readouterr().err.strip() == (
        "tuneup: error: --nproc: must be a whole number of at least 1, got '0'"
    )
