"""SLURM's job variables: one table of logical names, and parsers for SLURM's compact forms.

Every SLURM variable tuneup reads is named once, in `SLURM_VARIABLES`;
functions take the environment as a mapping, so tests pass a dict. Parsers
return None for a value in a form they do not know, never raise: a job
environment is read to help, and must not stop a run.
"""

from __future__ import annotations

import re
from collections.abc import Mapping

# Logical name -> the variables that carry it, preferred first. The allocation's
# value (SLURM_JOB_*) comes before the step's where both exist, since tuneup plans
# steps inside the allocation; old SLURM spells some without the JOB_.
SLURM_VARIABLES: dict[str, tuple[str, ...]] = {
    "job_id": ("SLURM_JOB_ID", "SLURM_JOBID"),
    "nodelist": ("SLURM_JOB_NODELIST", "SLURM_NODELIST"),
    "num_nodes": ("SLURM_JOB_NUM_NODES", "SLURM_NNODES"),
    "ntasks": ("SLURM_NTASKS", "SLURM_NPROCS"),
    # --ntasks-per-node as given ("4"), else SLURM's per-node counts ("4(x2),2").
    "tasks_per_node": ("SLURM_NTASKS_PER_NODE", "SLURM_TASKS_PER_NODE"),
    "gpus_on_node": ("SLURM_GPUS_ON_NODE",),
    # GPU indices on this node ("0,1,4-5"); the step's beat the job's.
    "gpus": ("SLURM_STEP_GPUS", "SLURM_JOB_GPUS"),
    "cpus_per_task": ("SLURM_CPUS_PER_TASK",),
    "cpus_on_node": ("SLURM_CPUS_ON_NODE",),
    "end_time": ("SLURM_JOB_END_TIME",),  # epoch seconds (SLURM 20.11 and later)
    "partition": ("SLURM_JOB_PARTITION",),
    "account": ("SLURM_JOB_ACCOUNT",),
}


def slurm_value(environ: Mapping[str, str], name: str) -> str | None:
    """The first non-empty variable that carries logical `name`."""
    for variable in SLURM_VARIABLES[name]:
        value = environ.get(variable, "").strip()
        if value:
            return value
    return None


def in_slurm(environ: Mapping[str, str]) -> bool:
    """Whether this process runs inside a SLURM job (a job id is set)."""
    return slurm_value(environ, "job_id") is not None


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


def index_list(text: str) -> tuple[int, ...] | None:
    """ "0,1,4-5" as (0, 1, 4, 5); None when it is not plain indices."""
    indices: list[int] = []
    for part in text.split(","):
        low, _, high = part.strip().partition("-")
        if not low.isdigit() or (high and not high.isdigit()):
            return None
        indices.extend(range(int(low), int(high or low) + 1))
    return tuple(indices)


def tasks_per_node(text: str) -> tuple[int, ...] | None:
    """SLURM's per-node task counts, "4(x2),2", as one count per node: (4, 4, 2).

    A plain "4" (what --ntasks-per-node sets) gives (4,): the same on every node.
    None for any other form.
    """
    counts: list[int] = []
    for part in text.split(","):
        match = re.fullmatch(r"\s*(\d+)(?:\(x(\d+)\))?\s*", part)
        if match is None:
            return None
        counts.extend([int(match.group(1))] * int(match.group(2) or 1))
    return tuple(counts)


def positive_int(text: str | None) -> int | None:
    """A count SLURM wrote ("32"); None when missing, not a number, or zero."""
    if text is None or not text.isdigit() or int(text) == 0:
        return None
    return int(text)


def count(text: str | None) -> int | None:
    """A count that may be zero ("0" GPUs on a CPU node); None when not a number."""
    return int(text) if text is not None and text.isdigit() else None


def seconds(text: str | None) -> float | None:
    """An epoch time in seconds; None when missing or not a number."""
    try:
        return None if text is None else float(text)
    except ValueError:
        return None
