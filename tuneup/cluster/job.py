"""The job a session runs in: a SLURM allocation, or just this machine.

`read_job_env` is the only place that reads the environment, the CPU affinity
and the host name, and each is injectable; everything else takes a `JobEnv`
and is pure.
"""

from __future__ import annotations

import dataclasses
import os
import socket
import time
from collections.abc import Callable, Collection, Mapping
from dataclasses import dataclass
from typing import Any, TypeVar

from tuneup.cluster.slurm import (
    EXPECTED,
    MAX_NODES,
    MAX_TASKS,
    count,
    end_time,
    expand_hostlist,
    in_slurm,
    index_list,
    positive_int,
    slurm_value,
    slurm_variable,
    tasks_per_node,
)

SLURM = "slurm"
LOCAL = "local"
T = TypeVar("T")
_SHOWN = 40  # characters of an ignored value a line shows


@dataclass(frozen=True)
class Ignored:
    """A SLURM variable set to what tuneup cannot use: left out of the job, and said.

    Attributes:
        name: the logical name (`SLURM_VARIABLES`), e.g. "end_time".
        variable: the variable that held it, e.g. "SLURM_JOB_END_TIME".
        value: what it held.
    """

    name: str
    variable: str
    value: str

    @property
    def line(self) -> str:
        """ "SLURM_JOB_END_TIME='nan' is not an end time in epoch seconds, ...: ignored"."""
        shown = self.value if len(self.value) <= _SHOWN else self.value[: _SHOWN - 3] + "..."
        return f"{self.variable}={shown!r} is not {EXPECTED[self.name]}: ignored"


@dataclass(frozen=True)
class JobEnv:
    """Where probes may run: the nodes, their GPUs and CPUs, and how long is left.

    Attributes:
        source: "slurm" inside a SLURM job, else "local" (this machine only).
        hostname: this host's name.
        cpus_usable: CPUs this process may run on (its affinity): what local
            ranks and their loader workers share.
        job_id: SLURM's job id; None locally.
        nodes: host names of the allocation, first node first (this host locally).
        num_nodes: nodes in the allocation (1 locally).
        ntasks: tasks the job asked for, if SLURM says.
        tasks_per_node: tasks on each node, one entry per node where known
            (SLURM's "4(x2),2" is (4, 4, 2)).
        gpus_on_node: GPUs the job may use on this node; None when unknown.
        gpus: their indices, as SLURM lists them; None when it does not.
        cpus_per_task: --cpus-per-task, if given.
        cpus_on_node: CPUs the job holds on this node, if SLURM says.
        end_time: when the job's time limit runs out (epoch seconds), if known.
        partition: SLURM partition, if known.
        account: SLURM account, if known.
        ignored: the variables set to what tuneup cannot use (left None above).
    """

    source: str
    hostname: str
    cpus_usable: int
    job_id: str | None = None
    nodes: tuple[str, ...] = ()
    num_nodes: int = 1
    ntasks: int | None = None
    tasks_per_node: tuple[int, ...] | None = None
    gpus_on_node: int | None = None
    gpus: tuple[int, ...] | None = None
    cpus_per_task: int | None = None
    cpus_on_node: int | None = None
    end_time: float | None = None
    partition: str | None = None
    account: str | None = None
    ignored: tuple[Ignored, ...] = ()

    @property
    def in_slurm(self) -> bool:
        return self.source == SLURM

    def seconds_left(self, now: float | None = None) -> float | None:
        """Seconds until the time limit; None when there is none known."""
        if self.end_time is None:
            return None
        return self.end_time - (time.time() if now is None else now)

    def ignored_value(self, name: str) -> Ignored | None:
        """Why logical value `name` is None, where its variable was set but unusable."""
        return next((i for i in self.ignored if i.name == name), None)

    def to_dict(self) -> dict[str, Any]:
        data = dataclasses.asdict(self)
        for name in ("nodes", "tasks_per_node", "gpus", "ignored"):
            if data[name] is not None:
                data[name] = list(data[name])
        return data


