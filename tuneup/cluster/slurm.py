"""SLURM's job variables: one table of logical names, and parsers for SLURM's compact forms.

Every SLURM variable tuneup reads is named once, in `SLURM_VARIABLES`, with what
it must hold in `EXPECTED`; functions take the environment as a mapping, so
tests pass a dict. Parsers return None for a value in a form they do not know
or out of range, never raise: a job environment is read to help, and must not
stop a run. Every value is bounded before it is used: counts by their digits
and range, host and index lists counted before they are expanded (a line such
as "n[0-99999999]" is a few bytes that stand for a hundred million names).
"""

from __future__ import annotations

import itertools
import math
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

# Far above any real job (the largest machines have about 10,000 nodes of at most a few
# hundred CPUs and 8-16 GPUs) and far below what would cost memory or time to hold.
MAX_NODES = 100_000
MAX_ON_NODE = 10_000  # CPUs, GPUs or tasks on one node
MAX_TASKS = 10_000_000
DAY_S = 86_400.0
# SLURM writes a job without a time limit as ending a year after its start; an end time
# a day past is a job SLURM would have ended (a few minutes past is its grace time).
END_AHEAD_S = 10 * 365 * DAY_S
END_PAST_S = DAY_S
_DIGITS = 12  # a count or an index of more digits is out of range before int() reads it

# What each logical value must be, in words: the line that ignores a value says it.
EXPECTED: dict[str, str] = {
    "nodelist": f"a host list of at most {MAX_NODES:,} hosts",
    "num_nodes": f"a count of nodes from 1 to {MAX_NODES:,}",
    "ntasks": f"a count of tasks from 1 to {MAX_TASKS:,}",
    "tasks_per_node": f"task counts per node such as 4 or 4(x2),2, for at most {MAX_NODES:,} nodes",
    "gpus_on_node": f"a count of GPUs from 0 to {MAX_ON_NODE:,}",
    "gpus": f"GPU indices such as 0,1,4-5, at most {MAX_ON_NODE:,} of them",
    "cpus_per_task": f"a count of CPUs from 1 to {MAX_ON_NODE:,}",
    "cpus_on_node": f"a count of CPUs from 1 to {MAX_ON_NODE:,}",
    "end_time": "an end time in epoch seconds, from a day ago to ten years ahead",
}


def slurm_variable(environ: Mapping[str, str], name: str) -> tuple[str, str] | None:
    """The first variable that carries logical `name` with a non-empty value, and its value."""
    for variable in SLURM_VARIABLES[name]:
        value = environ.get(variable, "").strip()
        if value:
            return variable, value
    return None


def slurm_value(environ: Mapping[str, str], name: str) -> str | None:
    """The first non-empty variable that carries logical `name`."""
    found = slurm_variable(environ, name)
    return None if found is None else found[1]


def in_slurm(environ: Mapping[str, str]) -> bool:
    """Whether this process runs inside a SLURM job (a job id is set)."""
    return slurm_value(environ, "job_id") is not None


def count_hosts(hostlist: str) -> int:
    """How many hosts SLURM's compressed host list names, counted without expanding it."""
    total = 0
    for item in _split_top_level(hostlist):
        pieces = _pieces(item)
        total += 1 if pieces is None else math.prod(_span(r) for _, r in pieces)
    return total


def expand_hostlist(hostlist: str, limit: int = MAX_NODES) -> tuple[str, ...] | None:
    """SLURM's compressed host list, e.g. "nid[001-003,010],login1", as host names; None
    when it names more than `limit` (counted first: never expanded)."""
    if count_hosts(hostlist) > limit:
        return None
    hosts: list[str] = []
    for item in _split_top_level(hostlist):
        pieces = _pieces(item)
        if pieces is None:
            hosts.append(item)  # not a form we know: keep it as SLURM wrote it
            continue
        choices = [[f"{prefix}{n}" for n in _numbers(ranges)] for prefix, ranges in pieces]
        hosts.extend("".join(parts) for parts in itertools.product(*choices))
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


