"""Choosing a preset when none is given: by the GPU model and count this process sees.

`auto_pick` is pure (a GPU inventory in, a preset name and the reason out) so
every machine is testable on a laptop; `gpu_inventory` reads the inventory
through NVML, which talks to the driver only and never starts CUDA.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from tuneup.hardware.machine import nvml_visible_gpus


@dataclass(frozen=True)
class GpuModel:
    """One visible GPU: its NVML name and total memory in GiB (None when unknown)."""

    name: str
    memory_gib: float | None = None


@dataclass(frozen=True)
class Pick:
    """The chosen preset and why, in words for the user."""

    name: str
    reason: str


@dataclass(frozen=True)
class _Rule:
    family: str  # matched in the upper-cased NVML name
    preset: str
    why: str
    min_count: int = 1
    min_gib: float | None = None  # unknown memory does not rule a GPU out


# First match wins: the most specific rule of a family comes first.
_RULES = (
    _Rule("H200", "h200", "an H200 (141 GB) like the machine tuneup's GPU tests run on"),
    _Rule("H100", "jean-zay-h100", "an H100 80 GB node like Jean Zay's"),
    _Rule("A100", "jean-zay-a100", "an 8 x A100 80 GB node like Jean Zay's", 8, 60.0),
    _Rule("A100", "perlmutter-a100-4gpu", "a Perlmutter-like node (4 ranks, one per GPU)", 4),
    _Rule("A100", "perlmutter-a100", "one A100, as on a Perlmutter node"),
    _Rule("V100", "summit-v100", "a Summit-like node (6 x V100, local batch 32)", 6),
    _Rule("V100", "jean-zay-v100", "a V100 node like Jean Zay's (local batch 32 fits 16 GB)"),
)


def describe(gpus: Sequence[GpuModel]) -> str:
    """ "4 x NVIDIA A100-SXM4-40GB (40 GiB)", one group per model."""
    groups = Counter(gpus)
    parts = []
    for gpu, count in groups.items():
        memory = f" ({gpu.memory_gib:.0f} GiB)" if gpu.memory_gib is not None else ""
        parts.append(f"{count} x {gpu.name}{memory}")
    return " + ".join(parts)


def _family(name: str) -> str | None:
    upper = name.upper()
    return next((r.family for r in _RULES if r.family in upper), None)


def auto_pick(gpus: Sequence[GpuModel], cpus: int, *, cuda: bool = True) -> Pick:
    """The preset for this inventory: by GPU 0's model, how many of it, and their memory.

    Args:
        gpus: the GPUs this process may use.
        cpus: the CPUs it may use (named in the reason).
        cuda: whether torch can use CUDA; without it every machine gets cpu-smoke.
    """
    cores = f"{cpus} CPU{'s' if cpus != 1 else ''}"
    if not gpus:
        return Pick("cpu-smoke", f"no NVIDIA GPU visible ({cores}): the CPU smoke ladder")
    seen = describe(gpus)
    if not cuda:
        return Pick(
            "cpu-smoke", f"{seen} visible, but this torch has no CUDA: the CPU smoke ladder"
        )
    family = _family(gpus[0].name)
    same = [g for g in gpus if _family(g.name) == family]
    mixed = " (mixed GPUs: going by GPU 0's model)" if len(same) < len(gpus) else ""
    smallest = min((g.memory_gib for g in same if g.memory_gib is not None), default=None)
    for rule in _RULES:
        if rule.family != family or len(same) < rule.min_count:
            continue
        if rule.min_gib is not None and smallest is not None and smallest < rule.min_gib:
            continue
        return Pick(rule.preset, f"{seen}, {cores}: {rule.why}{mixed}")
    return Pick(
        "generic-cuda", f"{seen}, {cores}: no preset for this model, so the generic one-GPU ladder"
    )


def gpu_inventory(nvml: Any = None, environ: Mapping[str, str] | None = None) -> list[GpuModel]:
    """The GPUs this process may use, with their memory, through NVML; [] on any NVML failure.

    CUDA_VISIBLE_DEVICES is applied as for `tuneup.hardware.machine.nvml_gpu_names`.

    Args:
        nvml: the pynvml module (tests pass a fake); imported when None.
        environ: for CUDA_VISIBLE_DEVICES; os.environ when None.
    """
    return [GpuModel(name, memory) for name, memory in nvml_visible_gpus(nvml, environ)]
