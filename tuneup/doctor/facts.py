"""What `tuneup doctor` reads about the node, as one frozen value; every source is injectable.

Reading has side effects (NVML, the driver, /proc, PATH); judging them is
pure (checks.py), so each check's OK, WARN and FAIL is tested with fakes.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Callable, Mapping
from dataclasses import asdict, dataclass, field
from typing import Any

from tuneup.cluster.shm import shm_free_bytes
from tuneup.cluster.toolchain import Toolchain, find_toolchain
from tuneup.hardware.machine import apex_fused_adam_available, has_module, usable_cpus


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

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def read_nvml(nvml: Any = None) -> NvmlReading:
    """Every GPU NVML lists, and the driver's versions; NVML failing is a fact, never a crash."""
    if nvml is None:
        try:
            import pynvml  # type: ignore[import-untyped,import-not-found]
        except Exception as exc:
            return NvmlReading(error=f"nvidia-ml-py does not import: {exc}")
        nvml = pynvml
    try:
        nvml.nvmlInit()
    except Exception as exc:
        return NvmlReading(error=f"NVML did not start ({type(exc).__name__}): no driver here?")
    try:
        driver = _call(nvml, "nvmlSystemGetDriverVersion")
        version = _call(nvml, "nvmlSystemGetNVMLVersion")
        cuda = _call(nvml, "nvmlSystemGetCudaDriverVersion")
        cuda_driver = f"{int(cuda) // 1000}.{int(cuda) % 1000 // 10}" if cuda else None
        gpus = []
        for index in range(nvml.nvmlDeviceGetCount()):
            handle = nvml.nvmlDeviceGetHandleByIndex(index)
            memory = _call(nvml, "nvmlDeviceGetMemoryInfo", handle)
            mig = _call(nvml, "nvmlDeviceGetMigMode", handle)
            gpus.append(
                GpuFact(
                    _text(nvml.nvmlDeviceGetName(handle)),
                    None if memory is None else round(memory.total / 2**30, 1),
                    None if mig is None else bool(mig[0]),
                )
            )
        return NvmlReading(
            tuple(gpus),
            None if driver is None else _text(driver),
            cuda_driver,
            None if version is None else _text(version),
        )
    except Exception as exc:
        return NvmlReading(error=f"NVML failed: {type(exc).__name__}: {exc}")
    finally:
        with contextlib.suppress(Exception):
            nvml.nvmlShutdown()


def read_torch() -> TorchFacts:
    """torch's versions and switches; CUDA is asked how many devices, no context is made."""
    try:
        import torch
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
    from tuneup.cluster.job import describe, read_job_env

    return describe(read_job_env(dict(environ)))


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
) -> Facts:
    env = os.environ if environ is None else environ
    """Read everything the checks judge; pass fakes for any source (tests do for all)."""
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
    )


def _call(nvml: Any, name: str, *args: Any) -> Any:
    """An optional NVML call: None where the binding or the GPU lacks it."""
    function = getattr(nvml, name, None)
    if function is None:
        return None
    try:
        return function(*args)
    except Exception:
        return None


def _text(value: Any) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)


def _cudnn_text(version: int) -> str:
    """cuDNN's integer version as text: 8902 is 8.9.2, 90100 is 9.1.0."""
    if version >= 10000:
        return f"{version // 10000}.{version % 10000 // 100}.{version % 100}"
    return f"{version // 1000}.{version % 1000 // 100}.{version % 100}"
