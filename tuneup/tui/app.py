"""The tuneup app: SETUP, then TUNE (a live ProbeSession), then RESULTS; `m` opens the monitor.

The app receives what touches the machine in its constructor (the machine,
the SLURM job, the clock, the backend factory, the monitor's GPU source), so
tests run it on fakes. Its sessions, new or resumed, come from the one
assembly `tuneup probe` uses (tuneup.tuning.session.assembly): the same preset, base
values, stage plans, backends, results folder and lock.
"""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any, ClassVar

from textual.app import App
from textual.binding import Binding, BindingType
from textual.screen import Screen

from tuneup.cluster.job import JobEnv, read_job_env
from tuneup.costs.estimate import StepModel
from tuneup.hardware.backends import choose_backend
from tuneup.hardware.devices import cuda_visible_devices
from tuneup.hardware.replay import ReplayBackend
from tuneup.hardware.types import GpuBackend, MachineInfo
from tuneup.preset.load import ProbePreset, default_preset_name, list_presets
from tuneup.telemetry.sampler import Sampler
from tuneup.trainers.adapters import DEFAULT_TRAINER, TrainerAdapter, load_trainer
from tuneup.tui.driver import EventRelay, SessionDriver
from tuneup.tui.screens.monitor import MonitorScreen
from tuneup.tui.screens.results import ResultsScreen, load_results
from tuneup.tui.screens.setup import SetupScreen
from tuneup.tui.screens.tune import TuneScreen
from tuneup.tuning.clock.ladder_record import LadderCosts, LadderRecord, machine_tag
from tuneup.tuning.results.journal import ResultsDir
from tuneup.tuning.session.assembly import (
    AssembledSession,
    EngineFactory,
    SessionRequest,
    assemble_new,
    default_folder,
)
from tuneup.tuning.session.engine import Engine, build_engine
from tuneup.tuning.session.resume import assemble_resume


def preset_choices() -> list[tuple[str, str]]:
    """(name, description) of the presets that load (bundled, then the user's), for the picker."""

    return [
        (entry.name, entry.description)
        for entry in list_presets()
        if entry.error is None and not entry.shadowed
    ]


def _default_tune_screen(driver: Any, start: bool) -> Screen[Any]:
    return TuneScreen(driver, start=start, gpu_feed=driver.session.sampler)


