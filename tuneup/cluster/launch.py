"""How a probe's ranks are started: one local process, torchrun on this node, or srun.

Launchers build argument lists (never shell strings) and environments; the
runner starts them. `LaunchPlan` picks the launcher for a probe's rank count
from the session's layout (--nproc ranks per node x --nodes). The end of the
module reads what torchrun and srun print when a rank fails, so a probe's
reason can name the rank.
"""

from __future__ import annotations

import re
import shutil
import signal
import socket
import sys
import zlib
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol

from tuneup.bundled import cache_dir
from tuneup.cluster.job import JobEnv
from tuneup.errors import UsageError

WORKER_MODULE = "tuneup.worker"

# Rank variables a parent may carry (tuneup itself started by torchrun or srun);
# a child must get its own, or none, or the worker would join the parent's job.
_INHERITED_RANK_VARIABLES = (
    "RANK",
    "LOCAL_RANK",
    "WORLD_SIZE",
    "LOCAL_WORLD_SIZE",
    "GROUP_RANK",
    "MASTER_ADDR",
    "MASTER_PORT",
    "SLURM_STEP_NUM_TASKS",
)


class Launcher(Protocol):
    """How a probe's child process is started: the command line and its environment."""

    def command(self, spec_path: Path) -> list[str]:
        """The argument list (never a shell string) that runs the worker on `spec_path`."""
        ...

    def env(self, base: dict[str, str]) -> dict[str, str]:
        """The child's environment, derived from a copy of the parent's."""
        ...


def compile_cache_env(base: dict[str, str]) -> dict[str, str]:
    """Where torch.compile keeps what it compiled: in tuneup's cache folder, across processes
    and sessions (a node's /tmp, inductor's default, is often wiped with the job), unless
    the user chose a place. The first compile of a graph stays the cold one a run pays."""
    root = cache_dir(base) / "compile"
    wanted = {
        "TORCHINDUCTOR_CACHE_DIR": str(root / "inductor"),
        "TRITON_CACHE_DIR": str(root / "triton"),
        "TORCHINDUCTOR_FX_GRAPH_CACHE": "1",
        "TORCHINDUCTOR_AUTOGRAD_CACHE": "1",
    }
    return {name: value for name, value in wanted.items() if not base.get(name)}


def _child_env(base: dict[str, str], **extra: str) -> dict[str, str]:
    env = {k: v for k, v in base.items() if k not in _INHERITED_RANK_VARIABLES}
    # A block-buffered stdout would deliver the events only when the worker exits.
    return {**env, **compile_cache_env(base), "PYTHONUNBUFFERED": "1", **extra}


@dataclass(frozen=True)
class LocalLauncher:
    """Run the worker as one local Python process."""

    python: str = sys.executable
    module: str = WORKER_MODULE

    def command(self, spec_path: Path) -> list[str]:
        return [self.python, "-m", self.module, str(spec_path)]

    def serve_command(self) -> list[str]:
        """A worker that runs the probes whose spec paths arrive on its stdin."""
        return [self.python, "-m", self.module, "--serve"]

    def env(self, base: dict[str, str]) -> dict[str, str]:
        return _child_env(base)


@dataclass(frozen=True)
class OneGpuLauncher:
    """Another launcher's single rank, shown only the first GPU this process sees.

    A one-rank reference probe in a multi-GPU session must measure one GPU;
    without narrowing, CUDA_VISIBLE_DEVICES would still show them all. The
    first entry is kept as written (an index, a UUID or a MIG name).
    """

    inner: Launcher

    def command(self, spec_path: Path) -> list[str]:
        return self.inner.command(spec_path)

    def env(self, base: dict[str, str]) -> dict[str, str]:
        env = self.inner.env(base)
        visible = base.get("CUDA_VISIBLE_DEVICES")
        env["CUDA_VISIBLE_DEVICES"] = "0" if visible is None else visible.split(",")[0].strip()
        return env


@dataclass(frozen=True)
class TorchrunLauncher:
    """`nproc` ranks on this node under torchrun.

    `--standalone` makes torchrun start its own rendezvous (a c10d TCP store)
    at localhost:0: in torch 2.x, torch/distributed/run.py sets
    rdzv_endpoint "localhost:0" and the store binds port 0, so the kernel
    picks a free port and concurrent sessions on one node never collide.
    """

    nproc: int
    python: str = sys.executable
    module: str = WORKER_MODULE

    def command(self, spec_path: Path) -> list[str]:
        return [
            self.python,
            "-m",
            "torch.distributed.run",
            "--standalone",
            "--nproc-per-node",
            str(self.nproc),
            "-m",
            self.module,
            str(spec_path),
        ]

    def env(self, base: dict[str, str]) -> dict[str, str]:
        return _child_env(base)


