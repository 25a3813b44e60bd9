"""The backend a session measures with, and tuneup's own: the U-Net worker in a child process.

A backend is `backend(stage, candidate, values) -> ProbeResult`; each trainer
adapter builds one (tuneup.trainers.adapters). `WorkerBackend` runs
`python -m tuneup.worker`, the bundled `unet` trainer's backend: the ladder's
probes share one warm serving worker, and a fresh process starts only where a
knob or a failure demands one.
"""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

from tuneup.bundled import cache_dir
from tuneup.cluster.job import JobEnv, read_job_env
from tuneup.cluster.launch import Launcher, LaunchPlan, LocalLauncher
from tuneup.config import data_path_knobs, process_kind
from tuneup.costs.compile_record import ColdCompileCosts
from tuneup.probe.backend import Backend, ProbeBackend, as_backend
from tuneup.probe.confine import THREADS_KNOB
from tuneup.probe.events import Event, EventHandler, StartEvent
from tuneup.probe.plan import ProbeSpec, plan_for
from tuneup.probe.runner import ProbeRunner
from tuneup.probe.telemetry import ProbeTelemetry
from tuneup.probe.types import BASELINE_STAGE, Candidate, Contention, ProbeBudget, ProbeResult

if TYPE_CHECKING:
    from tuneup.telemetry.sampler import Sampler

__all__ = ["Backend", "ProbeBackend", "WorkerBackend", "as_backend"]


# Probes measure training speed only: no validation pass, and a sample count the
# loader never runs out of within a probe.
PROBE_OVERRIDES = {"Nsamples_val": 0, "num_epochs": 1}
PROBE_EPOCH_STEPS = 2000
"""Steps in a probe's epoch: more than a probe runs (its trials are seconds long, its
steps follow from the step time), so no epoch restarts inside a trial."""


def probe_config(values: dict[str, Any], budget: ProbeBudget) -> dict[str, Any]:
    """The training config a probe runs: the values, minus validation, with enough samples."""
    config = {**values, **PROBE_OVERRIDES}
    batch = int(config.get("global_batch_size", 64))
    steps = budget.loss_steps + PROBE_EPOCH_STEPS
    config["Nsamples"] = max(int(config.get("Nsamples", 0)), batch * steps)
    return config