class TuneupApp(App[None]):
    """Set up a probe ladder, watch it run, review the results.

    Args:
        machine: what this machine offers.
        trainer: a trainer the app drives (`in_app`): "unet" (real probes in worker
            processes, the default) or "sim" (the synthetic surface).
        results_root: where a new session's folder is made (unless `out` is given).
        out: the new session's folder.
        review: an existing results folder to open instead of SETUP.
        preset_name: the preset chosen first; the default for the machine when None.
        job: the job the app runs in (SLURM, or this machine); read here when None.
        clock: epoch seconds (frozen in tests).
        engine: builds the session's backends (tuneup.tuning.session.engine.build_engine's
            signature; tests may pass fakes).
        monitor_backend: the monitor's GPU source (a replayed trace in demo mode).
        step_model: the estimate's guesses; by trainer when None.
        ladder_record: what ladders cost on this machine before (the setup screen's
            estimate uses it where the preset ran here); None: the guesses alone.
        time_budget_s: a time budget for the ladder, shown against the estimate.
        seed: the session's seed.
        gpu_memory_gib: each GPU's memory for the setup screen, when NVML knows it.
        tune_screen: builds the TUNE screen for a driver (tests may pass a stand-in).
        plugin_warnings: the broken or unregistered plugins, one line each with its fix
            (`tuneup.commands.plugins.plugin_warnings`): said when the app opens, since a
            stage the setup screen lacks is otherwise missing without a word.
        adapter, preset: the trainer and preset `tuneup tui` loaded (each loaded once,
            handed on to the setup screen and the session); None: loaded here.
    """

    TITLE = "tuneup"
    ENABLE_COMMAND_PALETTE = False
    BINDINGS: ClassVar[list[BindingType]] = [
        Binding("m", "monitor", "monitor"),
        Binding("r", "resume_session", "resume", show=False),
        Binding("question_mark", "help", "help"),
        Binding("ctrl+q", "quit", "quit"),
    ]

    def __init__(
        self,
        machine: MachineInfo,
        *,
        trainer: str = DEFAULT_TRAINER,
        results_root: Path = Path("tuneup-results"),
        out: Path | None = None,
        review: Path | None = None,
        preset_name: str | None = None,
        job: JobEnv | None = None,
        clock: Callable[[], float] = time.time,
        engine: EngineFactory = build_engine,
        monitor_backend: Callable[[], tuple[GpuBackend, str]] | None = None,
        step_model: StepModel | None = None,
        ladder_record: LadderRecord | None = None,
        time_budget_s: float | None = None,
        seed: int = 0,
        gpu_memory_gib: tuple[float, ...] = (),
        tune_screen: Callable[[Any, bool], Screen[Any]] = _default_tune_screen,
        plugin_warnings: Sequence[str] = (),
        adapter: TrainerAdapter | None = None,
        preset: ProbePreset | None = None,
    ) -> None:
        super().__init__()
        self.machine = machine
        self.trainer = trainer
        self.adapter = adapter or load_trainer(trainer)  # the command's, loaded once
        self.preset = preset  # the command's (None: the setup screen loads preset_name)
        self.results_root = results_root
        self.out = out
        self.review = review
        self.preset_name = preset_name or default_preset_name(machine.cuda)
        self.job = job
        self.clock = clock
        self.engine_factory = engine
        self.monitor_backend = monitor_backend
        self.step_model = step_model or self.adapter.step_model
        self.ladder_record = ladder_record
        self.time_budget_s = time_budget_s
        self.seed = seed
        self.tune_screen = tune_screen
        self.gpu_memory_gib = gpu_memory_gib
        self.driver: Any = None
        self.built: AssembledSession | None = None
        self._reviewed: Path | None = review
        self._alerts: list[str] = []
        self.plugin_warnings = tuple(plugin_warnings)

    def on_mount(self) -> None:
        for line in self.plugin_warnings:
            self.notify(line, title="plugin", severity="warning", timeout=15)
        self.push_screen(
            SetupScreen(
                self.machine,
                job=self.job,
                preset_name=self.preset_name,
                preset=self.preset,
                presets=preset_choices(),
                step_model=self.step_model,
                recorded=self._recorded,
                time_budget_s=self.time_budget_s,
                clock=self.clock,
                gpu_memory_gib=self.gpu_memory_gib,
                nproc=self.machine.ranks_per_node,
                nodes=self.machine.nodes,
            )
        )
        if self.review is not None:
            self.open_review(self.review)

    def _recorded(self, preset: str, machine: MachineInfo) -> LadderCosts | None:
        if self.ladder_record is None:
            return None
        return self.ladder_record.recall(self.trainer, preset, machine_tag(machine))

    @property
    def session_folder(self) -> Path | None:
        """The folder of the session the app last showed (new, resumed or reviewed)."""
        if self.built is not None:
            return self.built.results.path
        return self._reviewed

    def on_unmount(self) -> None:
        if self.driver is not None and self.driver.running:
            self.driver.stop()  # the running probe's worker is stopped, not left behind
            if not self.driver.wait(timeout=10):
                return  # still writing its journal: the lock goes with the process
        if self.built is not None:
            self.built.close()

    # A new session

    def on_setup_screen_start(self, message: SetupScreen.Start) -> None:
        # Making a synthetic box can take minutes: off the UI thread.
        self.run_worker(
            lambda: self._prepare(message.request, message.preset),
            thread=True,
            exit_on_error=False,
            name="prepare",
        )

    def _prepare(self, request: SessionRequest, preset: ProbePreset) -> None:
        try:
            driver = self.build_driver(request, preset)
        except Exception as exc:  # a bad data file or preset: said on screen, not a crash
            self.call_from_thread(self.notify, str(exc), severity="error", timeout=10)
            return
        self.call_from_thread(self._launch, driver, True)

    def build_driver(self, request: SessionRequest, preset: ProbePreset) -> Any:
        """The session the setup screen's `request` asks for, with this app's trainer and seed,
        assembled as `tuneup probe` assembles it (with the trainer and preset already
        loaded), in a driver."""
        request = dataclasses.replace(request, trainer=self.trainer, seed=self.seed)
        relay = self._relay()
        driver = SessionDriver(relay=relay)
        built = assemble_new(
            request,
            self.machine,
            out=self.out or self._default_out(preset.name),
            reporter=driver,
            on_event=relay,
            job=self._job_env(),
            engine_factory=self._engines,
            adapter=self.adapter,
            preset=preset,
        )
        return self._session_driver(built, driver)

    def _default_out(self, preset: str) -> Path:
        return default_folder(
            preset, self.clock, simulated=self.adapter.simulated, root=self.results_root
        )

    def _relay(self) -> Any:
        return None if self.adapter.simulated else EventRelay()  # a simulation sends none

    def _job_env(self) -> JobEnv:
        """The job the session runs in, read from this process's environment."""
        return read_job_env(gpu_count=self.machine.gpu_count if self.machine.cuda else 0)

    def _session_driver(self, built: AssembledSession, driver: SessionDriver) -> Any:
        self.built = built
        self._alerts = list(built.alerts)  # shown by _launch, on the app's thread
        return driver.attach(built.session, resume=built.resumed, on_end=built.lock.release)

    def _engines(self, *args: Any, **kwargs: Any) -> Engine:
        """The session's engine, as the app was given to build it; in demo mode its GPU
        charts come from the trace (`_demo_sampler`), set before the session is built."""
        engine = self.engine_factory(*args, **kwargs)
        if engine.sampler is None:
            engine.sampler = self._demo_sampler()
        return engine

    def _demo_sampler(self) -> Any:
        """In demo mode (`--trainer sim --replay TRACE`), GPU charts come from the trace."""
        if not self.adapter.simulated or self.monitor_backend is None:
            return None

        backend, _source = self.monitor_backend()
        return Sampler(backend, interval_s=0.5)

    def _launch(self, driver: Any, start: bool) -> None:
        said = {f"warning: {line}" for line in self.plugin_warnings}  # when the app opened
        for line in self._alerts:
            if line not in said:
                self.notify(line, severity="warning", timeout=10)
        self._alerts = []
        self.driver = driver
        self.push_screen(self.tune_screen(driver, start))

    # Review of an earlier session

    def open_review(self, folder: Path) -> None:
        """A finished session opens RESULTS; an interrupted one opens TUNE, resumed with `r`;
        one stopped with a partial summary opens its RESULTS over TUNE (`r` resumes)."""
        results = ResultsDir(folder)
        results.session()  # a clear error when it is not a results folder
        self._reviewed = folder
        if (folder / "summary.json").is_file():
            summary, probes = load_results(folder)
            if summary.partial is not None:
                self._launch(self.resume_driver(results), False)
            self.push_screen(ResultsScreen(summary, probes, folder))
            return
        # the tune screen shows what the journal holds and that r resumes it
        self._launch(self.resume_driver(results), False)

    def resume_driver(self, results: ResultsDir, retry_failed: bool = False) -> Any:
        """The interrupted session rebuilt from session.json, as `tuneup probe --resume` does
        (`retry_failed`: its failed and contended probes measured again, `--retry-failed`)."""

        relay = self._relay()
        driver = SessionDriver(relay=relay)
        built = assemble_resume(
            results.path,
            SessionRequest(retry_failed=retry_failed),
            self.machine,
            reporter=driver,
            on_event=relay,
            job=self._job_env(),
            engine_factory=self._engines,
        )
        return self._session_driver(built, driver)

    def on_results_screen_retry_failed(self, message: ResultsScreen.RetryFailed) -> None:
        self.retry_failed(message.folder)

    def retry_failed(self, folder: Path) -> None:
        """The results screen's `r` on a finished session with unmeasured stages: they are
        measured again in a new TUNE screen, as `tuneup probe --resume DIR --retry-failed`."""
        if self.driver is not None and self.driver.running:
            return
        if self.built is not None:
            self.built.close()  # the finished session's lock and sampler: the retry takes them
            self.built = None
        self.run_worker(
            lambda: self._retry(Path(folder)), thread=True, exit_on_error=False, name="retry"
        )

    def _retry(self, folder: Path) -> None:
        try:
            driver = self.resume_driver(ResultsDir(folder), retry_failed=True)
        except Exception as exc:  # the folder is locked or damaged: said, not a crash
            self.call_from_thread(self.notify, str(exc), severity="error", timeout=10)
            return
        self.call_from_thread(self._relaunch, driver)

    def _relaunch(self, driver: Any) -> None:
        """The retry's TUNE screen over SETUP: the screens of the session before go."""
        while len(self.screen_stack) > 2:
            self.pop_screen()
        self._launch(driver, True)

    def action_help(self) -> None:
        """Every screen's keys, as its footer lists them (the tune screen says more on its
        own `?`)."""
        keys = [
            f"{self.get_key_display(b.binding)} {b.binding.description}"
            for b in self.active_bindings.values()
            if b.binding.show and b.enabled and b.binding.description != "help"
        ]
        self.notify(" · ".join(keys), title="keys", timeout=8)

    def action_resume_session(self) -> None:
        """The results screen's `r` on a partial summary, once it has given way to the TUNE
        screen opened without starting: that screen runs the ladder on."""
        if isinstance(self.screen, TuneScreen):
            self.screen.action_resume()

    # The monitor

    def action_monitor(self) -> None:
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

    backend = choose_backend(cuda_visible_devices=cuda_visible_devices())
    return backend, {"nvml": "NVML", "none": "no GPU"}.get(backend.name, backend.name)


def replayed_gpus(trace: Path) -> Callable[[], tuple[GpuBackend, str]]:
    """The monitor's source in demo mode: a recorded trace, replayed at its own pace."""

    def make() -> tuple[GpuBackend, str]:

        # shifted to the clock and looped, so the trace behaves like live GPUs
        return ReplayBackend(trace, loop=True, clock=time.time), f"replay {trace.name}"

    return make
