"""What a session probes with: the trainer's backend and the GPU telemetry, built once for both
front ends (`tuneup probe` and the app) so they cannot drift apart.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from tuneup.cluster.job import JobEnv
    from tuneup.cluster.launch import LaunchPlan
    from tuneup.monitor.types import GpuBackend
    from tuneup.probe.preset import ProbePreset
    from tuneup.probe.types import Budget, MachineInfo


@dataclass
class Engine:
    """The backend, and the GPU telemetry to stop at the end."""

    backend: Any
    sampler: Any = None
    gpu_backend: GpuBackend | None = None
    relay: Any = None

    def close(self) -> None:
        if self.sampler is not None:
            self.sampler.stop()
        if self.gpu_backend is not None:
            self.gpu_backend.close()


def build_engine(
    trainer: str,
    machine: MachineInfo,
    workdir: Path,
    budget: Budget,
    seed: int,
    *,
    launch: LaunchPlan,
    job: JobEnv,
    on_event: Callable[[dict[str, Any]], None] | None = None,
    preset: ProbePreset | None = None,
) -> Engine:
    """The registered trainer's backend, with a GPU sampler where the U-Net runs on GPUs.

    Raises:
        UsageError: an unknown trainer, or settings the trainer cannot work with.
    """
    from tuneup.probe.adapters import TrainerContext, load_trainer

    adapter = load_trainer(trainer)
    gpu_backend = None
    sampler = None
    if trainer == "unet" and machine.cuda:  # telemetry only where NVML can see GPUs
        from tuneup.monitor.backends import choose_backend
        from tuneup.monitor.slurm import visible_gpu_indices
        from tuneup.probe.session import gpu_sampler

        gpu_backend = choose_backend(visible=visible_gpu_indices())
        sampler = gpu_sampler(trainer, gpu_backend)
    context = TrainerContext(
        workdir=workdir,
        budget=budget,
        seed=seed,
        on_event=on_event,
        sampler=sampler,
        preset=preset,
        launch=launch,
        job=job,
    )
    return Engine(adapter.backend(context), sampler, gpu_backend, on_event)
