"""The doctor's verdicts: Facts in, one OK / WARN / FAIL line per check with its fix. Pure."""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any

from tuneup.cluster.shm import shm_shortfall
from tuneup.cluster.toolchain import compile_blocker
from tuneup.doctor.facts import Facts

OK, WARN, FAIL = "OK", "WARN", "FAIL"
MIN_CPUS_PER_GPU = 4  # below this, host loaders cannot keep a GPU busy on this model
MIN_HOST_MEMORY = 16 * 10**9
# What tuneup's default run puts through /dev/shm: 2 workers x 2 batches of the
# tutorial's 64 crops of 4 + 5 channels of 64^3 float32.
DEFAULT_BATCH_BYTES = 64 * 9 * 64**3 * 4
DEFAULT_WORKERS = 2


@dataclass(frozen=True)
class Check:
    name: str
    level: str  # OK, WARN or FAIL
    detail: str
    fix: str = ""

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def failed(checks: list[Check]) -> bool:
    return any(c.level == FAIL for c in checks)


def run_checks(facts: Facts) -> list[Check]:
    """Every check, in the order a user reads them: the GPU stack first."""
    return [
        _gpus(facts),
        _driver(facts),
        _torch(facts),
        _cudnn(facts),
        _nccl(facts),
        _mig(facts),
        _cpus(facts),
        _shm(facts),
        _memory(facts),
        _slurm(facts),
        _dali(facts),
        _apex(facts),
        _toolchain(facts),
        _tf32(facts),
    ]


def _gpus(f: Facts) -> Check:
    if f.gpus:
        names = sorted({g.name for g in f.gpus})
        memory = f.gpus[0].memory_gib
        size = f" ({memory:g} GiB)" if memory is not None else ""
        return Check("GPUs", OK, f"{len(f.gpus)} x {', '.join(names)}{size}")
    why = f.nvml_error or "NVML lists none"
    if f.torch.cuda_build:
        fix = "run on a GPU node (e.g. salloc --gpus=1)"
        return Check("GPUs", FAIL, f"no NVIDIA GPU visible: {why}", fix)
    return Check("GPUs", WARN, f"no NVIDIA GPU visible: {why}", "tuneup tunes on the CPU here")


def _driver(f: Facts) -> Check:
    if f.driver is None:
        if f.torch.cuda_build:
            return Check("driver", WARN, "not read (no NVML)", "load the NVIDIA driver module")
        return Check("driver", OK, "n/a (no NVIDIA driver, CPU-only torch)")
    detail = f"{f.driver} (CUDA up to {f.cuda_driver or '?'})"
    build, driver = _version(f.torch.cuda_build), _version(f.cuda_driver)
    if build and driver and build[0] > driver[0]:
        return Check(
            "driver",
            FAIL,
            f"{detail}, but torch is built for CUDA {f.torch.cuda_build}",
            f"load a driver for CUDA {build[0]}, or install torch for CUDA {driver[0]}.x",
        )
    if build and driver and build > driver:
        return Check(
            "driver",
            WARN,
            f"{detail}, older than torch's CUDA {f.torch.cuda_build} (minor-version "
            "compatibility; PTX JIT may fail)",
            "load a newer driver if kernels fail to load",
        )
    return Check("driver", OK, detail)


def _torch(f: Facts) -> Check:
    t = f.torch
    if t.version is None:
        return Check("torch", FAIL, t.error or "not importable", "install torch (the site's build)")
    build = f"CUDA {t.cuda_build}" if t.cuda_build else "CPU build"
    detail = f"{t.version} ({build})"
    if f.gpus and not t.cuda_build:
        return Check(
            "torch",
            FAIL,
            f"{detail} on a node with GPUs: nothing will run on them",
            "install a CUDA build (the site's torch module, or pip install torch "
            "--index-url https://download.pytorch.org/whl/cu124)",
        )
    if f.gpus and not t.cuda_available:
        return Check(
            "torch",
            FAIL,
            f"{detail} sees no GPU{': ' + t.error if t.error else ''}",
            "check CUDA_VISIBLE_DEVICES and that the driver matches (see driver)",
        )
    seen = f", {t.device_count} GPU(s) visible" if t.cuda_available else ""
    return Check("torch", OK, detail + seen)


def _cudnn(f: Facts) -> Check:
    if not f.torch.cuda_build:
        return Check("cuDNN", OK, "n/a (no CUDA)")
    if f.torch.cudnn is None:
        return Check("cuDNN", FAIL, "not found by torch", "install torch with its cuDNN wheels")
    if f.torch.cudnn_enabled is False:
        return Check("cuDNN", WARN, f"{f.torch.cudnn}, disabled", "torch.backends.cudnn.enabled")
    return Check("cuDNN", OK, f.torch.cudnn)


