"""tuneup's built-in trainer adapters: the U-Net worker and the `sim` surface.

Each is a module-level `TrainerAdapter` value registered under the
entry-point group ``tuneup.trainers`` (see pyproject.toml), exactly as a
third-party package would register its own; what tuneup does for each comes
from what it declares here, never from its name. The `command` trainer has a
package of its own (tuneup_plugins.command).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from tuneup.hardware.types import MachineInfo
from tuneup.probe.estimate import ProbeCosts, StepModel
from tuneup.probe.types import PHASES, ProbeBudget
from tuneup.trainers.adapters import TrainerAdapter, TrainerContext
from tuneup.trainers.backends import Backend, WorkerBackend

from .sim import SimCosts
from .sim import SimTrainer as Surface


@dataclass(frozen=True)
class UnetTrainer(TrainerAdapter):
    """The tutorial's 3D U-Net, trained by `python -m tuneup.worker` in a child per probe."""

    def backend(self, ctx: TrainerContext) -> Backend:
        return WorkerBackend(
            ctx.workdir,
            ctx.budget,
            ctx.seed,
            on_event=ctx.on_event,
            sampler=ctx.sampler,
            launch=ctx.launch,
            job=ctx.job,
            fresh_processes=ctx.fresh_processes,
        )


@dataclass(frozen=True)
class SimTrainer(TrainerAdapter):
    """A synthetic response surface shaped like the tutorial's figures: no GPU, no child.

    It simulates as many ranks as the session's launch plan runs (--nproc x --nodes).
    """

    def backend(self, ctx: TrainerContext) -> Backend:
        return Surface(seed=ctx.seed, world_size=ctx.world_size, budget=ctx.budget)

    def known_costs(
        self, values: Mapping[str, Any], budget: ProbeBudget, machine: MachineInfo
    ) -> ProbeCosts | None:
        """Its probes' costs in its own simulated seconds, as its backend will price them."""
        surface = Surface(world_size=max(1, machine.world_size), budget=budget)
        return surface.prior_costs(dict(values))


UNET = UnetTrainer(
    name="unet",
    description="the tutorial's 3D U-Net, one child process per probe (the default)",
    tunes="tuneup's U-Net",
    data_files=True,
    gpu_telemetry=True,
    in_app=True,
    phases=PHASES,
    # A guess for a GPU node until probes measure it: a process start with CUDA, data and
    # autotuning; a step of the full U-Net at batch 64 (the tutorial's A100 took 0.17 s in
    # fp32, 0.1 s with AMP; newer GPUs less); a stage's probes share a process.
    step_model=StepModel(startup_s=30.0, step_s=0.1, served_startup_s=5.0),
)
SIM = SimTrainer(
    name="sim",
    description="a synthetic response surface shaped like the tutorial's: answers in "
    "milliseconds, for trying the ladder and the app",
    tunes="the synthetic surface",
    simulated=True,
    in_app=True,
    phases=PHASES,
    # It answers at once, but prices its probes in simulated seconds (SimCosts: a GPU
    # node's process start and set-up, a step of the U-Net): what a time budget counts.
    step_model=StepModel(
        startup_s=SimCosts().spawn_s + SimCosts().first_s,
        step_s=0.1,
        served_startup_s=SimCosts().setup_s,
        first_s=SimCosts().first_s,
    ),
)
