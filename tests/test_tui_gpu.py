"""The full-screen app on a GPU node: a short real ladder, its GPU charts fed by the real NVML.

Runs in the GPU suite's window (`pytest -m gpu`): a tiny U-Net on the device-resident
loader, one stage, trials of a tenth of a second.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import yaml

pytest.importorskip("textual")
pytest.importorskip("plotext")

from textual.app import App

from tuneup.hardware.machine import machine_info
from tuneup.preset.load import load_preset
from tuneup.tui.app import TuneupApp
from tuneup.tui.screens.results import ResultsScreen
from tuneup.tui.screens.setup import SetupScreen
from tuneup.tui.screens.tune import TuneScreen
from tuneup.tuning.session.request import SessionRequest

SIZE = (120, 40)


def short_gpu_preset(folder: Path) -> Path:
    """generic-cuda with a tiny model on the GPU-resident loader and a short budget."""
    root = Path(__file__).resolve().parent.parent
    preset = yaml.safe_load((root / "presets" / "generic-cuda.yaml").read_text())
    preset["name"] = "app-on-gpu"
    preset["description"] = "a short ladder for the app's GPU test"
    preset["synthetic_data"] = {"box": 64, "val_box": 32, "seed": 0}
    preset["train"].update(
        {
            "levels": 3,
            "width": 8,
            "data_size": 32,
            "box_size": [64, 32],
            "global_batch_size": 8,
            "base_batch_size": 8,
            "data_loader_config": "gpu",
            "num_data_workers": 0,
            "Nsamples": 4096,
            "Nsamples_val": 0,
        }
    )
    preset["probe"]["budget"] = {
        "trial_s": 0.1,
        "min_trials": 2,
        "max_trials": 3,
        "warmup_cap_s": 5,
        "loss_steps": 4,
        "limit_s": 120,
    }
    preset["probe"]["stages"] = ["amp"]
    preset["probe"].pop("costs", None)
    path = folder / "app-on-gpu.yaml"
    path.write_text(yaml.safe_dump(preset, sort_keys=False))
    return path


async def until(condition: Callable[[], bool], pilot: Any, timeout: float) -> None:
    loop = asyncio.get_running_loop()
    end = loop.time() + timeout
    while not condition():
        if loop.time() > end:
            raise AssertionError("the app did not get there in time")
        await pilot.pause(0.2)


def tune_screen(app: App[Any]) -> TuneScreen | None:
    return next((s for s in app.screen_stack if isinstance(s, TuneScreen)), None)


@pytest.mark.gpu
def test_the_app_runs_a_short_ladder_with_live_gpu_charts(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from tuneup.tui.widgets.chart import Chart

    monkeypatch.setenv("TUNEUP_CACHE_DIR", str(tmp_path / "cache"))  # its box made afresh
    preset = load_preset(str(short_gpu_preset(tmp_path)))
    app = TuneupApp(
        machine_info(), trainer="unet", preset_name=str(preset.source), out=tmp_path / "run"
    )
    request = SessionRequest(preset=str(preset.source), stages=("amp",), budget=preset.budget)
    seen_util: list[float] = []

    async def go() -> None:
        async with app.run_test(size=SIZE) as pilot:
            await until(lambda: isinstance(app.screen, SetupScreen), pilot, 30)
            app.post_message(SetupScreen.Start(request, preset))
            await until(lambda: tune_screen(app) is not None, pilot, 120)
            screen = tune_screen(app)
            assert screen is not None
            util = screen.query_one("#tune-gpu-util", Chart)
            await until(lambda: isinstance(app.screen, ResultsScreen), pilot, 400)
            seen_util.extend(util.series.ys)

    asyncio.run(go())
    summary = app.driver.summary
    assert summary is not None and summary.recommendation.headline.startswith("recommendation")
    assert seen_util and all(0 <= y <= 100 for y in seen_util)  # NVML's utilization, live
    probes = app.driver.outcome.probes
    assert any(p.gpu_util_mean is not None for p in probes if p.ok)  # telemetry joined
