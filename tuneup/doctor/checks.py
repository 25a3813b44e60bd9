"""The doctor's verdicts: Facts in, one OK / WARN / FAIL line per check with its fix. Pure."""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any

from tuneup.cluster.shm import batches_in_flight, shm_shortfall
from tuneup.config import build_config
from tuneup.doctor.facts import Facts
from tuneup.doctor.honesty import HONEST, Honesty
from tuneup.hardware.toolchain import compile_blocker
from tuneup.probe.types import Contention
from tuneup.tuning.session.preflight import batch_bytes

OK, WARN, FAIL = "OK", "WARN", "FAIL"
MIN_CPUS_PER_GPU = 4  # below this, host loaders cannot keep a GPU busy on this model
MIN_HOST_MEMORY = 16 * 10**9
# What tuneup's default run puts through /dev/shm: its loader workers x 2 batches of the
# tutorial's 64 crops of 4 + 5 channels of 64^3 float32 (about 604 MB each).
DEFAULT_RUN = build_config({})
DEFAULT_BATCH_BYTES = batch_bytes(DEFAULT_RUN)
DEFAULT_WORKERS = DEFAULT_RUN.num_data_workers
# Pinned host-to-device copies below this are slower than PCIe 3.0 x16 delivers
# (15.75 GB/s raw, 12-13 GB/s measured): a narrowed link or the far NUMA node.
MIN_PINNED_H2D_GBS = 10.0


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
        _load(facts),
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
    nvml = f", NVML {f.nvml_version}" if f.nvml_version else ""
    detail = f"{f.driver} (CUDA up to {f.cuda_driver or '?'}{nvml})"
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
        return Check(
            "cuDNN",
            WARN,
            f"{f.torch.cudnn}, disabled: every conv falls back to slow native kernels",
            "set torch.backends.cudnn.enabled = True (something in the environment cleared it)",
        )
    benchmark = {True: "on", False: "off", None: "?"}[f.torch.cudnn_benchmark]
    return Check(
        "cuDNN",
        OK,
        f"{f.torch.cudnn} (benchmark {benchmark} by default; tuneup sets it per run "
        "from its cudnn_benchmark knob)",
    )


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
    # The GPUs this process may use: CUDA_VISIBLE_DEVICES hides some from torch, not NVML.
    visible = f.torch.device_count if f.torch.cuda_available else len(f.gpus)
    per_gpu = f.cpus_usable // max(1, visible)
    detail = f"{f.cpus_usable} usable (affinity) of {f.cpus_total}"
    if visible:
        detail += f", {per_gpu} per GPU"
        if per_gpu < MIN_CPUS_PER_GPU:
            return Check(
                "CPUs",
                WARN,
                detail + ": host loaders will starve the GPUs",
                "ask for more (e.g. --cpus-per-task=8 per GPU), or use DALI / the gpu loader",
            )
    return Check("CPUs", OK, detail)


LOAD_FIX = (
    "tune on a quiet node, or stop what else runs here: tuneup compares a steady load's "
    "pairs (its verdicts say 'measured under load') and stops a bursty one's stages"
)


def _load(f: Facts) -> Check:
    """What other processes take of the usable CPUs and of the GPUs, as the doctor looks:
    probes measured beside them are slower and noisier."""
    load = f.host_load
    if load is None or load.other_cpus is None:
        said, busy = "other processes' CPU time not read (no /proc)", False
    else:
        said = f"other processes used {load.other_cpus:.1f} of {f.cpus_usable} usable CPUs"
        said += f" ({load.busiest})" if load.busiest else ""
        busy = bool(load.note)
    for gpu in f.gpu_use:
        if gpu.processes:
            util = f", {gpu.util_pct:.0f}% busy" if gpu.util_pct is not None else ""
            said += (
                f"; GPU {gpu.index}: {len(gpu.processes)} other process(es) "
                f"({', '.join(gpu.processes[:3])}){util}"
            )
            busy = True
    if not busy:
        return Check("load", OK, said)
    return Check("load", WARN, f"{said}: probes run slower and noisier beside them", LOAD_FIX)


