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

from tuneup.bundled import cache_dir
from tuneup.config import TrainConfig, build_config, loader
from tuneup.costs.estimate import ProbeCosts, StepModel
from tuneup.errors import UsageError
from tuneup.hardware.types import MachineInfo
from tuneup.probe.targets import TUTORIAL
from tuneup.probe.types import PHASES, ProbeBudget
from tuneup.trainers.adapters import TrainerAdapter, TrainerContext
from tuneup.trainers.backends import Backend, WorkerBackend
from tuneup.unet.datacheck import data_paths
from tuneup.unet.refusals import config_problem

from .sim import SimCosts
from .sim import SimTrainer as Surface


def _unet_refusal(values: Mapping[str, Any], world_size: int, box: int | None = None) -> str | None:
    """What `tuneup train` would refuse of `values` (tuneup.unet.refusals), before a probe."""
    try:
        cfg = build_config(dict(values), source="the probe config")
    except UsageError as exc:
        return str(exc)
    return config_problem(cfg, world_size, box)


def _user_box(values: Mapping[str, Any]) -> int | None:
    """The side of the user's training box, read from its file's header; None where the
    loader reads no file, or the file is tuneup's own synthetic box (made again, if damaged,
    by the data check) or not there (the data check says what to do).

    Raises:
        UsageError: the file is there but not a box the trainer reads.
    """
    cfg: TrainConfig = build_config(dict(values), source="the probe config")
    path, _val = data_paths(cfg)
    if not loader(cfg.data_loader_config).reads_files or path is None:
        return None
    if not path.is_file() or path.resolve().is_relative_to(cache_dir().resolve()):
        return None
    from tuneup.unet.boxfile import inspect_box  # h5py: only where a user's file is read

    return inspect_box(path).box


@dataclass(frozen=True)
class UnetTrainer(TrainerAdapter):
    """The tutorial's 3D U-Net, trained by `python -m tuneup.worker` in a child per probe."""

    def refusal(
        self, values: Mapping[str, Any], world_size: int, *, data: bool = False
    ) -> str | None:
        problem = _unet_refusal(values, world_size)
        if problem is not None or not data:
            return problem
        try:
            return _unet_refusal(values, world_size, _user_box(values))
        except UsageError as exc:
            return str(exc)

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
            launcher=ctx.launcher,
        )


@dataclass(frozen=True)
class SimTrainer(TrainerAdapter):
    """A synthetic response surface shaped like the tutorial's figures: no GPU, no child.

    It simulates as many ranks as the session's launch plan runs (--nproc x --nodes), and
    refuses what the U-Net's trainer refuses (it reads no files).
    """

    def refusal(
        self, values: Mapping[str, Any], world_size: int, *, data: bool = False
    ) -> str | None:
        return _unet_refusal(values, world_size)

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
    profiles=True,  # its worker profiles a probe's FULL steps (tuneup/worker/profile.py)
    phases=PHASES,
    targets=(TUTORIAL,),
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
    targets=(TUTORIAL,),  # the U-Net's, simulated
    # It answers at once, but prices its probes in simulated seconds (SimCosts: a GPU
    # node's process start and set-up, a step of the U-Net): what a time budget counts.
    step_model=StepModel(
        startup_s=SimCosts().spawn_s + SimCosts().first_s,
        step_s=0.1,
        served_startup_s=SimCosts().setup_s,
        first_s=SimCosts().first_s,
    ),
)
