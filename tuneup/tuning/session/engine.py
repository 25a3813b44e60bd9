"""What a session probes with: the trainer's backend and the GPU telemetry, built once for both
front ends (`tuneup probe` and the app) so they cannot drift apart.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from tuneup.hardware.backends import choose_backend
from tuneup.hardware.devices import cuda_visible_devices
from tuneup.probe.backend import ProbeBackend
from tuneup.probe.events import Event, EventHandler
from tuneup.probe.hostload import HostLoadSampler
from tuneup.probe.load_watch import ContentionWatch
from tuneup.telemetry.sampler import Sampler
from tuneup.trainers.adapters import TrainerAdapter, TrainerContext

if TYPE_CHECKING:
    from tuneup.cluster.job import JobEnv
    from tuneup.cluster.launch import LaunchPlan
    from tuneup.hardware.types import GpuBackend, MachineInfo
    from tuneup.preset.load import ProbePreset
    from tuneup.probe.types import ProbeBudget


@dataclass
class Engine:
    """The backend, and the GPU telemetry to stop at the end."""

    backend: ProbeBackend
    sampler: Sampler | None = None
    gpu_backend: GpuBackend | None = None
    relay: EventHandler | None = None
    host: HostLoadSampler | None = None

    def close(self) -> None:
        self.backend.close()  # a serving worker it keeps, first
        if self.host is not None:
            self.host.stop()
        if self.sampler is not None:
            self.sampler.stop()
        if self.gpu_backend is not None:
            self.gpu_backend.close()


def build_engine(
    adapter: TrainerAdapter,
    machine: MachineInfo,
    workdir: Path,
    budget: ProbeBudget,
    seed: int,
    *,
    launch: LaunchPlan,
    job: JobEnv,
    on_event: EventHandler | None = None,
    preset: ProbePreset | None = None,
    fresh_processes: bool = False,
) -> Engine:
    """The registered trainer's backend, with a GPU sampler where it has GPU telemetry and GPUs.

    Every trainer's probes are watched for other processes using the host
    (load_watch.ContentionWatch): a contended probe is measured again by the search.

    Raises:
        UsageError: an unknown trainer, or settings the trainer cannot work with.
    """

    gpu_backend = None
    sampler = None
    if adapter.gpu_telemetry and machine.cuda:  # telemetry only where NVML can see GPUs
        gpu_backend = choose_backend(cuda_visible_devices=cuda_visible_devices())
        sampler = gpu_sampler(adapter, gpu_backend)
    host = HostLoadSampler()
    watch_events: list[EventHandler] = []

    def events(event: Event) -> None:
        for hear in watch_events:
            hear(event)
        if on_event is not None:
            on_event(event)

    context = TrainerContext(
        workdir=workdir,
        budget=budget,
        seed=seed,
        on_event=events,
        sampler=sampler,
        preset=preset,
        launch=launch,
        job=job,
        fresh_processes=fresh_processes,
    )
    running = machine.env_threads or machine.cpus_per_rank
    watch = ContentionWatch(adapter.backend(context), host, running)
    watch_events.append(watch.on_event)
    host.start()
    return Engine(watch, sampler, gpu_backend, on_event, host)


# A FULL phase lasts 1.5-4 s on a GPU: at 0.5 s it would get 3-8 readings.
PROBE_SAMPLE_INTERVAL_S = 0.2
PROBE_SAMPLE_HISTORY_S = 20 * 60  # a probe's FULL window must still be held when it ends


def gpu_sampler(
    adapter: TrainerAdapter,
    gpu_backend: GpuBackend | None,
    interval_s: float = PROBE_SAMPLE_INTERVAL_S,
) -> Sampler | None:
    """A sampler for the session's probes: a trainer with `gpu_telemetry`, on a machine with GPUs.

    Pass it to both the WorkerBackend (which joins it to each probe) and the
    ProbeSession (which starts it with the session and stops it at the end).
    """
    if gpu_backend is None or not adapter.gpu_telemetry:
        return None
    ok, _why = gpu_backend.available()
    if not ok or not gpu_backend.devices():
        return None

    capacity = int(PROBE_SAMPLE_HISTORY_S / interval_s)
    return Sampler(gpu_backend, interval_s=interval_s, capacity=capacity)
