"""The trainer-adapter interface: what measures a probe, and the registry that finds them.

A trainer adapter turns a session's settings (a `TrainerContext`) into a
`Backend`: a callable that runs one probe, `backend(stage, candidate, values)
-> ProbeResult`. Built-in adapters (`unet`, `sim`, `command`) live in
``tuneup_plugins.trainers`` and register under the entry-point group
``tuneup.trainers`` exactly as a third-party package would.

Listing names imports nothing, loading one by name raises a clear UsageError,
scanning all reports broken plugins and keeps going (tuneup.plugin_registry).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from tuneup.plugin_registry import PLUGIN_API_VERSION, PluginInfo, Registry
from tuneup.probe.types import Budget
from tuneup.trainers.backends import Backend

if TYPE_CHECKING:
    from collections.abc import Callable

    from tuneup.monitor.sampler import Sampler
    from tuneup.preset.load import ProbePreset

ENTRY_POINT_GROUP = "tuneup.trainers"
API_VERSION = PLUGIN_API_VERSION  # what an adapter built against this tuneup declares


@dataclass(frozen=True)
class TrainerContext:
    """Everything a session offers the trainer it measures with.

    Attributes:
        workdir: a folder of the results directory for the probes' files
            (spec files, logs); the adapter may create it.
        budget: the preset's probe budget (warm-up cap, K, T, per-probe limit).
        seed: the session's seed; a trainer that draws random numbers uses it.
        on_event: called with progress events (the worker's event dicts) from
            the thread that runs the probe; None when nobody listens.
        sampler: the GPU telemetry sampler, running while the session runs; None
            on a machine without GPUs or for trainers that cannot use it.
        preset: the preset the session runs (the `command` trainer reads its
            `command` section); None when there is none.
        launch: how a probe's ranks are started (local, torchrun, srun), from
            tuneup.cluster; None means one local process.
        job: the SLURM allocation the session runs in; None outside one.
    """

    workdir: Path
    budget: Budget = field(default_factory=Budget)
    seed: int = 0
    on_event: Callable[[dict[str, Any]], None] | None = None
    sampler: Sampler | None = None
    preset: ProbePreset | None = None
    launch: Any = None
    job: Any = None


@dataclass(frozen=True)
class TrainerAdapter:
    """A trainer: plain data plus `backend`, which subclasses implement.

    Attributes:
        name: the registry name (the entry point's name), as given to --trainer.
        description: one sentence for `tuneup plugins list` and the app.
        api_version: the plugin API version the adapter was written for; the
            registry skips an adapter whose version this tuneup does not support.
    """

    name: str
    description: str
    api_version: int = API_VERSION

    def backend(self, ctx: TrainerContext) -> Backend:
        """The callable that runs one probe with this trainer.

        Called once per session. It may return an object with an
        `interrupt()` method, which the front end calls (from a signal handler
        or another thread) to stop the running probe; it must only set a flag.

        Raises:
            UsageError: the session's settings cannot work with this trainer
                (say, the preset has no section it needs).
        """
        raise NotImplementedError(f"trainer {self.name!r} does not implement backend()")


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


def describe_trainers() -> list[PluginInfo]:
    """Every trainer entry point with its origin and status, for `tuneup plugins list`."""
    return _REGISTRY.describe()
