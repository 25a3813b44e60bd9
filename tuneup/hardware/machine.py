"""What this machine offers the probes: CPUs, GPUs, apex and DALI, found without starting CUDA.

The parent process (app or CLI) must never initialise CUDA: TF32 and other
switches are set per probe before CUDA starts in the child. So GPUs are
counted through NVML (nvidia-ml-py), which talks to the driver only, and
optional libraries are found with importlib.util.find_spec, which imports
nothing but parent packages. Every probe of the machine is injectable for tests.
"""

from __future__ import annotations

import contextlib
import importlib.metadata
import importlib.util
import os
import re
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

from tuneup.hardware.devices import cuda_visible_devices
from tuneup.hardware.nvml import NvmlBackend
from tuneup.hardware.toolchain import Toolchain, compile_blocker, find_toolchain
from tuneup.hardware.types import GpuDevice, MachineInfo


def usable_cpus() -> int:
    """CPUs this process may run on: its affinity (SLURM's cpus-per-task), else all of them."""
    if hasattr(os, "sched_getaffinity"):
        return max(1, len(os.sched_getaffinity(0)))
    return max(1, os.cpu_count() or 1)


THREAD_VARIABLES = ("MKL_NUM_THREADS", "OMP_NUM_THREADS")
"""The variables torch sets its intra-op threads from, the one that wins first."""


def env_threads(environ: Mapping[str, str]) -> tuple[int | None, str]:
    """The intra-op threads a variable gives every torch process started with `environ`,
    and its name; (None, "") when none does (torch then counts cores itself). Read as
    torch reads it: the leading whole number of "4" or "4,2"; another value is ignored."""
    for name in THREAD_VARIABLES:
        first = environ.get(name, "").split(",")[0].strip()
        if first.isascii() and first.isdigit() and int(first) > 0:
            return int(first), name
    return None, ""


def has_module(name: str) -> bool:
    """Whether `name` is importable, without importing it (its parent packages may be)."""
    try:
        return importlib.util.find_spec(name) is not None
    except (ImportError, ValueError):
        return False  # a missing parent package, or a module with no spec


def _spec_folder(name: str, find_spec: Callable[[str], Any]) -> Path | None:
    try:
        spec = find_spec(name)
    except (ImportError, ValueError):
        return None
    if spec is None or not spec.submodule_search_locations:
        return None
    return Path(next(iter(spec.submodule_search_locations)))


def torch_has_cuda(find_spec: Callable[[str], Any] = importlib.util.find_spec) -> bool:
    """Whether the installed torch is a CUDA build: it ships libtorch_cuda next to its core."""
    folder = _spec_folder("torch", find_spec)
    if folder is None or not (folder / "lib").is_dir():
        return False
    return any(
        p.name.startswith(("libtorch_cuda", "torch_cuda")) for p in (folder / "lib").iterdir()
    )


_TORCH_CUDA = re.compile(r"^cuda\b[^=]*=\s*['\"]([^'\"]+)['\"]", re.MULTILINE)


def torch_build(
    find_spec: Callable[[str], Any] = importlib.util.find_spec,
    version: Callable[[str], str] = importlib.metadata.version,
) -> tuple[str | None, str | None]:
    """The installed torch's version and the CUDA it was built for, read from its package
    metadata and its `version.py` without importing it; None where not found (a CPU build
    has no CUDA)."""
    try:
        release: str | None = version("torch")
    except importlib.metadata.PackageNotFoundError:
        release = None
    folder = _spec_folder("torch", find_spec)
    try:
        text = (folder / "version.py").read_text(encoding="utf-8") if folder else ""
    except OSError:
        text = ""
    found = _TORCH_CUDA.search(text)
    return release, found.group(1) if found else None


def apex_fused_adam_available(find_spec: Callable[[str], Any] = importlib.util.find_spec) -> bool:
    """NVIDIA apex with its CUDA extensions (what FusedAdam needs), not the registry's `apex`.

    The unrelated `apex` package on the registry has no `optimizers` folder;
    apex built without --cuda_ext has no `amp_C` extension.
    """
    folder = _spec_folder("apex", find_spec)
    if folder is None or not (folder / "optimizers").is_dir():
        return False
    try:
        return find_spec("amp_C") is not None
    except (ImportError, ValueError):
        return False


