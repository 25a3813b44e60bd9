"""Ranks, process groups and DDP: one process per device, ranks from torchrun or SLURM."""

from __future__ import annotations

import os
import sys
from collections.abc import Mapping
from dataclasses import dataclass

from tuneup.errors import UsageError
from tuneup.unet.refusals import ranks_problem


def exit_skipping_teardown(code: int) -> None:
    """Leave a rank of several with `code`, skipping the interpreter's teardown.

    With torch 2.13 on the CPU, a gloo rank that has destroyed its process
    group still aborts in about half of its exits ("terminate called without
    an active exception", SIGABRT) while C++ destructors run, after its work
    was written: the run would read as a crash. Flushing and leaving with
    os._exit skips that teardown; callers close their own files first.
    """
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code)


@dataclass(frozen=True)
class DistEnv:
    """This process's place in the job."""

    rank: int = 0
    local_rank: int = 0
    world_size: int = 1
    source: str = "single"  # "single", "torchrun" or "slurm"

    @property
    def distributed(self) -> bool:
        return self.world_size > 1

    @property
    def is_main(self) -> bool:
        return self.rank == 0


def _int(environ: Mapping[str, str], name: str) -> int:
    try:
        return int(environ[name])
    except ValueError:
        raise UsageError(f"{name}={environ[name]!r} is not an integer") from None


def dist_env_from(environ: Mapping[str, str]) -> DistEnv:
    """Read the rank layout: torchrun's variables first, then an srun step's.

    Inside `salloc` the allocation's SLURM_NTASKS is set even for a plain shell
    command, so SLURM ranks are used only inside an srun step with several tasks.
    """
    if "WORLD_SIZE" in environ and "RANK" in environ:
        return DistEnv(
            rank=_int(environ, "RANK"),
            local_rank=_int(environ, "LOCAL_RANK") if "LOCAL_RANK" in environ else 0,
            world_size=_int(environ, "WORLD_SIZE"),
            source="torchrun",
        )
    step_tasks = environ.get("SLURM_STEP_NUM_TASKS")
    if step_tasks is not None and int(step_tasks) > 1 and "SLURM_PROCID" in environ:
        for name in ("MASTER_ADDR", "MASTER_PORT"):
            if name not in environ:
                raise UsageError(
                    f"srun started {step_tasks} tasks but {name} is not set: export "
                    "MASTER_ADDR (the first node) and MASTER_PORT (a free port) before srun"
                )
        return DistEnv(
            rank=_int(environ, "SLURM_PROCID"),
            local_rank=_int(environ, "SLURM_LOCALID") if "SLURM_LOCALID" in environ else 0,
            world_size=int(step_tasks),
            source="slurm",
        )
    return DistEnv()


def init_process_group(env: DistEnv, device_type: str) -> None:
    """Join the job's process group: NCCL on GPUs, gloo on CPUs."""
    import torch.distributed as dist  # torch: the parent imports this module for its pure parts

    if not env.distributed or dist.is_initialized():
        return
    os.environ.setdefault("MASTER_ADDR", "127.0.0.1")
    backend = "nccl" if device_type == "cuda" else "gloo"
    dist.init_process_group(
        backend=backend, init_method="env://", rank=env.rank, world_size=env.world_size
    )


def destroy_process_group() -> None:
    import torch.distributed as dist  # torch: the parent imports this module for its pure parts

    if dist.is_initialized():
        dist.destroy_process_group()


def local_batch(global_batch: int, local_override: int | None, world_size: int) -> int:
    """Per-rank batch: the override, else the global batch shared out (as the tutorial)."""
    if local_override is not None:
        return local_override
    problem = ranks_problem(global_batch, local_override, world_size)
    if problem is not None:
        raise UsageError(problem)
    return global_batch // world_size
