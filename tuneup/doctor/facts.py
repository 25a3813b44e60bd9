"""What `tuneup doctor` reads about the node, as one frozen value; every source is injectable.

Reading has side effects (NVML, the driver, /proc, PATH); judging them is
pure (checks.py), so each check's OK, WARN and FAIL is tested with fakes.
"""

from __future__ import annotations

import contextlib
import os
import subprocess
import sys
from collections.abc import Callable, Mapping
from dataclasses import asdict, dataclass, field
from typing import Any

from tuneup.bounded import loads
from tuneup.cluster.job import describe, read_job_env
from tuneup.cluster.shm import shm_free_bytes
from tuneup.hardware.machine import apex_fused_adam_available, has_module, usable_cpus
from tuneup.hardware.nvml import DriverGpu, NvmlBackend, read_driver_facts
from tuneup.hardware.toolchain import Toolchain, find_toolchain
from tuneup.probe.hostload import HostLoadSampler
from tuneup.probe.types import Contention

HOST_LOAD_S = 1.5  # the doctor's look at what other processes take of the CPUs


@dataclass(frozen=True)
class GpuFact:
    name: str
    memory_gib: float | None
    mig: bool | None  # None: the GPU has no MIG


@dataclass(frozen=True)
class NvmlReading:
    """What the driver says through NVML: no CUDA context, as nvidia-smi reads it."""

    gpus: tuple[GpuFact, ...] = ()
    driver: str | None = None
    cuda_driver: str | None = None  # the newest CUDA the driver supports, e.g. "12.4"
    nvml_version: str | None = None
    error: str | None = None  # why NVML could not be read; None when it was


@dataclass(frozen=True)
class TorchFacts:
    """torch as installed; read without creating a CUDA context."""

    version: str | None = None  # None: torch does not import
    cuda_build: str | None = None  # torch.version.cuda; None: a CPU build
    cuda_available: bool = False
    device_count: int = 0
    cudnn: str | None = None
    nccl: str | None = None
    tf32_matmul: bool | None = None
    tf32_cudnn: bool | None = None
    cudnn_enabled: bool | None = None
    cudnn_benchmark: bool | None = None
    error: str | None = None


@dataclass(frozen=True)
class GpuUse:
    """What others run on one GPU as the doctor looks (it runs nothing there yet)."""

    index: int
    util_pct: float | None = None
    processes: tuple[str, ...] = ()  # the compute processes' names (their pids where unnamed)


@dataclass(frozen=True)
class Facts:
    gpus: tuple[GpuFact, ...] = ()
    nvml_error: str | None = None  # why NVML could not be read; None when it was
    driver: str | None = None
    cuda_driver: str | None = None  # the newest CUDA the driver supports, e.g. "12.4"
    nvml_version: str | None = None
    torch: TorchFacts = field(default_factory=TorchFacts)
    cpus_usable: int = 1
    cpus_total: int = 1
    shm_free: int | None = None
    mem_total: int | None = None
    mem_available: int | None = None
    slurm: str | None = None  # the job, in one line; None outside SLURM
    dali: bool = False
    apex: bool = False
    toolchain: Toolchain = field(default_factory=lambda: Toolchain(None, False, None))
    tf32_override: str | None = None  # NVIDIA_TF32_OVERRIDE
    # What other processes took of the usable CPUs over HOST_LOAD_S (None: not readable),
    # and what runs on each GPU (NVML's compute processes, its utilisation).
    host_load: Contention | None = None
    gpu_use: tuple[GpuUse, ...] = ()

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def read_nvml(nvml: Any = None) -> NvmlReading:
    """Every GPU NVML lists, and the driver's versions; NVML failing is a fact, never a crash.

    Read through `tuneup.hardware.nvml`, the one door to pynvml.

    Args:
        nvml: a module with pynvml's API (tests pass a fake); `pynvml` when None.
    """
    driver = read_driver_facts(nvml)
    return NvmlReading(
        gpus=tuple(_gpu_fact(gpu) for gpu in driver.gpus),
        driver=driver.driver,
        cuda_driver=driver.cuda_driver,
        nvml_version=driver.nvml_version,
        error=driver.error,
    )


def _gpu_fact(gpu: DriverGpu) -> GpuFact:
    memory = gpu.memory_total_mb
    return GpuFact(
        gpu.name or "unknown GPU",
        None if memory is None else round(memory / 1024, 1),  # MiB to GiB
        gpu.mig,
    )


TORCH_READ_TIMEOUT_S = 120.0  # a torch import on a slow shared file system takes tens of s

_READ_IN_CHILD = (
    "import dataclasses, json; from tuneup.doctor.facts import read_torch_here; "
    "print(json.dumps(dataclasses.asdict(read_torch_here())))"
)


def read_torch(run: Callable[..., Any] = subprocess.run) -> TorchFacts:
    """torch's versions and switches, read in a child process.

    On the H200 reading them here left CUDA initialised in the doctor's process, so
    NVIDIA_TF32_OVERRIDE and the like no longer held for what it ran next; a child
    keeps this process free of whatever torch touches to answer.
    """
    try:
        done = run(
            [sys.executable, "-c", _READ_IN_CHILD],
            capture_output=True,
            text=True,
            timeout=TORCH_READ_TIMEOUT_S,
        )
    except subprocess.TimeoutExpired:
        return TorchFacts(error=f"reading torch took over {TORCH_READ_TIMEOUT_S:.0f} s")
    except OSError as exc:
        return TorchFacts(error=f"could not start {sys.executable} to read torch: {exc}")
    lines = done.stdout.strip().splitlines()
    if done.returncode != 0 or not lines:
        said = [line for line in done.stderr.strip().splitlines() if line.strip()]
        why = said[-1] if said else f"exit status {done.returncode}"
        return TorchFacts(error=f"reading torch failed: {why}")
    try:
        return TorchFacts(**loads(lines[-1], max_bytes=2**16))  # a few hundred bytes
    except (TypeError, ValueError) as exc:
        return TorchFacts(error=f"reading torch gave no facts: {exc}")