class WorkerBackend(ProbeBackend):
    """Each probe is `python -m tuneup.worker` in a process group of its own, or in the
    serving worker the stage's probe before it ran in.

    With a running `sampler`, each ok probe's GPU fields come from its FULL
    phase's telemetry window (tuneup.probe.telemetry).

    Ranks: each probe runs with `candidate.ranks` ranks (None: the plan's
    world size), started by `launch.launcher_for` (one local process,
    torchrun, or srun over `job`'s nodes). A one-rank probe in a session of
    several GPUs sees only the first GPU this process sees
    (CUDA_VISIBLE_DEVICES narrowed to its first entry), so it measures one GPU.

    Processes: the one-rank probes of a one-rank session run in a serving
    worker (tuneup.worker.serve) that probes of the same process kind
    (`config.process_kind`: the device, cuDNN benchmarking) share, the whole
    ladder long: the CUDA context, cuDNN's execution plans and compiled
    kernels stay warm (on an H200 a fresh process's first step took 13-56 s),
    while each probe builds its model, optimizer and loader afresh from the
    fixed seed. A fresh process starts where a knob demands one (another
    process kind) or a failure does (the runner ends the process after any);
    `fresh_processes` gives every probe a process of its own. Several ranks
    always start afresh. `launcher` starts a one-process probe's own process
    (`tuneup profile --nsys`: under Nsight Systems); None: a local Python.

    Each probe measures by its plan (tuneup.probe.plan.plan_for: the phase that
    judges it, or every phase). Measuring only what changed: a probe that wants
    every phase, of a data path (`config.data_path_knobs`) whose IO an earlier
    probe measured, skips IO and carries that figure (`io_from`); a baseline
    probe measures it again, for its noise.
    torch.compile's caches live in tuneup's cache folder; a probe that found its
    graphs there carries the cold compile's cost measured before (`compile_cold_s`).
    """

    def __init__(
        self,
        workdir: Path,
        budget: ProbeBudget,
        seed: int,
        on_event: EventHandler | None = None,
        sampler: Sampler | None = None,
        launch: LaunchPlan | None = None,
        job: JobEnv | None = None,
        fresh_processes: bool = False,
        launcher: Launcher | None = None,
    ) -> None:
        self.budget = budget
        self.seed = seed
        self.launch = launch if launch is not None else LaunchPlan()
        self.job = job if job is not None else read_job_env()
        self.fresh_processes = fresh_processes
        self.telemetry: ProbeTelemetry | None = None
        if sampler is not None:
            self.telemetry = ProbeTelemetry(sampler)
            on_event = _both(self.telemetry.on_event, on_event)
        self.runner = ProbeRunner(launcher or LocalLauncher(), workdir, on_event=on_event)
        self.compile_costs = ColdCompileCosts(cache_dir() / "compile")
        self._io: dict[str, tuple[float, str]] = {}  # data path -> (IO samples/s, measured by)
        self.threads: int | None = None  # confined to, under others' load (confine.py)

    def __call__(self, stage: str, candidate: Candidate, values: dict[str, Any]) -> ProbeResult:
        ranks = self.launch.world_size if candidate.ranks is None else candidate.ranks
        # A one-process session keeps the runner's own launcher (tests swap it for a script).
        single = ranks == 1 and self.launch.world_size == 1
        launcher = None if single else self.launch.launcher_for(ranks, self.job)
        data_path = _key(values, data_path_knobs(), ranks)
        known_io = self._io.get(data_path) if stage != BASELINE_STAGE else None
        carried = ("io",) if known_io is not None and candidate.whole else ()
        plan = plan_for(self.budget, candidate, carried=carried)
        cap = self.threads if not int(values.get(THREADS_KNOB) or 0) else None
        config = probe_config(values, self.budget)
        spec = ProbeSpec(config=config, plan=plan, seed=self.seed, threads_cap=cap)
        shared = single and not self.fresh_processes
        reuse = _process_key(values, ranks) if shared else None
        if self.telemetry is not None:
            self.telemetry.reset()
        result = self.runner.run(
            stage, dict(candidate.values), spec, launcher=launcher, reuse=reuse
        )
        if self.telemetry is not None:
            result = self.telemetry.apply(result)
        result = self.compile_costs.apply(result, values)
        if known_io is not None and carried and result.ok:
            result = replace(result, io_sps=known_io[0], io_from=f"carried from {known_io[1]}")
        elif result.ok and result.io_sps is not None and "io" in plan.phases:
            self._io[data_path] = (result.io_sps, f"{stage}: {candidate.label}")
        ran_on = self._threads_run(cap)
        if ran_on:
            held = replace(result.contention or Contention(), confined_threads=ran_on)
            result = replace(result, contention=held)
        # What was launched, also for a probe that died before saying; and the knobs as
        # searched, not the probe's overrides.
        return replace(result, ranks=ranks, config=values)

    def confine_threads(self, threads: int) -> bool:
        """Later probes that leave the count to torch run on at most `threads` (confine.py);
        a probe of several ranks runs as torchrun set it (one thread each)."""
        if self.launch.world_size > 1:
            return False
        self.threads = threads
        return True

    def _threads_run(self, cap: int | None) -> int | None:
        """The threads the worker lowered its probe to under `cap`, as its start event's
        config says; None where it lowered nothing (torch's own count was no more)."""
        record = self.runner.last_run
        if not cap or record is None:
            return None
        for event in record.events:
            if isinstance(event, StartEvent):
                ran = event.config.get(THREADS_KNOB)
                return ran if isinstance(ran, int) and ran > 0 else None
        return None

    def interrupt(self) -> None:
        self.runner.interrupt()

    def close(self) -> None:
        """Stop the serving worker, if one is kept."""
        self.runner.close()


def _process_key(values: dict[str, Any], ranks: int) -> str:
    """Which worker process a probe of `values` may share (config.process_kind)."""
    return json.dumps([process_kind(values), ranks], sort_keys=True, default=str)


def _key(values: dict[str, Any], knobs: tuple[str, ...], ranks: int) -> str:
    """The values of `knobs` (missing ones as null) and the ranks, as one comparable text."""
    return json.dumps([{k: values.get(k) for k in knobs}, ranks], sort_keys=True, default=str)


def _both(first: EventHandler, then: EventHandler | None) -> EventHandler:
    if then is None:
        return first

    def forward(event: Event) -> None:
        first(event)
        then(event)

    return forward