@dataclass(frozen=True)
class SrunLauncher:
    """Ranks on several nodes of the allocation, one srun task per rank.

    The worker reads its rank from SLURM_PROCID and joins the process group
    at MASTER_ADDR:MASTER_PORT (the first node, where rank 0 runs). With
    `nodelist`, srun uses exactly those hosts, so rank 0 lands on the first.
    `--ntasks` is given explicitly: srun would otherwise take the
    allocation's SLURM_NTASKS from the environment.
    """

    nodes: int
    tasks_per_node: int
    cpus_per_task: int
    master_addr: str
    master_port: int
    gpus_per_task: int | None = None
    nodelist: tuple[str, ...] = ()
    python: str = sys.executable
    module: str = WORKER_MODULE
    srun: str = "srun"

    def command(self, spec_path: Path) -> list[str]:
        argv = [
            self.srun,
            "--nodes",
            str(self.nodes),
            "--ntasks",
            str(self.nodes * self.tasks_per_node),
            "--ntasks-per-node",
            str(self.tasks_per_node),
            "--cpus-per-task",
            str(self.cpus_per_task),
            "--kill-on-bad-exit=1",
        ]
        if self.gpus_per_task:
            argv += ["--gpus-per-task", str(self.gpus_per_task)]
        if self.nodelist:
            argv += ["--nodelist", ",".join(self.nodelist)]
        return [*argv, self.python, "-m", self.module, str(spec_path)]

    def env(self, base: dict[str, str]) -> dict[str, str]:
        return _child_env(base, MASTER_ADDR=self.master_addr, MASTER_PORT=str(self.master_port))


# ---- ports ------------------------------------------------------------------

# Ports picked from a job id lie below Linux's default ephemeral range (32768-60999),
# where the kernel hands out ports to outgoing connections, and below torchrun's
# default 29500, which other jobs sharing a node tend to use.
JOB_PORT_LOW = 20000
JOB_PORT_SPAN = 9000


def free_port(host: str = "") -> int:
    """A TCP port free on this host now (the kernel's pick for port 0).

    It is released before the worker binds it; another process could take
    it in between, which is unlikely in the second that separates them.
    """
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind((host, 0))
        return int(sock.getsockname()[1])


def job_port(job_id: str) -> int:
    """A port derived from the job id, for when rank 0's node is another host.

    This process cannot bind a port on another node to see that it is free,
    so it picks one every step of the job agrees on, in a range the kernel
    does not hand out to client sockets (see JOB_PORT_LOW).
    """
    return JOB_PORT_LOW + zlib.crc32(job_id.encode()) % JOB_PORT_SPAN


def _same_host(a: str, b: str) -> bool:
    """SLURM names nodes by short name; gethostname() may add the domain."""
    return a.split(".")[0] == b.split(".")[0]


# ---- the session's layout -----------------------------------------------------