def read_job_env(
    environ: Mapping[str, str] | None = None,
    affinity: Collection[int] | None = None,
    gpu_count: int | None = None,
    hostname: str | None = None,
    now: float | None = None,
) -> JobEnv:
    """The job this process runs in; outside SLURM, this machine as a one-node job.

    Args:
        environ: the environment (os.environ when None).
        affinity: the CPUs this process may use (os.sched_getaffinity when None).
        gpu_count: GPUs found on this machine (by NVML, say); used when SLURM
            does not say how many GPUs the job has on this node, and locally.
        hostname: this host's name (socket.gethostname when None).
        now: the time the end time is checked against (time.time when None).

    A value in an unexpected form or out of range is left None, never an error, and
    listed in `ignored` for the caller to say.
    """
    env = os.environ if environ is None else environ
    host = socket.gethostname() if hostname is None else hostname
    cpus = len(affinity) if affinity is not None else _affinity_size()
    cpus = max(1, cpus)
    if not in_slurm(env):
        return JobEnv(
            source=LOCAL, hostname=host, cpus_usable=cpus, nodes=(host,), gpus_on_node=gpu_count
        )
    read = _Reader(env)
    nodes = read("nodelist", expand_hostlist) or ()
    num_nodes = read("num_nodes", lambda t: positive_int(t, MAX_NODES)) or len(nodes) or 1
    gpus = read("gpus", index_list)
    return JobEnv(
        source=SLURM,
        hostname=host,
        cpus_usable=cpus,
        job_id=slurm_value(env, "job_id"),
        nodes=nodes,
        num_nodes=num_nodes,
        ntasks=read("ntasks", lambda t: positive_int(t, MAX_TASKS)),
        tasks_per_node=_per_node(read("tasks_per_node", tasks_per_node), num_nodes),
        gpus_on_node=_gpus_on_node(read("gpus_on_node", count), gpus, gpu_count),
        gpus=gpus,
        cpus_per_task=read("cpus_per_task", positive_int),
        cpus_on_node=read("cpus_on_node", positive_int),
        end_time=read("end_time", lambda t: end_time(t, time.time() if now is None else now)),
        partition=slurm_value(env, "partition"),
        account=slurm_value(env, "account"),
        ignored=tuple(read.ignored),
    )


class _Reader:
    """Reads logical values through their parsers, keeping each set one it cannot use."""

    def __init__(self, env: Mapping[str, str]) -> None:
        self.env = env
        self.ignored: list[Ignored] = []

    def __call__(self, name: str, parse: Callable[[str], T | None]) -> T | None:
        found = slurm_variable(self.env, name)
        if found is None:
            return None
        value = parse(found[1])
        if value is None:
            self.ignored.append(Ignored(name, *found))
        return value


def _affinity_size() -> int:
    if hasattr(os, "sched_getaffinity"):
        return len(os.sched_getaffinity(0))
    return os.cpu_count() or 1


def _per_node(counts: tuple[int, ...] | None, num_nodes: int) -> tuple[int, ...] | None:
    if counts is not None and len(counts) == 1 and num_nodes > 1:
        return counts * num_nodes  # --ntasks-per-node: the same on every node
    return counts


def _gpus_on_node(
    stated: int | None, listed: tuple[int, ...] | None, gpu_count: int | None
) -> int | None:
    """SLURM's count, else its index list's length, else what the caller found."""
    if stated is not None:
        return stated
    return len(listed) if listed is not None else gpu_count


def default_layout(job: JobEnv) -> tuple[int, int]:
    """(ranks per node, nodes) the allocation gives: one rank per GPU, or 1 on a CPU node."""
    return (job.gpus_on_node or 1), max(1, job.num_nodes)


def cpus_per_gpu(job: JobEnv, ranks_per_node: int) -> int:
    """CPUs each local rank gets when they share this process's usable CPUs (at least 1).

    Loader workers are capped by it: more workers than CPUs only adds switching.
    """
    return max(1, job.cpus_usable // max(1, ranks_per_node))


def describe(job: JobEnv, now: float | None = None) -> str:
    """One line for `tuneup probe`'s output: where the probes will run."""
    parts: list[str] = []
    if not job.in_slurm:
        parts.append(f"{job.cpus_usable} CPU{_s(job.cpus_usable)} usable")
        if job.gpus_on_node is not None:
            parts.append(_gpus(job.gpus_on_node, ""))
        return "local machine: " + ", ".join(parts)
    nodes = f"{job.num_nodes} node{_s(job.num_nodes)}"
    if job.nodes:
        nodes += f" ({_host_summary(job.nodes)})"
    parts.append(nodes)
    if job.gpus_on_node is not None:
        parts.append(_gpus(job.gpus_on_node, "/node"))
    if job.cpus_per_task is not None:
        parts.append(f"{job.cpus_per_task} CPUs/task")
    parts.append(f"{job.cpus_usable} CPU{_s(job.cpus_usable)} usable here")
    left = job.seconds_left(now)
    if left is not None:
        parts.append(f"{_duration(left)} left" if left > 0 else "time limit reached")
    return f"SLURM job {job.job_id}: " + ", ".join(parts)


def _s(number: int) -> str:
    return "" if number == 1 else "s"


def _gpus(number: int, per: str) -> str:
    return "no GPU" if number == 0 else f"{number} GPU{_s(number)}{per}"


def _host_summary(hosts: tuple[str, ...], show: int = 4) -> str:
    if len(hosts) <= show:
        return ", ".join(hosts)
    return f"{hosts[0]}, {hosts[1]}, ..., {hosts[-1]}"


def _duration(total_s: float) -> str:
    """1h02m, 45m, 2d03h: the precision a time limit needs."""
    minutes = int(total_s // 60)
    hours, minutes = divmod(minutes, 60)
    days, hours = divmod(hours, 24)
    if days:
        return f"{days}d{hours:02d}h"
    if hours:
        return f"{hours}h{minutes:02d}m"
    return f"{minutes}m"