def read_torch_here() -> TorchFacts:
    """torch's versions and switches in this process (read_torch runs it in a child)."""
    try:
        import torch  # torch: only when the doctor reads it
    except Exception as exc:
        return TorchFacts(error=f"torch does not import: {exc}")
    facts: dict[str, Any] = {"version": torch.__version__, "cuda_build": torch.version.cuda}
    try:
        facts["cuda_available"] = torch.cuda.is_available()
        facts["device_count"] = torch.cuda.device_count() if facts["cuda_available"] else 0
    except Exception as exc:
        facts["error"] = f"torch.cuda failed: {exc}"
    with contextlib.suppress(Exception):
        version = torch.backends.cudnn.version() if torch.backends.cudnn.is_available() else None
        facts["cudnn"] = None if version is None else _cudnn_text(int(version))
    with contextlib.suppress(Exception):
        if facts["cuda_build"]:
            nccl = torch.cuda.nccl.version()
            facts["nccl"] = ".".join(map(str, nccl)) if isinstance(nccl, tuple) else str(nccl)
    with contextlib.suppress(Exception):
        facts["tf32_matmul"] = bool(torch.backends.cuda.matmul.allow_tf32)
        facts["tf32_cudnn"] = bool(torch.backends.cudnn.allow_tf32)
        facts["cudnn_enabled"] = bool(torch.backends.cudnn.enabled)
        facts["cudnn_benchmark"] = bool(torch.backends.cudnn.benchmark)
    return TorchFacts(**facts)


def read_host_load() -> Contention | None:
    """Other processes' share of the usable CPUs over the next HOST_LOAD_S (hostload.py)."""
    return HostLoadSampler().now(HOST_LOAD_S)


def read_gpu_use(nvml: Any = None) -> tuple[GpuUse, ...]:
    """Each GPU's utilisation and compute processes, as NVML says now; () where it cannot."""
    backend = NvmlBackend(nvml)
    try:
        if not backend.available()[0]:
            return ()
        return tuple(
            GpuUse(
                s.index,
                s.util_gpu_pct,
                tuple(p.name or str(p.pid) for p in s.processes),
            )
            for s in backend.sample()
        )
    except Exception:  # a reading NVML refuses is no fact: the load row says "not read"
        return ()
    finally:
        with contextlib.suppress(Exception):
            backend.close()


def read_meminfo(path: str = "/proc/meminfo") -> tuple[int | None, int | None]:
    """(total, available) host memory in bytes; None where /proc/meminfo is not there."""
    values: dict[str, int] = {}
    try:
        with open(path, encoding="ascii") as meminfo:
            for line in meminfo:
                key, _, rest = line.partition(":")
                parts = rest.split()
                if parts and parts[0].isdigit():
                    values[key] = int(parts[0]) * 1024
    except OSError:
        return None, None
    return values.get("MemTotal"), values.get("MemAvailable")


def read_slurm(environ: Mapping[str, str]) -> str | None:
    if "SLURM_JOB_ID" not in environ:
        return None
    job = read_job_env(dict(environ))
    return "; ".join([describe(job), *(ignored.line for ignored in job.ignored)])


def gather_facts(
    *,
    nvml: Any = None,
    torch_facts: Callable[[], TorchFacts] = read_torch,
    shm: Callable[[], int | None] = shm_free_bytes,
    meminfo: Callable[[], tuple[int | None, int | None]] = read_meminfo,
    toolchain: Callable[[], Toolchain] = find_toolchain,
    environ: Mapping[str, str] | None = None,
    cpus: Callable[[], int] = usable_cpus,
    cpu_count: Callable[[], int | None] = os.cpu_count,
    module_available: Callable[[str], bool] = has_module,
    apex_available: Callable[[], bool] = apex_fused_adam_available,
    host_load: Callable[[], Contention | None] = read_host_load,
    gpu_use: Callable[[Any], tuple[GpuUse, ...]] = read_gpu_use,
) -> Facts:
    """Read everything the checks judge; pass fakes for any source (tests do for all)."""
    env = os.environ if environ is None else environ
    reading = read_nvml(nvml)
    total, available = meminfo()
    return Facts(
        gpus=reading.gpus,
        nvml_error=reading.error,
        driver=reading.driver,
        cuda_driver=reading.cuda_driver,
        nvml_version=reading.nvml_version,
        torch=torch_facts(),
        cpus_usable=cpus(),
        cpus_total=cpu_count() or 1,
        shm_free=shm(),
        mem_total=total,
        mem_available=available,
        slurm=read_slurm(env),
        dali=module_available("nvidia.dali"),
        apex=apex_available(),
        toolchain=toolchain(),
        tf32_override=env.get("NVIDIA_TF32_OVERRIDE"),
        host_load=host_load(),
        gpu_use=gpu_use(nvml) if reading.gpus else (),
    )


def _cudnn_text(version: int) -> str:
    """cuDNN's integer version as text: 8902 is 8.9.2, 90100 is 9.1.0."""
    if version >= 10000:
        return f"{version // 10000}.{version % 10000 // 100}.{version % 100}"
    return f"{version // 1000}.{version % 1000 // 100}.{version % 100}"