def _nccl(f: Facts) -> Check:
    if not f.torch.cuda_build:
        return Check("NCCL", OK, "n/a (no CUDA)")
    if f.torch.nccl is None:
        level = WARN if len(f.gpus) > 1 else OK
        return Check("NCCL", level, "not in this torch build", "multi-GPU probes need NCCL")
    return Check("NCCL", OK, f.torch.nccl)


def _mig(f: Facts) -> Check:
    on = [g for g in f.gpus if g.mig]
    if not on:
        return Check("MIG", OK, "off" if f.gpus else "n/a")
    return Check(
        "MIG",
        WARN,
        f"on for {len(on)} GPU(s): each probe gets one slice, and timings hold only for it",
        "tune on the slice you will train on, or ask for whole GPUs (nvidia-smi -mig 0)",
    )


def _cpus(f: Facts) -> Check:
    gpus = max(1, len(f.gpus))
    per_gpu = f.cpus_usable // gpus
    detail = f"{f.cpus_usable} usable of {f.cpus_total}"
    if f.gpus:
        detail += f", {per_gpu} per GPU"
        if per_gpu < MIN_CPUS_PER_GPU:
            return Check(
                "CPUs",
                WARN,
                detail + ": host loaders will starve the GPUs",
                "ask for more (e.g. --cpus-per-task=8 per GPU), or use DALI / the gpu loader",
            )
    return Check("CPUs", OK, detail)


def _shm(f: Facts) -> Check:
    if f.shm_free is None:
        return Check(
            "/dev/shm", WARN, "not found", "loader workers need it: use num_data_workers=0 or DALI"
        )
    problem = shm_shortfall(f.shm_free, DEFAULT_BATCH_BYTES, DEFAULT_WORKERS, None)
    if problem is not None:
        return Check("/dev/shm", FAIL, problem.split(":")[0], problem.split(": ", 1)[1])
    return Check("/dev/shm", OK, f"{f.shm_free / 1e9:.1f} GB free")


def _memory(f: Facts) -> Check:
    if f.mem_total is None:
        return Check("host memory", WARN, "not read (/proc/meminfo)")
    detail = f"{f.mem_total / 1e9:.0f} GB, {(f.mem_available or 0) / 1e9:.0f} GB available"
    if f.mem_available is not None and f.mem_available < MIN_HOST_MEMORY:
        return Check(
            "host memory",
            WARN,
            detail + ": the inmem loader and loader workers may not fit",
            "use data_loader_config=lowmem or DALI",
        )
    return Check("host memory", OK, detail)


def _slurm(f: Facts) -> Check:
    return Check("SLURM", OK, f.slurm or "not in a SLURM job: this machine alone")


def _dali(f: Facts) -> Check:
    if f.dali:
        return Check("DALI", OK, "importable")
    if not f.gpus:
        return Check("DALI", OK, "not importable (n/a without a GPU)")
    return Check(
        "DALI",
        WARN,
        "not importable: the data stage cannot try it",
        "pip install nvidia-dali-cuda120 (or tuneup's [dali] extra)",
    )


def _apex(f: Facts) -> Check:
    return Check(
        "apex",
        OK,
        "importable" if f.apex else "not installed (optional: torch's fused Adam is tried)",
    )


def _toolchain(f: Facts) -> Check:
    tools = f.toolchain
    cuda = bool(f.torch.cuda_build and f.gpus)
    blocked = compile_blocker(tools, cuda)
    if blocked is not None:
        reason, _, fix = blocked.partition(" (")
        return Check("compile toolchain", WARN, f"jit=compile will be skipped: {reason}", fix[:-1])
    parts = [f"C compiler {tools.c_compiler}"]
    if cuda:
        parts += ["Triton", f"libcuda {tools.libcuda}"]
    return Check("compile toolchain", OK, ", ".join(parts))


def _tf32(f: Facts) -> Check:
    if f.tf32_override == "0":
        return Check(
            "TF32",
            WARN,
            "NVIDIA_TF32_OVERRIDE=0 in the environment: TF32 is off for every probe",
            "unset NVIDIA_TF32_OVERRIDE (the tf32 stage turns it off where it should)",
        )
    t = f.torch
    if t.tf32_matmul is None:
        return Check("TF32", OK, "n/a")
    return Check(
        "TF32",
        OK,
        f"torch's defaults: matmul {_on(t.tf32_matmul)}, cuDNN conv {_on(t.tf32_cudnn)} "
        "(tuneup sets both per run from its tf32 knob)",
    )


def _on(value: bool | None) -> str:
    return "?" if value is None else ("on" if value else "off")


def _version(text: str | None) -> tuple[int, ...] | None:
    if not text:
        return None
    try:
        return tuple(int(p) for p in text.split(".")[:2])
    except ValueError:
        return None