@dataclass(frozen=True)
class LaunchPlan:
    """The session's layout: `nproc` ranks on each of `nodes` nodes."""

    nproc: int = 1
    nodes: int = 1

    @property
    def world_size(self) -> int:
        return self.nproc * self.nodes

    def launcher_for(self, ranks: int | None, job: JobEnv) -> Launcher:
        """The launcher for a probe with `ranks` ranks (None: the plan's world size).

        One rank runs locally (on one GPU when the session has several);
        up to `nproc` ranks run under torchrun on this node; more fill whole
        nodes under srun.
        """
        wanted = self.world_size if ranks is None else ranks
        if not 1 <= wanted <= self.world_size:
            raise UsageError(
                f"a probe asks for {wanted} ranks but the session has {self.world_size} "
                f"({self.nproc} x {self.nodes} nodes): raise --nproc/--nodes"
            )
        if wanted == 1:
            if self.world_size > 1 and job.gpus_on_node != 0:
                return OneGpuLauncher(LocalLauncher())
            return LocalLauncher()
        if wanted <= self.nproc:
            return TorchrunLauncher(wanted)
        if wanted % self.nproc:
            raise UsageError(
                f"{wanted} ranks do not fill whole nodes of {self.nproc}: "
                f"ask for a multiple of --nproc"
            )
        return srun_launcher(job, wanted // self.nproc, self.nproc)


def srun_launcher(job: JobEnv, nodes: int, tasks_per_node: int) -> SrunLauncher:
    """srun over the allocation's first `nodes` nodes, rank 0 on the first of them."""
    master = job.nodes[0] if job.nodes else job.hostname
    # A free port can be checked only here; for another host, one agreed from the job id.
    port = free_port() if _same_host(master, job.hostname) else job_port(job.job_id or master)
    cpus = job.cpus_per_task or max(1, (job.cpus_on_node or job.cpus_usable) // tasks_per_node)
    return SrunLauncher(
        nodes=nodes,
        tasks_per_node=tasks_per_node,
        cpus_per_task=cpus,
        master_addr=master,
        master_port=port,
        gpus_per_task=1 if job.gpus_on_node else None,
        nodelist=job.nodes[:nodes] if len(job.nodes) >= nodes else (),
    )


def check_plan(
    plan: LaunchPlan, job: JobEnv, which: Callable[[str], str | None] = shutil.which
) -> None:
    """Refuse a layout the job cannot run, with one line naming the fix."""
    if plan.nproc < 1:
        raise UsageError(f"--nproc must be at least 1, got {plan.nproc}")
    if plan.nodes < 1:
        raise UsageError(f"--nodes must be at least 1, got {plan.nodes}")
    if plan.nodes == 1:
        return
    if not job.in_slurm:
        raise UsageError(
            f"--nodes {plan.nodes} needs a SLURM allocation: run inside salloc or sbatch, "
            f"or use --nodes 1"
        )
    if plan.nodes > job.num_nodes:
        raise UsageError(
            f"--nodes {plan.nodes} but SLURM job {job.job_id} has {job.num_nodes} "
            f"node{'' if job.num_nodes == 1 else 's'}: lower --nodes or allocate more nodes"
        )
    if which("srun") is None:
        raise UsageError(
            f"--nodes {plan.nodes} starts ranks with srun, which is not on PATH: "
            f"load SLURM's module or use --nodes 1"
        )


# ---- what launchers print when a rank fails -------------------------------------


@dataclass(frozen=True)
class RankFailure:
    """One failed rank as torchrun's error summary or srun's error lines tell it.

    Attributes:
        rank: the global rank (srun: the task id, which is the rank).
        exitcode: its exit status; negative for the signal that killed it.
        root_cause: torchrun listed it as the first observed failure.
    """

    rank: int
    exitcode: int
    root_cause: bool = False

    @property
    def signal(self) -> int | None:
        return -self.exitcode if self.exitcode < 0 else None


_TORCHRUN_RANK = re.compile(r"^\s*rank\s*:\s*(\d+)")
_TORCHRUN_EXIT = re.compile(r"^\s*exitcode\s*:\s*(-?\d+)")
_SRUN_ERROR = re.compile(r"srun: error: [^:]+: tasks? ([\d,\-]+): (.+?)\s*$")
_SRUN_EXIT = re.compile(r"Exited with exit code (\d+)")
_SRUN_SIGNALS = {
    "Killed": signal.SIGKILL,
    "Segmentation fault": signal.SIGSEGV,
    "Aborted": signal.SIGABRT,
    "Terminated": signal.SIGTERM,
    "Bus error": signal.SIGBUS,
}


def rank_failures(lines: Iterable[str]) -> list[RankFailure]:
    """Failed ranks named in a launcher's stderr, in the order it lists them."""
    failures: list[RankFailure] = []
    rank: int | None = None
    in_root = False
    for line in lines:
        if "Root Cause" in line:
            in_root = True
        if match := _TORCHRUN_RANK.match(line):
            rank = int(match.group(1))
        elif (match := _TORCHRUN_EXIT.match(line)) and rank is not None:
            failures.append(RankFailure(rank, int(match.group(1)), root_cause=in_root))
            rank = None
        elif match := _SRUN_ERROR.search(line):
            exitcode = _srun_exitcode(match.group(2))
            if exitcode is not None:
                failures.extend(RankFailure(r, exitcode) for r in _task_ids(match.group(1)))
    return failures


def _srun_exitcode(message: str) -> int | None:
    if match := _SRUN_EXIT.search(message):
        return int(match.group(1))
    signum = _SRUN_SIGNALS.get(message)
    return -int(signum) if signum is not None else None


def _task_ids(text: str) -> list[int]:
    ids: list[int] = []
    for part in text.split(","):
        low, _, high = part.partition("-")
        if low.isdigit() and (not high or high.isdigit()):
            ids.extend(range(int(low), int(high or low) + 1))
    return ids
