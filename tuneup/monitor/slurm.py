"""What the SLURM job (if any) allows, as the monitor shows it, and the visible GPUs.

SLURM's variables are read through the one table in `tuneup.cluster.slurm`
(re-exported here for existing importers); functions take the environment as
a mapping, so tests pass a dict.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass

from tuneup.cluster.slurm import (
    SLURM_VARIABLES,
    expand_hostlist,
    index_list,
    positive_int,
    seconds,
    slurm_value,
)

__all__ = [
    "JOB_INFO_SOURCES",
    "SLURM_VARIABLES",
    "JobInfo",
    "VisibleGpus",
    "expand_hostlist",
    "parse_visible_devices",
    "read_job",
    "slurm_value",
    "visible_gpu_indices",
]


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


# JobInfo field -> the logical name in SLURM_VARIABLES it is read from.
JOB_INFO_SOURCES = {
    "job_id": "job_id",
    "nodes": "nodelist",
    "gpus": "gpus",
    "cpus_per_task": "cpus_per_task",
    "end_time": "end_time",
}


def read_job(environ: Mapping[str, str] | None = None) -> JobInfo | None:
    """The job from the environment (os.environ when None); None outside SLURM.

    A value SLURM wrote in an unexpected form is left out (None) rather than
    failing the monitor.
    """
    env = os.environ if environ is None else environ
    job_id = slurm_value(env, "job_id")
    if job_id is None:
        return None
    nodes = slurm_value(env, "nodelist")
    gpus = slurm_value(env, "gpus")
    return JobInfo(
        job_id=job_id,
        nodes=expand_hostlist(nodes) if nodes else (),
        gpus=index_list(gpus) if gpus else None,
        cpus_per_task=positive_int(slurm_value(env, "cpus_per_task")),
        end_time=seconds(slurm_value(env, "end_time")),
    )


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
