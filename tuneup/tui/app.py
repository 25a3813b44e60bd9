"""The tuneup app: SETUP, then TUNE (a live ProbeSession), then RESULTS; `m` opens the monitor.

The app receives what touches the machine in its constructor (the machine,
the SLURM job, the clock, the backend factory, the monitor's GPU source), so
tests run it on fakes. It builds the ProbeSession exactly as `tuneup probe`
does: the same preset, base values, stage plans, backends and results folder.
"""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any, ClassVar

from textual.app import App
from textual.binding import Binding, BindingType
from textual.screen import Screen

from tuneup.monitor.slurm import JobInfo
from tuneup.monitor.types import GpuBackend
from tuneup.probe.engine import Engine
from tuneup.probe.estimate import StepModel
from tuneup.probe.journal import ResultsDir
from tuneup.probe.preset import ProbePreset, default_preset_name, load_preset
from tuneup.probe.types import Budget, MachineInfo
from tuneup.tui.screens.setup import SetupChoice, SetupScreen

# Guesses for the estimate until a ladder has measured the real ones: the sim
# trainer answers at once; a U-Net probe starts a process, imports torch and loads data.
STEP_MODELS = {"sim": StepModel(startup_s=0.1, step_s=0.001), "unet": StepModel()}


EngineFactory = Callable[[str, MachineInfo, ResultsDir, Budget, int], Engine]


def default_engine(
    trainer: str, machine: MachineInfo, results: ResultsDir, budget: Budget, seed: int
) -> Engine:
    """The backends of `tuneup probe` (tuneup.probe.engine), events relayed to the app.

    The ranks each probe runs with are the machine's (`world_size` over `nodes`,
    as the setup screen chose them).
    """
    from tuneup.cluster.job import read_job_env
    from tuneup.cluster.launch import LaunchPlan
    from tuneup.probe.engine import build_engine
    from tuneup.tui.driver import EventRelay

    return build_engine(
        trainer,
        machine,
        results.path / "probes",
        budget,
        seed,
        launch=LaunchPlan(nproc=machine.ranks_per_node, nodes=machine.nodes),
        job=read_job_env(gpu_count=machine.gpu_count if machine.cuda else 0),
        on_event=None if trainer == "sim" else EventRelay(),  # the sim trainer sends none
    )


def preset_choices() -> list[tuple[str, str]]:
    """(name, description) of the presets that load (bundled, then the user's), for the picker."""
    from tuneup.probe.preset import list_presets

    return [
        (entry.name, entry.description)
        for entry in list_presets()
        if entry.error is None and not entry.shadowed
    ]


def base_values(preset: ProbePreset, trainer: str, data_path: Path | None) -> dict[str, Any]:
    """The session's base config: the user's data file, else the preset's synthetic box.

    A data file is the tutorial's train.h5; its sibling val.h5 is the
    validation box when present (probes do not validate, so the train file
    stands in otherwise).
    """
    from tuneup.probe_command import _base_values

    if data_path is None:
        return _base_values(preset, trainer)  # makes the synthetic box on first use
    val = data_path.with_name("val.h5")
    return {
        **preset.train,
        "train_path": str(data_path),
        "val_path": str(val if val.is_file() else data_path),
    }


def _layout_fields(machine: MachineInfo) -> dict[str, Any]:
    """The session's `job` and `launch` records, as `tuneup probe` writes them."""
    from tuneup.cluster.job import read_job_env
    from tuneup.cluster.launch import LaunchPlan
    from tuneup.probe_command import launch_info

    job = read_job_env(gpu_count=machine.gpu_count if machine.cuda else 0)
    plan = LaunchPlan(nproc=machine.ranks_per_node, nodes=machine.nodes)
    return {"job": job.to_dict(), "launch": launch_info(plan)}


def _default_tune_screen(driver: Any, start: bool) -> Screen[Any]:
    from tuneup.tui.screens.tune import TuneScreen

    return TuneScreen(driver, start=start, gpu_feed=driver.session.sampler)