def nvml_visible_gpus(
    nvml: Any = None, environ: Mapping[str, str] | None = None
) -> list[tuple[str, float | None]]:
    """(name, memory in GiB or None) of the GPUs this process may use; [] on any NVML failure.

    NVML is read through `NvmlBackend`, the one door to pynvml; `nvml_gpu_names`
    and the preset auto-pick both use this. CUDA_VISIBLE_DEVICES is applied
    (`tuneup.hardware.devices`); a MIG instance it names counts as a GPU of
    unknown memory.

    Args:
        nvml: the pynvml module (tests pass a fake); imported when None.
        environ: for CUDA_VISIBLE_DEVICES; os.environ when None.
    """
    backend = NvmlBackend(nvml, cuda_visible_devices=cuda_visible_devices(environ))
    try:
        devices = {device.index: device for device in backend.devices()}
        selection = backend.selection()
    except Exception:  # no driver, a broken one, no permission: zero GPUs, never a crash
        return []
    finally:
        with contextlib.suppress(Exception):
            backend.close()
    indices = sorted(devices) if selection.indices is None else selection.indices
    gpus = [_named(devices[i]) for i in indices if i in devices]
    return gpus + [(f"MIG {name}", None) for name in selection.mig]


def _named(device: GpuDevice) -> tuple[str, float | None]:
    memory = device.memory_total_mb
    return (device.name or "unknown GPU", None if memory is None else round(memory / 1024, 1))


def nvml_gpu_names(nvml: Any = None, environ: Mapping[str, str] | None = None) -> list[str]:
    """Names of the GPUs this process may use, through NVML; [] on any NVML failure."""
    return [name for name, _memory in nvml_visible_gpus(nvml, environ)]


MEMINFO = Path("/proc/meminfo")


def host_memory_gib(meminfo: Path = MEMINFO) -> float | None:
    """The node's memory in GiB (MemTotal of /proc/meminfo); None where it cannot be read."""
    try:
        text = meminfo.read_text(encoding="ascii", errors="replace")
    except OSError:
        return None
    found = re.search(r"^MemTotal:\s*(\d+)\s*kB", text, re.MULTILINE)
    return None if found is None else round(int(found.group(1)) / 2**20, 1)


def machine_info(
    *,
    world_size: int = 1,
    nodes: int = 1,
    cpus: Callable[[], int] = usable_cpus,
    gpu_names: Callable[[], list[str]] | None = None,
    gpus: Callable[[], list[tuple[str, float | None]]] = nvml_visible_gpus,
    host_memory: Callable[[], float | None] = host_memory_gib,
    torch_cuda: Callable[[], bool] = torch_has_cuda,
    module_available: Callable[[str], bool] = has_module,
    apex_available: Callable[[], bool] = apex_fused_adam_available,
    toolchain: Callable[[], Toolchain] = find_toolchain,
    environ: Mapping[str, str] | None = None,
) -> MachineInfo:
    """Describe this machine for planning stages; never initialises CUDA or imports torch.

    Args:
        world_size: ranks a probe will run with (the launcher decides; 1 locally).
        nodes: nodes those ranks span.
        cpus, gpus, host_memory, torch_cuda, module_available, apex_available, toolchain:
            the probes of the machine, replaced by fakes in tests (`gpus`: each visible
            GPU's name and memory in GiB; `gpu_names`, where given, names them instead,
            their memory unknown).
        environ: the environment the probes start with (os.environ when None).
    """
    found = [(name, None) for name in gpu_names()] if gpu_names is not None else gpus()
    names = tuple(name for name, _memory in found)
    sizes = [memory for _name, memory in found if memory is not None]
    # a rank may get any of them: the smallest is what a loader must fit in (unknown where
    # one of them is: a MIG instance)
    gpu_memory = min(sizes) if sizes and len(sizes) == len(found) else None
    tools = toolchain()
    threads, threads_from = env_threads(os.environ if environ is None else environ)
    return MachineInfo(
        cuda=bool(names) and torch_cuda(),
        gpu_count=len(names),
        gpu_names=names,
        cpus_usable=cpus(),
        apex=apex_available(),
        dali=module_available("nvidia.dali"),
        world_size=world_size,
        nodes=nodes,
        c_compiler=tools.c_compiler is not None,
        triton=tools.triton,
        libcuda=tools.libcuda is not None,
        env_threads=threads,
        env_threads_from=threads_from,
        gpu_memory_gib=gpu_memory,
        host_memory_gib=host_memory(),
    )


def compile_blocked(machine: MachineInfo, device_is_cuda: bool) -> str | None:
    """Why torch.compile cannot run on `machine`, with the fix; None when it can."""
    tools = Toolchain(
        "cc" if machine.c_compiler else None, machine.triton, "libcuda" if machine.libcuda else None
    )
    return compile_blocker(tools, device_is_cuda)
