"""What the SLURM job (if any) allows, read from the environment.

Every SLURM variable is named once, in `SLURM_VARIABLES`; functions take the
environment as a mapping, so tests pass a dict.
"""

from __future__ import annotations

import os
import re
from collections.abc import Mapping
from dataclasses import dataclass

# Logical name -> the variables that carry it, preferred first (a job step's
# value beats the allocation's; old SLURM spells some without the JOB_).
SLURM_VARIABLES: dict[str, tuple[str, ...]] = {
    "job_id": ("SLURM_JOB_ID", "SLURM_JOBID"),
    "nodes": ("SLURM_JOB_NODELIST", "SLURM_NODELIST"),
    "gpus": ("SLURM_STEP_GPUS", "SLURM_JOB_GPUS"),
    "cpus_per_task": ("SLURM_CPUS_PER_TASK",),
    "end_time": ("SLURM_JOB_END_TIME",),  # epoch seconds (SLURM 20.11 and later)
}


@dataclass(frozen=True)
class JobInfo:
    """The SLURM job this process runs in.

    Attributes:
        job_id: SLURM's job id.
        nodes: host names of the allocation, expanded from SLURM's hostlist.
        gpus: GPU indices on this node the job may use; None when SLURM does
            not say (no GPUs requested, or an old SLURM).
        cpus_per_task: from --cpus-per-task; None when not requested.
        end_time: when the job's time limit runs out (epoch seconds), if known.
    """

    job_id: str
    nodes: tuple[str, ...] = ()
    gpus: tuple[int, ...] | None = None
    cpus_per_task: int | None = None
    end_time: float | None = None


def slurm_value(environ: Mapping[str, str], name: str) -> str | None:
    """The first non-empty variable that carries logical `name`."""
    for variable in SLURM_VARIABLES[name]:
        value = environ.get(variable, "").strip()
        if value:
            return value
    return None


def read_job(environ: Mapping[str, str] | None = None) -> JobInfo | None:
    """The job from the environment (os.environ when None); None outside SLURM.

    A value SLURM wrote in an unexpected form is left out (None) rather than
    failing the monitor.
    """
    env = os.environ if environ is None else environ
    job_id = slurm_value(env, "job_id")
    if job_id is None:
        return None
    nodes = slurm_value(env, "nodes")
    gpus = slurm_value(env, "gpus")
    return JobInfo(
        job_id=job_id,
        nodes=expand_hostlist(nodes) if nodes else (),
        gpus=_index_list(gpus) if gpus else None,
        cpus_per_task=_int(slurm_value(env, "cpus_per_task")),
        end_time=_float(slurm_value(env, "end_time")),
    )


def expand_hostlist(hostlist: str) -> tuple[str, ...]:
    """SLURM's compressed host list, e.g. "nid[001-003,010],login1", as host names."""
    hosts: list[str] = []
    for item in _split_top_level(hostlist):
        hosts.extend(_expand_one(item))
    return tuple(hosts)


def _split_top_level(text: str) -> list[str]:
    items, depth, start = [], 0, 0
    for position, char in enumerate(text):
        depth += {"[": 1, "]": -1}.get(char, 0)
        if char == "," and depth == 0:
            items.append(text[start:position])
            start = position + 1
    items.append(text[start:])
    return [item.strip() for item in items if item.strip()]


def _expand_one(item: str) -> list[str]:
    match = re.match(r"^([^\[]*)\[([^\]]*)\](.*)$", item)
    if match is None:
        return [item]
    prefix, ranges, rest = match.groups()
    tails = _expand_one(rest) if rest else [""]
    names: list[str] = []
    for part in ranges.split(","):
        low, _, high = part.partition("-")
        if not low.isdigit() or (high and not high.isdigit()):
            return [item]  # not a form we know: keep it as SLURM wrote it
        width = len(low)
        for number in range(int(low), int(high or low) + 1):
            names.extend(f"{prefix}{number:0{width}d}{tail}" for tail in tails)
    return names


def _index_list(text: str) -> tuple[int, ...] | None:
    """ "0,1,4-5" as (0, 1, 4, 5); None when it is not plain indices."""
    indices: list[int] = []
    for part in text.split(","):
        low, _, high = part.strip().partition("-")
        if not low.isdigit() or (high and not high.isdigit()):
            return None
        indices.extend(range(int(low), int(high or low) + 1))
    return tuple(indices)


def _int(text: str | None) -> int | None:
    return int(text) if text is not None and text.isdigit() else None


def _float(text: str | None) -> float | None:
    try:
        return None if text is None else float(text)
    except ValueError:
        return None


@dataclass(frozen=True)
class VisibleGpus:
    """The GPUs CUDA_VISIBLE_DEVICES allows, and a note when it could not be used."""

    indices: list[int] | None
    note: str = ""


def parse_visible_devices(value: str | None) -> VisibleGpus:
    """Read CUDA_VISIBLE_DEVICES as NVML indices.

    Unset means every GPU (None). CUDA stops reading the list at the first
    entry that is not a valid index, and so does this. UUIDs and MIG names
    cannot be mapped to indices without NVML, so they give None (watch every
    GPU) with a note saying so. The indices are CUDA's, which match NVML's
    on nodes of identical GPUs (CUDA orders equal GPUs by PCI bus, as NVML does).
    """
    if value is None:
        return VisibleGpus(None)
    entries = [entry.strip() for entry in value.split(",")]
    if any(e.startswith(("GPU-", "MIG-")) for e in entries):
        return VisibleGpus(
            None,
            "CUDA_VISIBLE_DEVICES names GPUs by UUID or MIG instance; watching every GPU",
        )
    indices: list[int] = []
    for entry in entries:
        if not entry.isdigit():
            break
        if int(entry) not in indices:
            indices.append(int(entry))
    if not indices:
        return VisibleGpus([], f"CUDA_VISIBLE_DEVICES={value!r} hides every GPU")
    if len(indices) < len(entries) and not all(e.isdigit() for e in entries):
        return VisibleGpus(indices, f"CUDA_VISIBLE_DEVICES={value!r}: only {indices} are used")
    return VisibleGpus(indices)


def visible_gpu_indices(environ: Mapping[str, str] | None = None) -> list[int] | None:
    """NVML indices of the GPUs this job may use (from CUDA_VISIBLE_DEVICES); None for all.

    See `parse_visible_devices` for the note when the list cannot be used.
    """
    env = os.environ if environ is None else environ
    return parse_visible_devices(env.get("CUDA_VISIBLE_DEVICES")).indices