class TuneupApp(App[None]):
    """Set up a probe ladder, watch it run, review the results.

    Args:
        machine: what this machine offers.
        trainer: "unet" (real probes in worker processes) or "sim".
        results_root: where a new session's folder is made (unless `out` is given).
        out: the new session's folder.
        review: an existing results folder to open instead of SETUP.
        preset_name: the preset chosen first; the default for the machine when None.
        job: the SLURM job (None outside SLURM).
        clock: epoch seconds (frozen in tests).
        engine: builds the session's backends (tests pass the sim or fakes).
        monitor_backend: the monitor's GPU source (a replayed trace in demo mode).
        step_model: the estimate's guesses; by trainer when None.
        time_budget_s: a time budget for the ladder, shown against the estimate.
        seed: the session's seed.
        gpu_memory_gib: each GPU's memory for the setup screen, when NVML knows it.
        tune_screen: builds the TUNE screen for a driver (tests may pass a stand-in).
    """

    TITLE = "tuneup"
    ENABLE_COMMAND_PALETTE = False
    BINDINGS: ClassVar[list[BindingType]] = [
        Binding("m", "monitor", "monitor"),
        Binding("r", "resume_session", "resume", show=False),
        Binding("ctrl+q", "quit", "quit"),
    ]

    def __init__(
        self,
        machine: MachineInfo,
        *,
        trainer: str = "unet",
        results_root: Path = Path("tuneup-results"),
        out: Path | None = None,
        review: Path | None = None,
        preset_name: str | None = None,
        job: JobInfo | None = None,
        clock: Callable[[], float] = time.time,
        engine: EngineFactory = default_engine,
        monitor_backend: Callable[[], tuple[GpuBackend, str]] | None = None,
        step_model: StepModel | None = None,
        time_budget_s: float | None = None,
        seed: int = 0,
        gpu_memory_gib: tuple[float, ...] = (),
        tune_screen: Callable[[Any, bool], Screen[Any]] = _default_tune_screen,
    ) -> None:
        super().__init__()
        self.machine = machine
        self.trainer = trainer
        self.results_root = results_root
        self.out = out
        self.review = review
        self.preset_name = preset_name or default_preset_name(machine.cuda)
        self.job = job
        self.clock = clock
        self.engine_factory = engine
        self.monitor_backend = monitor_backend
        self.step_model = step_model or STEP_MODELS.get(trainer, StepModel())
        self.time_budget_s = time_budget_s
        self.seed = seed
        self.tune_screen = tune_screen
        self.gpu_memory_gib = gpu_memory_gib
        self.driver: Any = None
        self.engine: Engine | None = None

    def on_mount(self) -> None:
        self.push_screen(
            SetupScreen(
                self.machine,
                job=self.job,
                preset_name=self.preset_name,
                presets=preset_choices(),
                step_model=self.step_model,
                time_budget_s=self.time_budget_s,
                clock=self.clock,
                gpu_memory_gib=self.gpu_memory_gib,
                nproc=self.machine.ranks_per_node,
                nodes=self.machine.nodes,
            )
        )
        if self.review is not None:
            self.open_review(self.review)

    def on_unmount(self) -> None:
        if self.engine is not None:
            self.engine.close()

    # A new session

    def on_setup_screen_start(self, message: SetupScreen.Start) -> None:
        # Making a synthetic box can take minutes: off the UI thread.
        self.run_worker(
            lambda: self._prepare(message.choice), thread=True, exit_on_error=False, name="prepare"
        )

    def _prepare(self, choice: SetupChoice) -> None:
        try:
            driver = self.build_driver(choice)
        except Exception as exc:  # a bad data file or preset: said on screen, not a crash
            self.call_from_thread(self.notify, str(exc), severity="error", timeout=10)
            return
        self.call_from_thread(self._launch, driver, True)

    def build_driver(self, choice: SetupChoice) -> Any:
        """The ProbeSession of `choice`, as `tuneup probe` builds it, inside a SessionDriver."""
        from tuneup.probe.session import ProbeSession, shm_free_for, stage_plans
        from tuneup.tui.driver import SessionDriver

        preset = dataclasses.replace(choice.preset, budget=choice.budget)
        base = base_values(preset, self.trainer, choice.data_path)
        machine = dataclasses.replace(
            self.machine, world_size=choice.nproc * choice.nodes, nodes=choice.nodes
        )
        plans = stage_plans(choice.stages, machine, base, preset, shm_free_for(self.trainer))
        stamp = time.strftime("%Y%m%d-%H%M%S", time.localtime(self.clock()))
        results = ResultsDir(self.out or self.results_root / f"{preset.name}-{stamp}")
        self.engine = self.engine_factory(self.trainer, machine, results, preset.budget, self.seed)
        session = ProbeSession(
            preset=preset,
            trainer=self.trainer,
            backend=self.engine.backend,
            results=results,
            machine=machine,
            base_values=base,
            plans=plans,
            seed=self.seed,
            sampler=self.engine.sampler or self._demo_sampler(),
            **_layout_fields(machine),
        )
        return SessionDriver(session, relay=self.engine.relay)

    def _demo_sampler(self) -> Any:
        """In demo mode (`--trainer sim --replay TRACE`), GPU charts come from the trace."""
        if self.trainer != "sim" or self.monitor_backend is None:
            return None
        from tuneup.monitor.sampler import Sampler

        backend, _source = self.monitor_backend()
        return Sampler(backend, interval_s=0.5)

    def _launch(self, driver: Any, start: bool) -> None:
        self.driver = driver
        self.push_screen(self.tune_screen(driver, start))

    # Review of an earlier session

    def open_review(self, folder: Path) -> None:
        """A finished session opens RESULTS; an interrupted one opens TUNE, resumed with `r`."""
        results = ResultsDir(folder)
        results.session()  # a clear error when it is not a results folder
        if (folder / "summary.json").is_file():
            from tuneup.tui.screens.results import ResultsScreen, load_results

            summary, probes = load_results(folder)
            self.push_screen(ResultsScreen(summary, probes, folder))
            return
        self._launch(self.resume_driver(results), False)
        journaled = results.results()
        self.notify(
            f"{len(journaled)} probe(s) journaled in {folder}: press r to resume the ladder",
            timeout=10,
        )

    def resume_driver(self, results: ResultsDir) -> Any:
        """The interrupted session rebuilt from session.json, as `tuneup probe --resume` does."""
        from tuneup.probe.session import ProbeSession, shm_free_for, stage_plans
        from tuneup.tui.driver import SessionDriver

        info = results.session()
        preset = load_preset(str(info.get("preset_source") or info.get("preset")))
        trainer = str(info.get("trainer", self.trainer))
        # The journal is keyed by config: resume from the very base the session ran.
        base = dict(info.get("base_config") or base_values(preset, trainer, None))
        seed = int(info.get("seed", self.seed))
        launch = info.get("launch") or {}
        machine = dataclasses.replace(
            self.machine,
            world_size=int(launch.get("world_size", self.machine.world_size)),
            nodes=int(launch.get("nodes", self.machine.nodes)),
        )
        stages = tuple(info.get("stages", preset.stages))
        plans = stage_plans(stages, machine, base, preset, shm_free_for(trainer))
        self.engine = self.engine_factory(trainer, machine, results, preset.budget, seed)
        session = ProbeSession(
            preset=preset,
            trainer=trainer,
            backend=self.engine.backend,
            results=results,
            machine=machine,
            base_values=base,
            plans=plans,
            search=str(info.get("search", "staged")),
            seed=seed,
            sampler=self.engine.sampler,
            **_layout_fields(machine),
        )
        return SessionDriver(session, resume=True, relay=self.engine.relay)

    def action_resume_session(self) -> None:
        driver = self.driver
        if driver is None or driver.started.is_set():
            return
        # The TUNE screen was opened without starting: its handlers receive the driver's messages.
        screen = self.screen
        driver.post = screen.post_message
        screen.run_worker(driver.run, thread=True, exit_on_error=False, name="probe-session")

    # The monitor

    def action_monitor(self) -> None:
        from tuneup.monitor.sampler import Sampler
        from tuneup.tui.screens.monitor import MonitorScreen

        if isinstance(self.screen, MonitorScreen):
            return
        backend, source = (self.monitor_backend or live_gpus)()
        visible = self.job.gpus if self.job is not None else None
        self.push_screen(
            MonitorScreen(
                Sampler(backend, interval_s=0.5, capacity=64),
                source=source,
                job_id=self.job.job_id if self.job is not None else None,
                visible_gpus=visible,
            )
        )


def live_gpus() -> tuple[GpuBackend, str]:
    """NVML when it sees a GPU, else a backend that says why not."""
    from tuneup.monitor.backends import choose_backend
    from tuneup.monitor.slurm import visible_gpu_indices

    backend = choose_backend(visible=visible_gpu_indices())
    return backend, {"nvml": "NVML", "none": "no GPU"}.get(backend.name, backend.name)


def replayed_gpus(trace: Path) -> Callable[[], tuple[GpuBackend, str]]:
    """The monitor's source in demo mode: a recorded trace, replayed at its own pace."""

    def make() -> tuple[GpuBackend, str]:
        from tuneup.monitor.replay import ReplayBackend

        # shifted to the clock and looped, so the trace behaves like live GPUs
        return ReplayBackend(trace, loop=True, clock=time.time), f"replay {trace.name}"

    return make