def _shm(f: Facts) -> Check:
    if f.shm_free is None:
        return Check(
            "/dev/shm", WARN, "not found", "loader workers need it: use num_data_workers=0 or DALI"
        )
    problem = shm_shortfall(f.shm_free, DEFAULT_BATCH_BYTES, DEFAULT_WORKERS, None)
    if problem is not None:
        what, _, fix = problem.partition(": ")
        return Check("/dev/shm", FAIL, what, fix)
    needed = batches_in_flight(DEFAULT_WORKERS, None) * DEFAULT_BATCH_BYTES
    return Check(
        "/dev/shm",
        OK,
        f"{f.shm_free / 1e9:.1f} GB free (the default loader's {DEFAULT_WORKERS} workers "
        f"need {needed / 1e9:.1f} GB)",
    )


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


def honesty_checks(
    h: Honesty | None, error: str | None, load: Contention | None = None
) -> list[Check]:
    """The timed check's rows: trainer vs bare loop, compute achieved, host-to-device copies;
    `load` is what other processes took while it was timed (named as the likely cause of a
    ratio off 1)."""
    if error is not None:
        return [Check("honesty", FAIL, f"the timed check failed: {error}", "--quick skips it")]
    if h is None:
        return []
    return [_honesty(h, load), _compute(h), _h2d(h)]


def _honesty(h: Honesty, load: Contention | None = None) -> Check:
    spread = f"pairs {min(h.ratios):.3f}-{max(h.ratios):.3f}"
    detail = (
        f"trainer SYNTHETIC {h.trainer_sps:.1f} vs bare loop {h.bare_sps:.1f} samples/s "
        f"on {h.device}, {h.case}: ratio {h.ratio:.3f} ({spread})"
    )
    if h.honest:
        return Check("honesty", OK, detail)
    slower = h.ratio < HONEST[0]
    detail += (
        ": tuneup's step is slower than a bare loop, so its rates understate this node"
        if slower
        else ": tuneup's step beats the bare loop, so its rates may flatter this node"
    )
    if load is not None and load.note:
        busiest = f" ({load.busiest})" if load.busiest else ""
        detail += f"; likely cause: {load.note} while it was timed{busiest}"
        return Check(
            "honesty", WARN, detail, "rerun when nothing else runs here (see the load row)"
        )
    return Check(
        "honesty",
        WARN,
        detail,
        "rerun on an idle node; if it stays outside "
        f"{HONEST[0]:.2f}-{HONEST[1]:.2f}, report it with `tuneup doctor --json`",
    )


def _compute(h: Honesty) -> Check:
    rate = f"{h.tflops:.3g} TFLOP/s" if h.tflops is not None else "not computed"
    if h.peak_tflops is None or h.mfu is None:
        why = "no CUDA" if h.device == "cpu" else f"no {h.precision} peak on file for {h.device}"
        return Check("compute", OK, f"{rate} (MFU n/a: {why})")
    return Check(
        "compute",
        OK,
        f"{rate}, MFU {100 * h.mfu:.1f}% of the {h.precision} dense peak "
        f"({h.peak_tflops:g} TFLOP/s, datasheet)",
    )


def _h2d(h: Honesty) -> Check:
    if h.h2d_pinned_gbs is None or h.h2d_pageable_gbs is None:
        return Check("host to device", OK, "n/a: no CUDA")
    detail = f"{h.h2d_pinned_gbs:.1f} GB/s pinned, {h.h2d_pageable_gbs:.1f} GB/s pageable"
    if h.h2d_pinned_gbs < MIN_PINNED_H2D_GBS:
        return Check(
            "host to device",
            WARN,
            f"{detail}: below PCIe 3.0 x16",
            "check PCIe generation and width in `nvidia-smi -q`, and bind to the GPU's "
            "NUMA node (`nvidia-smi topo -m`)",
        )
    return Check("host to device", OK, detail)
