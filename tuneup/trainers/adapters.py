"""The trainer-adapter interface: what measures a probe, and the registry that finds them.

A trainer adapter turns a session's settings (a `TrainerContext`) into a
`Backend`: a callable that runs one probe, `backend(stage, candidate, values)
-> ProbeResult`. Besides that one method an adapter is plain data: what it
needs from the session (the preset's data files, GPU telemetry), how the app
and the estimate treat it, and the exports of its sessions. tuneup's core
reads these declarations and never branches on a trainer's name; the
built-in adapters (`unet`, `sim`, `command`) live in the plugins/ folder and
register under the entry-point group ``tuneup.trainers`` exactly as a
third-party package would.

Listing names imports nothing, loading one by name raises a clear UsageError,
scanning all reports broken plugins and keeps going (tuneup.plugin_registry).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

from tuneup.costs.estimate import ProbeCosts, StepModel
from tuneup.errors import UsageError
from tuneup.hardware.types import MachineInfo
from tuneup.plugin_registry import PLUGIN_API_VERSION, PluginInfo, Registry
from tuneup.probe.backend import Backend, ProbeBackend
from tuneup.probe.events import EventHandler
from tuneup.probe.targets import TUNEUP, Target
from tuneup.probe.types import ProbeBudget

if TYPE_CHECKING:
    from tuneup.cluster.job import JobEnv
    from tuneup.cluster.launch import Launcher, LaunchPlan
    from tuneup.telemetry.sampler import Sampler

ENTRY_POINT_GROUP = "tuneup.trainers"
API_VERSION = PLUGIN_API_VERSION  # what an adapter built against this tuneup declares

DEFAULT_TRAINER = "unet"
"""The trainer a session measures with when none is named."""


class PresetView(Protocol):
    """What a trainer may read of the session's preset (a `tuneup.preset.types.ProbePreset`).

    A protocol, so that the adapter API does not depend on the preset loader: the
    loader checks each trainer's section through the adapters, above them.
    """

    @property
    def name(self) -> str: ...

    @property
    def source(self) -> str: ...

    @property
    def sections(self) -> Mapping[str, Any]: ...


@dataclass(frozen=True)
class TrainerContext:
    """Everything a session offers the trainer it measures with.

    Attributes:
        workdir: a folder of the results directory for the probes' files
            (spec files, logs); the adapter may create it.
        budget: the preset's probe budget (warm-up cap, K, T, per-probe limit).
        seed: the session's seed; a trainer that draws random numbers uses it.
        on_event: called with progress events (the worker's events) from the
            thread that runs the probe; None when nobody listens.
        sampler: the GPU telemetry sampler, running while the session runs; None
            on a machine without GPUs or for a trainer without `gpu_telemetry`.
        preset: the preset the session runs (an adapter reads its own section
            with `TrainerAdapter.section_of`); None when there is none.
        launch: how a probe's ranks are started (local, torchrun, srun), from
            tuneup.cluster; None means one local process.
        job: the job the session runs in (a SLURM allocation or this machine).
        fresh_processes: the user asked for every probe in a process of its own; a
            backend that reuses processes between probes does not then.
        launcher: how a probe of one process starts where the caller wraps it
            (`tuneup profile --nsys`: under Nsight Systems); None: the trainer's own way.
    """

    workdir: Path
    budget: ProbeBudget = field(default_factory=ProbeBudget)
    seed: int = 0
    on_event: EventHandler | None = None
    sampler: Sampler | None = None
    preset: PresetView | None = None
    launch: LaunchPlan | None = None
    job: JobEnv | None = None
    fresh_processes: bool = False
    launcher: Launcher | None = None

    @property
    def world_size(self) -> int:
        """The ranks the session's launch plan runs a probe with (1 without a plan)."""
        return max(1, self.launch.world_size) if self.launch is not None else 1


@dataclass(frozen=True)
class TrainerAdapter:
    """A trainer: plain data plus `backend`, which subclasses implement.

    Attributes:
        name: the registry name (the entry point's name), as given to --trainer.
        description: one sentence for `tuneup plugins list` and the app.
        api_version: the plugin API version the adapter was written for; the
            registry skips an adapter whose version this tuneup does not support.
        tunes: what a session with this trainer tunes, in a few words for
            messages ("tuneup's U-Net", "your own command").
        section: it reads a section of the preset named after it (``command:``
            for the `command` trainer), checked by `check_section` when the
            preset loads and recorded in the session's session.json.
        data_files: its probes train on the preset's data files with tuneup's
            loaders: a session makes the preset's synthetic box when it names no
            data, and keeps the loader workers' batches within /dev/shm.
        gpu_telemetry: its probes run on this machine's GPUs and the backend joins
            `TrainerContext.sampler`'s readings to each result: a session samples
            the GPUs (where NVML sees them) only for such a trainer.
        simulated: its probes are simulated (no child process, no GPU, no progress
            events); the app's demo mode shows a replayed GPU trace beside them.
        in_app: the app (`tuneup tui`) can drive it; others run with `tuneup probe`.
        profiles: its backend profiles a probe whose candidate asks (`Candidate.profile`):
            the result's `profile` holds where the step's time went. `tuneup profile` and
            the app's `p` run a journaled probe again through it; where False they say, in
            `no_profile`'s words, why not and how the user can.
        step_model: the estimate's guess of a probe's start-up and step time,
            until a ladder has measured them.
        phases: the phases its probes can measure apart (of PHASES: IO, SYNTHETIC
            and FULL; FULL alone by default, what every backend returns); a stage
            judged on a phase it cannot measure is judged on FULL instead.
        exports: the formats `tuneup export` offers for its sessions, each with
            the file name the app's export-all writes it to, rendered by
            `render_export`; empty: tuneup's own formats of the tuned config.
        own_target: the program its probes ran, which the search's recommendation is
            for (probe.targets: `tuneup train`).
        targets: the other programs its sessions' answers are for (the tutorial's
            train.py): where one cannot run a recommended value, the session tunes it
            an answer of its own.
    """

    name: str
    description: str
    api_version: int = API_VERSION
    tunes: str = "your training"
    section: bool = False
    data_files: bool = False
    gpu_telemetry: bool = False
    simulated: bool = False
    in_app: bool = False
    profiles: bool = False
    step_model: StepModel = field(default_factory=StepModel)
    phases: tuple[str, ...] = ("full",)
    exports: Mapping[str, str] = field(default_factory=dict, compare=False, hash=False)
    own_target: Target = TUNEUP
    targets: tuple[Target, ...] = ()

    def backend(self, ctx: TrainerContext) -> Backend | ProbeBackend:
        """What runs one probe with this trainer: a `tuneup.probe.backend.ProbeBackend`
        (its `interrupt()`, called from a signal handler or another thread to stop the
        running probe, must only set a flag; `close()`, `limit_s` and `replayed()` as
        it needs them), or a plain callable.

        Called once per session.

        Raises:
            UsageError: the session's settings cannot work with this trainer
                (say, the preset has no section it needs).
        """
        raise NotImplementedError(f"trainer {self.name!r} does not implement backend()")

    def refusal(
        self, values: Mapping[str, Any], world_size: int, *, data: bool = False
    ) -> str | None:
        """Why this trainer would refuse to train `values` on `world_size` ranks, in one
        line with the fix; None when it would start (the default: it refuses nothing).

        A session asks it of its baseline before the first probe (a refusal is the
        session's one-line error, exit 2) and of each candidate (not tried, and said),
        so a config the trainer refuses costs no probe and is never recommended. With
        `data` (the baseline's question) it may read the data files the values name.
        """
        return None

    def known_costs(
        self, values: Mapping[str, Any], budget: ProbeBudget, machine: MachineInfo
    ) -> ProbeCosts | None:
        """What this trainer's probes of `values` cost on `machine`, where it knows before any
        has run: a simulated trainer prices its own probes in its simulated seconds, so a
        time budget plans in them. None (the default): the estimate goes by an earlier
        ladder's record, the preset's `probe.costs`, or `step_model`."""
        return None

    def tunable(self, section: Mapping[str, Any] | None) -> frozenset[str] | None:
        """The knobs this trainer can pass to what it trains, given its preset section;
        None (the default): every knob. A stage that sets none of them is left out of the
        ladder before its first probe, and said (the `command` trainer's unmapped knobs)."""
        return None

    def no_profile(
        self, section: Mapping[str, Any] | None, values: Mapping[str, Any], report: Path
    ) -> str:
        """Why a probe of this trainer cannot be profiled, and how the user can take a
        profile, in one line (asked only where `profiles` is False).

        Args:
            section: its preset section as the session ran it (None: it has none).
            values: the probe's knob values.
            report: where a report of that probe would go (no suffix), for a command the
                user may run themselves.
        """
        if self.simulated:
            return (
                f"there is nothing to profile: the probes of a {self.name} session are "
                f"simulated, no training step ran (a session of the {DEFAULT_TRAINER} trainer "
                "has profiles)"
            )
        return f"there is nothing to profile: the {self.name} trainer takes no profile"

    def check_section(self, data: Any) -> list[str]:
        """Every problem with this trainer's preset section, one line each ([] when sound).

        Called with the section as read from YAML when a preset holding one
        loads (only for a trainer that declares `section`). Each line starts
        with where the problem is (``command.run: ...``); the preset's error
        names the preset once.
        """
        return []

    def section_of(self, ctx: TrainerContext) -> dict[str, Any] | None:
        """This trainer's section of the session's preset; None when it has none."""
        if ctx.preset is None:
            return None
        section = ctx.preset.sections.get(self.name)
        return dict(section) if section is not None else None

    def render_export(
        self,
        fmt: str,
        section: Mapping[str, Any] | None,
        values: Mapping[str, Any],
        hints: Mapping[str, Any],
        source: str,
    ) -> str:
        """One of `exports` for a finished session, as text.

        Args:
            fmt: the format, one of `exports`.
            section: the trainer's preset section as the session ran it (None
                when the preset had none).
            values: the recommended knob values.
            hints: the preset's machine hints, with the probed layout and job.
            source: the session's preset (a name or path), for messages.

        Raises:
            UsageError: a format this trainer's sessions have no meaning for, or
                values the section cannot render.
        """
        raise UsageError(f"trainer '{self.name}' offers no exports of its own")


_REGISTRY: Registry[TrainerAdapter] = Registry(ENTRY_POINT_GROUP, "trainer", TrainerAdapter)


def trainer_names() -> list[str]:
    """Names of the registered trainers, sorted; reads metadata and imports nothing."""
    return _REGISTRY.names()


def load_trainer(name: str) -> TrainerAdapter:
    """The trainer registered as `name` (the built-in one when a plugin repeats its name).

    Raises:
        UsageError: no trainer has that name (the known ones are listed), or its
            plugin is broken (fails to import, wrong type, name or API version).
    """
    return _REGISTRY.load(name)


def scan_trainers() -> tuple[dict[str, TrainerAdapter], list[str]]:
    """Load every registered trainer; broken plugins become warning lines and are skipped."""
    return _REGISTRY.scan()


def skipped_trainers() -> list[str]:
    """One warning per trainer plugin this process tried and skipped; imports nothing."""
    return _REGISTRY.skipped()


def describe_trainers() -> list[PluginInfo]:
    """Every trainer entry point with its origin and status, for `tuneup plugins list`."""
    return _REGISTRY.describe()
