"""The backend a session measures with, and tuneup's own: the U-Net worker in a child process.

A backend is `backend(stage, candidate, values) -> ProbeResult`; each trainer
adapter builds one (tuneup.trainers.adapters). `WorkerBackend` runs
`python -m tuneup.worker` per probe, the bundled `unet` trainer's backend.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol, runtime_checkable

from tuneup.cluster.job import JobEnv, read_job_env
from tuneup.cluster.launch import LaunchPlan, LocalLauncher
from tuneup.probe.events import Event, EventHandler
from tuneup.probe.runner import ProbeRunner
from tuneup.probe.telemetry import ProbeTelemetry
from tuneup.probe.types import Budget, Candidate, ProbeResult, ProbeSpec

if TYPE_CHECKING:
    from tuneup.monitor.sampler import Sampler

Backend = Callable[[str, Candidate, dict[str, Any]], ProbeResult]
"""Runs one probe: `backend(stage, candidate, values) -> ProbeResult`."""


@runtime_checkable
class Interruptible(Protocol):
    """A backend that can stop its running probe: `interrupt()` only sets a flag, so a
    signal handler or another thread may call it."""

    def interrupt(self) -> None: ...


def interrupt_backend(backend: object) -> None:
    """Stop the probe `backend` is running, where it can be stopped (a plain callable cannot)."""
    if isinstance(backend, Interruptible):
        backend.interrupt()


# Probes measure training speed only: no validation pass, and a sample count the
# loader never runs out of within a probe.
PROBE_OVERRIDES = {"Nsamples_val": 0, "num_epochs": 1}


def probe_config(values: dict[str, Any], budget: Budget) -> dict[str, Any]:
    """The training config a probe runs: the values, minus validation, with enough samples."""
    config = {**values, **PROBE_OVERRIDES}
    batch = int(config.get("global_batch_size", 64))
    steps = (
        budget.loss_steps
        + budget.warmup_max_steps
        + 3 * budget.trials * budget.trial_steps
        + budget.trial_steps
    )
    config["Nsamples"] = max(int(config.get("Nsamples", 0)), batch * steps)
    return config


class WorkerBackend:
    """Each probe is `python -m tuneup.worker SPEC.json` in its own process group.

    With a running `sampler`, each ok probe's GPU fields come from its FULL
    phase's telemetry window (tuneup.probe.telemetry).

    Ranks: each probe runs with `candidate.ranks` ranks (None: the plan's
    world size), started by `launch.launcher_for` (one local process,
    torchrun, or srun over `job`'s nodes). A one-rank probe in a session of
    several GPUs sees only the first GPU this process sees
    (CUDA_VISIBLE_DEVICES narrowed to its first entry), so it measures one GPU.
    """

    def __init__(
        self,
        workdir: Path,
        budget: Budget,
        seed: int,
        on_event: EventHandler | None = None,
        sampler: Sampler | None = None,
        launch: LaunchPlan | None = None,
        job: JobEnv | None = None,
    ) -> None:
        self.budget = budget
        self.seed = seed
        self.launch = launch if launch is not None else LaunchPlan()
        self.job = job if job is not None else read_job_env()
        self.telemetry: ProbeTelemetry | None = None
        if sampler is not None:
            self.telemetry = ProbeTelemetry(sampler)
            on_event = _both(self.telemetry.on_event, on_event)
        self.runner = ProbeRunner(LocalLauncher(), workdir, on_event=on_event)

    def __call__(self, stage: str, candidate: Candidate, values: dict[str, Any]) -> ProbeResult:
        spec = ProbeSpec(
            config=probe_config(values, self.budget), budget=self.budget, seed=self.seed
        )
        ranks = self.launch.world_size if candidate.ranks is None else candidate.ranks
        # A one-process session keeps the runner's own launcher (tests swap it for a script).
        single = ranks == 1 and self.launch.world_size == 1
        launcher = None if single else self.launch.launcher_for(ranks, self.job)
        if self.telemetry is not None:
            self.telemetry.reset()
        result = self.runner.run(stage, dict(candidate.values), spec, launcher=launcher)
        if self.telemetry is not None:
            result = self.telemetry.apply(result)
        # What was launched, also for a probe that died before saying; and the knobs as
        # searched, not the probe's overrides.
        return replace(result, ranks=ranks, config=values)

    def interrupt(self) -> None:
        self.runner.interrupt()


def _both(first: EventHandler, then: EventHandler | None) -> EventHandler:
    if then is None:
        return first

    def forward(event: Event) -> None:
        first(event)
        then(event)

    return forward
