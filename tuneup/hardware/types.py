"""What a GPU reading is, and the interface every backend implements.

A reading a GPU does not support is None, never an exception. Pure data:
every value round-trips through JSON (the `--record` trace format is one
`GpuSample.to_dict()` list per line).
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import Any, Protocol


@dataclass(frozen=True)
class GpuProcess:
    """A compute process on a GPU and the device memory it holds."""

    pid: int
    name: str | None = None
    used_memory_mb: float | None = None


@dataclass(frozen=True)
class GpuDevice:
    """What does not change while a GPU is watched."""

    index: int
    name: str | None = None
    uuid: str | None = None
    bus_id: str | None = None
    memory_total_mb: float | None = None
    power_limit_w: float | None = None

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)


@dataclass(frozen=True)
class GpuSample:
    """One reading of one GPU at `time` (seconds since the epoch)."""

    index: int
    time: float
    util_gpu_pct: float | None = None
    util_mem_pct: float | None = None
    memory_used_mb: float | None = None
    memory_total_mb: float | None = None
    power_w: float | None = None
    power_limit_w: float | None = None
    energy_mj: float | None = None  # total-energy counter (millijoules) where the GPU has one
    temperature_c: float | None = None
    sm_clock_mhz: float | None = None
    mem_clock_mhz: float | None = None
    throttle_reasons: tuple[str, ...] | None = None  # e.g. ("sw_power_cap", "hw_thermal")
    pcie_rx_kbs: float | None = None
    pcie_tx_kbs: float | None = None
    sm_active_pct: float | None = None  # GPM (Hopper and later)
    tensor_active_pct: float | None = None  # GPM
    processes: tuple[GpuProcess, ...] = field(default_factory=tuple)

    def to_dict(self) -> dict[str, Any]:
        data = dataclasses.asdict(self)
        data["throttle_reasons"] = (
            list(self.throttle_reasons) if self.throttle_reasons is not None else None
        )
        data["processes"] = [dataclasses.asdict(p) for p in self.processes]
        return data

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> GpuSample:
        known = {f.name for f in dataclasses.fields(cls)}
        values = {k: v for k, v in data.items() if k in known}
        if values.get("throttle_reasons") is not None:
            values["throttle_reasons"] = tuple(values["throttle_reasons"])
        values["processes"] = tuple(GpuProcess(**p) for p in values.get("processes") or ())
        return cls(**values)


# Reasons that do not count as throttling: an idle GPU, and clocks held at the
# application setting (the normal state); every other reason, power cap included,
# marks the window throttled, as the monitor issue asks.
NOT_THROTTLING = frozenset({"idle", "applications_clocks_setting", "none"})


class GpuBackend(Protocol):
    """A source of GPU readings: NVML, a replayed trace, or none."""

    name: str

    def available(self) -> tuple[bool, str]:
        """(True, "") when GPUs can be read, else (False, why), e.g. "NVML: driver not loaded"."""
        ...

    def devices(self) -> list[GpuDevice]:
        """The GPUs this backend watches (empty when none are visible)."""
        ...

    def sample(self) -> list[GpuSample]:
        """One reading per watched GPU, now; never raises for a GPU that went away."""
        ...

    def close(self) -> None: ...


@dataclass(frozen=True)
class MachineInfo:
    """What the machine offers, for deciding which stages and candidates can run."""

    cuda: bool = False
    gpu_count: int = 0
    gpu_names: tuple[str, ...] = ()
    cpus_usable: int = 1
    apex: bool = False
    dali: bool = False
    world_size: int = 1  # ranks a probe runs with (--nproc x --nodes)
    nodes: int = 1
    # torch.compile's toolchain (tuneup.hardware.toolchain): a C compiler, and on
    # CUDA Triton and the driver's libcuda.so.
    c_compiler: bool = True
    triton: bool = True
    libcuda: bool = True
    # torch's intra-op threads as a variable sets them for the processes started here
    # (MKL_NUM_THREADS, else OMP_NUM_THREADS, as torch reads them): what a probe whose
    # intra_op_threads is 0 runs with. None: neither is set (torch's own choice).
    env_threads: int | None = None
    env_threads_from: str = ""  # the variable that sets them: "OMP_NUM_THREADS"
    # Memory, in GiB, for weighing the loaders that hold the real data whole
    # (tuneup.tuning.session.realdata): the smallest visible GPU's, as NVML reports it (None:
    # no GPU, a MIG instance, or NVML silent), and the node's (MemTotal; None: not read).
    gpu_memory_gib: float | None = None
    host_memory_gib: float | None = None

    @property
    def ranks_per_node(self) -> int:
        return max(1, self.world_size // max(1, self.nodes))

    @property
    def cpus_per_rank(self) -> int:
        """CPUs each rank's loader may use: this node's usable CPUs shared among its ranks."""
        return max(1, self.cpus_usable // self.ranks_per_node)

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)
