"""The full-screen monitor driven by the Pilot over a scripted GPU backend."""

from __future__ import annotations

import asyncio
import importlib.util
import json
from collections.abc import Awaitable, Callable
from pathlib import Path

import pytest

# GPU nodes' offline installs lack textual and plotext: the app's tests skip there.
pytest.importorskip("textual")
pytest.importorskip("plotext")

from textual.widgets import Static

from tuneup.commands.monitor import TrainMetricsTail
from tuneup.hardware.types import GpuSample
from tuneup.telemetry.history import SampleHistory
from tuneup.telemetry.sampler import Sampler
from tuneup.testing.scripted_backend import ScriptedBackend, busy_backend, busy_rounds, h200s
from tuneup.tui.monitor_app import MonitorApp
from tuneup.tui.screens.monitor import MonitorScreen, next_interval
from tuneup.tui.widgets.gpu_panel import GpuPanel
from tuneup.tui.widgets.header import MonitorHeader
from tuneup.tui.widgets.process_table import ProcessTable
from tuneup.tui.widgets.train_panel import TrainPanel

SIZE = (120, 40)


def run(test: Callable[[], Awaitable[None]]) -> None:
    asyncio.run(test())


async def until(condition: Callable[[], bool], pilot: object, timeout: float = 5.0) -> None:
    """Let the app run until `condition` holds (the poller is a real thread)."""
    loop = asyncio.get_running_loop()
    end = loop.time() + timeout
    while not condition():
        if loop.time() > end:
            raise AssertionError("the monitor did not get there in time")
        await pilot.pause(0.05)  # type: ignore[attr-defined]


def make_app(backend: ScriptedBackend, **kwargs: object) -> MonitorApp:
    screen = MonitorScreen(
        Sampler(backend, interval_s=0.1),
        source="scripted",
        close_backend=False,
        **kwargs,  # type: ignore[arg-type]
    )
    return MonitorApp(screen)


def readings_line(panel: GpuPanel) -> str:
    return str(panel.query_one(".gpu-readings", Static).content)


def header_line(app: MonitorApp) -> str:
    return str(app.query_one(MonitorHeader).render())


def shows(app: MonitorApp, last_round: list[GpuSample]) -> bool:
    """Every GPU's panel is drawn up to `last_round`, the script's last."""
    latest = {p.device.index: p.latest for p in app.panels()}
    return all(
        (shown := latest.get(s.index)) is not None and shown.time == s.time for s in last_round
    )


def test_a_panel_per_gpu_shows_its_newest_readings() -> None:
    devices = h200s(2)
    rounds = busy_rounds(devices, 4)
    backend = ScriptedBackend(devices, rounds)

    async def scenario() -> None:
        app = make_app(backend, job_id="4242", visible_gpus=[0, 1])
        async with app.run_test(size=SIZE) as pilot:
            await until(lambda: shows(app, rounds[-1]), pilot)
            panels = sorted(app.panels(), key=lambda p: p.device.index)
            assert [p.border_title for p in panels] == [
                "GPU 0 · NVIDIA H200",
                "GPU 1 · NVIDIA H200",
            ]
            for panel, sample in zip(panels, rounds[-1], strict=True):
                text = readings_line(panel)
                assert f"util {sample.util_gpu_pct:.0f} %" in text
                assert f"power {sample.power_w:.0f}/700 W" in text
            assert "throttle power_cap" in readings_line(panels[0])  # the script caps GPU 0
            assert "throttle none" in readings_line(panels[1])
            assert "SLURM job 4242 · GPUs 0,1" in header_line(app)
            table = app.query_one(ProcessTable)
            assert [row[:3] for row in table.rows_shown] == [
                ("0", "4000", "python"),
                ("1", "4001", "python"),
            ]

    run(scenario)


def test_pause_stops_updates_and_resumes() -> None:
    backend = busy_backend(gpus=1, rounds=3, repeat_last=True)

    async def scenario() -> None:
        app = make_app(backend)
        async with app.run_test(size=SIZE) as pilot:
            await until(lambda: backend.calls >= 3, pilot)
            await pilot.press("space")
            assert "PAUSED" in header_line(app)
            await until(lambda: not app.feed.running, pilot)  # type: ignore[attr-defined]
            frozen = backend.calls
            await pilot.pause(0.5)  # five intervals
            assert backend.calls == frozen
            await pilot.press("p")
            assert "PAUSED" not in header_line(app)
            await until(lambda: backend.calls >= frozen + 2, pilot)

    run(scenario)