_Ranges = tuple[tuple[int, int, int], ...]  # (low, high, digits) of each "low-high"
_BRACKETS = re.compile(r"([^\[\]]*)\[([^\[\]]*)\]")


def _pieces(item: str) -> list[tuple[str, _Ranges]] | None:
    """ "r[1-2]n[07-08]x" as [("r", 1-2), ("n", 07-08), ("x", one empty number)]; None
    for a form we do not know. Read in a loop, not by recursion: one item may hold
    thousands of brackets."""
    pieces: list[tuple[str, _Ranges]] = []
    position = 0
    for match in _BRACKETS.finditer(item):
        if match.start() != position:
            return None
        ranges = _ranges(match.group(2))
        if ranges is None:
            return None
        pieces.append((match.group(1), ranges))
        position = match.end()
    tail = item[position:]
    if "[" in tail or "]" in tail:
        return None
    return [*pieces, (tail, ((0, 0, -1),))] if tail or not pieces else pieces


def _ranges(text: str) -> _Ranges | None:
    ranges = []
    for part in text.split(","):
        low, _, high = part.partition("-")
        if not _is_digits(low) or (high and not _is_digits(high)):
            return None
        ranges.append((int(low), int(high or low), len(low)))
    return tuple(ranges)


def _is_digits(text: str) -> bool:
    return text.isdigit() and text.isascii() and len(text) <= _DIGITS


def _span(ranges: _Ranges) -> int:
    return sum(max(0, high - low + 1) for low, high, _ in ranges)


def _numbers(ranges: _Ranges) -> list[str]:
    """Each number of `ranges` as SLURM writes it (zero-padded to its low end's digits);
    the empty number of a literal piece is ""."""
    names: list[str] = []
    for low, high, width in ranges:
        if width < 0:
            names.append("")
            continue
        names.extend(f"{number:0{width}d}" for number in range(low, high + 1))
    return names


def index_list(text: str, limit: int = MAX_ON_NODE) -> tuple[int, ...] | None:
    """ "0,1,4-5" as (0, 1, 4, 5); None when it is not plain indices, or more than
    `limit` (counted before the ranges are expanded)."""
    ranges = _ranges(",".join(part.strip() for part in text.split(",")))
    if ranges is None or _span(ranges) > limit:
        return None
    return tuple(n for low, high, _ in ranges for n in range(low, high + 1))


def tasks_per_node(text: str, limit: int = MAX_NODES) -> tuple[int, ...] | None:
    """SLURM's per-node task counts, "4(x2),2", as one count per node: (4, 4, 2).

    A plain "4" (what --ntasks-per-node sets) gives (4,): the same on every node.
    None for any other form, a count over MAX_ON_NODE, or more than `limit` nodes.
    """
    counts: list[tuple[int, int]] = []
    for part in text.split(","):
        match = re.fullmatch(r"\s*(\d{1,12})(?:\(x(\d{1,12})\))?\s*", part, re.ASCII)
        if match is None:
            return None
        counts.append((int(match.group(1)), int(match.group(2) or 1)))
    if any(n > MAX_ON_NODE for n, _ in counts) or sum(k for _, k in counts) > limit:
        return None
    return tuple(n for n, times in counts for _ in range(times))


def positive_int(text: str | None, most: int = MAX_ON_NODE) -> int | None:
    """A count SLURM wrote ("32"); None when missing, not a number, zero, or over `most`."""
    number = count(text, most)
    return None if number == 0 else number


def count(text: str | None, most: int = MAX_ON_NODE) -> int | None:
    """A count that may be zero ("0" GPUs on a CPU node); None when not a number or over
    `most`."""
    if text is None or not _is_digits(text) or int(text) > most:
        return None
    return int(text)


def end_time(text: str | None, now: float) -> float | None:
    """An end time in epoch seconds; None when missing, not a finite number, or not from
    a day before `now` to ten years after it (no allocation ends there)."""
    try:
        value = None if text is None else float(text)
    except ValueError:
        return None
    if value is None or not math.isfinite(value):
        return None
    return value if now - END_PAST_S <= value <= now + END_AHEAD_S else None