def test_interval_keys_change_the_sampling_interval_down_to_a_tenth() -> None:
    backend = busy_backend(gpus=1, rounds=2, repeat_last=True)

    async def scenario() -> None:
        app = make_app(backend)
        async with app.run_test(size=SIZE) as pilot:
            await pilot.press("plus")
            assert app.interval == 0.2
            await until(lambda: app.feed.interval_s == 0.2, pilot)
            assert "every 0.2 s" in header_line(app)
            await pilot.press("plus", "plus")
            assert app.interval == 1.0
            await pilot.press("minus", "minus", "minus", "minus")
            assert app.interval == 0.1
            await until(lambda: app.feed.interval_s == 0.1, pilot)

    run(scenario)


def test_q_quits_and_stops_sampling() -> None:
    backend = busy_backend(gpus=1, rounds=2, repeat_last=True)

    async def scenario() -> None:
        app = make_app(backend)
        async with app.run_test(size=SIZE) as pilot:
            await until(lambda: backend.calls >= 2, pilot)
            await pilot.press("q")
            await pilot.pause(0.1)
            assert not app.is_running
        calls = backend.calls
        await asyncio.sleep(0.4)
        assert backend.calls == calls
        assert not app.feed.running  # type: ignore[attr-defined]

    run(scenario)


def test_without_a_gpu_the_screen_says_why() -> None:
    backend = ScriptedBackend.without_gpus("NVML: driver not loaded")

    async def scenario() -> None:
        app = make_app(backend)
        async with app.run_test(size=SIZE) as pilot:
            await until(lambda: bool(app.query("#no-gpu")), pilot)
            message = app.query_one("#no-gpu", Static).content
            assert str(message) == "no NVIDIA GPU visible (NVML: driver not loaded)"
            assert app.panels() == []

    run(scenario)


def test_attached_training_metrics_are_charted_as_the_file_grows(tmp_path: Path) -> None:
    metrics = tmp_path / "metrics.jsonl"
    backend = busy_backend(gpus=1, rounds=2)

    def append(step: int, loss: float) -> None:
        record = {"kind": "train", "epoch": 0, "step": step, "loss": loss, "samples_per_s": 90.0}
        with metrics.open("a") as file:
            file.write(json.dumps(record) + "\n")

    async def scenario() -> None:
        app = make_app(backend, train_feed=TrainMetricsTail(metrics), train_source=metrics.name)
        async with app.run_test(size=SIZE) as pilot:
            panel = app.query_one(TrainPanel)
            assert panel.border_title == "training · metrics.jsonl"
            await pilot.pause(0.3)  # the file does not exist yet: the panel waits
            assert "waiting" in str(panel.query_one(".train-progress", Static).content)
            append(10, 0.5)
            append(20, 0.25)
            await until(lambda: panel.records_shown == 2, pilot)
            progress = str(panel.query_one(".train-progress", Static).content)
            assert "step 20" in progress and "loss 0.25" in progress
            append(30, 0.125)
            await until(lambda: panel.records_shown == 3, pilot)
            assert "step 30" in str(panel.query_one(".train-progress", Static).content)

    run(scenario)


def test_interval_steps() -> None:
    assert next_interval(0.1, -1) == 0.1  # the floor
    assert next_interval(0.1, +1) == 0.2
    assert next_interval(1.0, +1) == 2.0
    assert next_interval(0.3, +1) == 0.5  # a value from the command line joins the steps
    assert next_interval(0.3, -1) == 0.2


def test_history_keeps_the_window_by_the_readings_clock() -> None:
    history = SampleHistory(window_s=10.0)
    history.add([GpuSample(index=0, time=100.0), GpuSample(index=1, time=100.0)])
    history.add([GpuSample(index=0, time=105.0)])
    history.add([GpuSample(index=0, time=112.0)])
    assert [s.time for s in history.of(0)] == [105.0, 112.0]
    assert history.of(1) == []  # older than the window
    assert history.now == 112.0


@pytest.mark.skipif(
    importlib.util.find_spec("pytest_textual_snapshot") is None,
    reason="needs pytest-textual-snapshot (the test extra)",
)
def test_screenshot_of_two_busy_gpus(snap_compare: Callable[..., bool]) -> None:
    devices = h200s(2)
    rounds = busy_rounds(devices, 12)
    backend = ScriptedBackend(devices, rounds)

    async def settle(pilot: object) -> None:
        app = pilot.app  # type: ignore[attr-defined]
        await until(lambda: shows(app, rounds[-1]), pilot)
        await pilot.pause(0.3)  # type: ignore[attr-defined]

    app = make_app(backend, job_id="4242", visible_gpus=[0, 1])
    assert snap_compare(app, terminal_size=SIZE, run_before=settle)
