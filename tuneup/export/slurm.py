"""Job exports: environment variables and a SLURM batch script for a tuned config.

Pure functions of a validated TrainConfig and the machine hints: the preset's,
with a finished session's probed layout and SLURM job laid over them
(`hints_from_session`). What the hints do not say becomes a clearly marked
placeholder (`<account>`) or a default stated in a comment, never a silent guess.

Hints: nodes, tasks_per_node, gpus_per_node, cpus_per_node (or cores_per_node),
cpus_per_task (or cores_per_task), account, partition, qos, constraint, time,
job_name; at the top level or under `slurm:`.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from tuneup.config import TrainConfig
from tuneup.errors import UsageError
from tuneup.export.configs import render_tuneup

_INT_HINTS = ("nodes", "tasks_per_node", "gpus_per_node", "cpus_per_node", "cpus_per_task")
_TEXT_HINTS = ("account", "partition", "qos", "constraint", "time", "job_name")
# Accepted spellings of the same hint (presets speak of cores).
_ALIASES = {"cores_per_node": "cpus_per_node", "cores_per_task": "cpus_per_task"}
HINT_KEYS = _INT_HINTS + _TEXT_HINTS + tuple(_ALIASES)

DEFAULT_TIME = "01:00:00"
MASTER_PORT = 29500


@dataclass(frozen=True)
class JobLayout:
    """How the job is laid out: ranks, GPUs and CPUs, and the SLURM options."""

    nodes: int
    tasks_per_node: int
    gpus_per_node: int
    cpus_per_task: int
    omp_threads: int
    slurm: dict[str, str | None]
    cpus_why: str = ""  # how cpus_per_task was chosen, for a comment in the script

    @property
    def ranks(self) -> int:
        return self.nodes * self.tasks_per_node


def _flatten(hints: Mapping[str, Any] | None) -> dict[str, Any]:
    """Hints at the top level or under `slurm:`, aliases resolved; unknown keys ignored."""
    if hints is None:
        return {}
    if not isinstance(hints, Mapping):
        raise UsageError(f"export hints must be a mapping, got {hints!r}")
    flat: dict[str, Any] = {}
    nested = hints.get("slurm")
    for source in (hints, nested if isinstance(nested, Mapping) else {}):
        for key, value in source.items():
            key = _ALIASES.get(key, key)
            if key in _INT_HINTS + _TEXT_HINTS and value is not None:
                flat[key] = value
    for key in _INT_HINTS:
        value = flat.get(key)
        if value is not None and (isinstance(value, bool) or not isinstance(value, int)):
            raise UsageError(f"export hint '{key}' must be a whole number, got {value!r}")
        if key == "gpus_per_node" and value is not None and value < 0:
            raise UsageError(f"export hint 'gpus_per_node' must be 0 or more, got {value}")
        if key != "gpus_per_node" and value is not None and value < 1:
            raise UsageError(f"export hint '{key}' must be positive, got {value}")
    for key in _TEXT_HINTS:
        if key in flat:
            flat[key] = str(flat[key])
    return flat


def _cpus(workers: int, tasks: int, flat: Mapping[str, Any]) -> tuple[int, str]:
    """CPUs per task: the loader workers plus the training process, within what a node has."""
    wanted = workers + 1
    caps = []
    if "cpus_per_task" in flat:
        caps.append((flat["cpus_per_task"], f"the hints' {flat['cpus_per_task']} CPUs per task"))
    if "cpus_per_node" in flat:
        share = max(1, flat["cpus_per_node"] // tasks)
        caps.append((share, f"{flat['cpus_per_node']} CPUs per node / {tasks} tasks"))
    why = f"{workers} loader workers + 1 training process"
    if caps:
        cap, source = min(caps)
        if cap < wanted:
            return cap, f"{why} want {wanted}, capped at {cap} ({source})"
    return wanted, why


def job_layout(cfg: TrainConfig, hints: Mapping[str, Any] | None) -> JobLayout:
    """One rank per GPU; CPUs for the loader workers and the training process.

    `tasks_per_node` (the probed layout) wins over `gpus_per_node`: each rank
    gets one GPU. CPUs per task are num_data_workers + 1, capped by the
    `cpus_per_task` hint and by `cpus_per_node` shared among the tasks.
    """
    flat = _flatten(hints)
    on_gpu = cfg.device != "cpu"
    if "tasks_per_node" in flat:
        tasks = flat["tasks_per_node"]
        gpus = tasks if on_gpu else 0
    else:
        gpus = flat.get("gpus_per_node", 1) if on_gpu else 0
        tasks = gpus if gpus > 0 else 1
    cpus, why = _cpus(cfg.num_data_workers, tasks, flat)
    slurm = {key: flat.get(key) for key in ("account", "partition", "qos", "constraint")}
    slurm["time"] = flat.get("time")
    slurm["job_name"] = flat.get("job_name", "tuneup-train")
    return JobLayout(
        nodes=flat.get("nodes", 1),
        tasks_per_node=tasks,
        gpus_per_node=gpus,
        cpus_per_task=cpus,
        omp_threads=max(1, cpus - cfg.num_data_workers),
        slurm=slurm,
        cpus_why=why,
    )


def env_lines(cfg: TrainConfig, layout: JobLayout) -> list[str]:
    """`export` lines (and commented placeholders) for the run's environment."""
    lines: list[str] = []
    if cfg.tf32:
        lines.append("# TF32 stays on: NVIDIA_TF32_OVERRIDE must be unset (or 1)")
    else:
        lines.append("# TF32 off: read once when CUDA starts, so it must be set before training")
        lines.append("export NVIDIA_TF32_OVERRIDE=0")
    lines.append(
        f"# intra-op threads of each training process: its {layout.cpus_per_task} CPUs "
        f"less {cfg.num_data_workers} loader workers"
    )
    lines.append(f"export OMP_NUM_THREADS={layout.omp_threads}")
    lines += [
        "# NCCL (several GPUs): uncomment and fill in what your site recommends",
        "# export NCCL_DEBUG=WARN",
        "# export NCCL_SOCKET_IFNAME=<interface>",
        "# export NCCL_IB_HCA=<hca>",
        "# export NCCL_NET_GDR_LEVEL=<level>",
    ]
    return lines


def render_env(cfg: TrainConfig, hints: Mapping[str, Any] | None) -> str:
    header = "# tuneup: environment of the tuned configuration; source this file before training"
    return "\n".join([header, *env_lines(cfg, job_layout(cfg, hints))]) + "\n"


def _sbatch_options(layout: JobLayout) -> list[str]:
    slurm = layout.slurm
    lines = [f"#SBATCH --job-name={slurm['job_name']}"]
    for key in ("account", "partition"):
        lines.append(f"#SBATCH --{key}={slurm[key] or f'<{key}>'}")
    lines += [f"#SBATCH --{key}={slurm[key]}" for key in ("qos", "constraint") if slurm[key]]
    lines += [
        f"#SBATCH --nodes={layout.nodes}",
        f"#SBATCH --ntasks-per-node={layout.tasks_per_node}",
    ]
    if layout.gpus_per_node:
        lines.append(f"#SBATCH --gpus-per-node={layout.gpus_per_node}")
    lines += [
        f"# --cpus-per-task: {layout.cpus_why}",
        f"#SBATCH --cpus-per-task={layout.cpus_per_task}",
    ]
    if slurm["time"] is None:
        lines.append("# --time: tuneup's default (no `time` hint); set your run's length")
    lines += [
        f"#SBATCH --time={slurm['time'] or DEFAULT_TIME}",
        "#SBATCH --output=%x-%j.out",
    ]
    return lines


def srun_line(layout: JobLayout) -> str:
    """The job step: one `tuneup train` per rank, ranks read from SLURM_PROCID/SLURM_LOCALID.

    Since Slurm 22.05 srun no longer inherits --cpus-per-task from sbatch, so it
    is repeated. No --gpus-per-task: each rank picks cuda:SLURM_LOCALID, which
    needs every GPU of its node visible.
    """
    return (
        f"srun --ntasks-per-node={layout.tasks_per_node} "
        f'--cpus-per-task={layout.cpus_per_task} tuneup train --config "$CONFIG"'
    )


def render_sbatch(cfg: TrainConfig, hints: Mapping[str, Any] | None) -> str:
    """A complete batch script: options, environment, the config, and the srun line."""
    layout = job_layout(cfg, hints)
    if cfg.local_batch_size is None and cfg.global_batch_size < layout.ranks:
        raise UsageError(
            f"global_batch_size {cfg.global_batch_size} is smaller than the job's "
            f"{layout.ranks} ranks: raise it, set local_batch_size, or use fewer nodes"
        )
    lines = [
        "#!/bin/bash",
        "# tuneup: batch script for the tuned configuration. Replace every <...> (or delete",
        "# its line) before submitting: sbatch FILE",
        *_sbatch_options(layout),
        "",
        "set -euo pipefail",
        "# load your environment here (module load ..., source .venv/bin/activate)",
        "",
        *env_lines(cfg, layout),
        "# rank 0's node and a free port: tuneup train needs both in an srun step of",
        "# several tasks to form the process group",
        'export MASTER_ADDR="$(scontrol show hostnames "$SLURM_JOB_NODELIST" | head -n 1)"',
        f"export MASTER_PORT={MASTER_PORT}",
    ]
    if cfg.local_batch_size is None and cfg.global_batch_size % layout.ranks:
        lines.append(
            f"# note: global_batch_size {cfg.global_batch_size} does not split evenly over "
            f"{layout.ranks} ranks; each rank takes {cfg.global_batch_size // layout.ranks}"
        )
    lines += [
        "",
        "# the full config, written next to the job's output",
        'CONFIG="${SLURM_SUBMIT_DIR:-.}/tuneup-${SLURM_JOB_ID:-local}.yaml"',
        "cat > \"$CONFIG\" <<'TUNEUP_CONFIG'",
        render_tuneup(cfg).rstrip("\n"),
        "TUNEUP_CONFIG",
        "",
        f"# {layout.ranks} ranks ({layout.nodes} x {layout.tasks_per_node}); each rank "
        "trains on GPU $SLURM_LOCALID, so every GPU stays visible (no --gpus-per-task)",
        srun_line(layout),
    ]
    return "\n".join(lines) + "\n"


def hints_from_session(session: Mapping[str, Any]) -> dict[str, Any]:
    """Export hints for a finished session: the preset's, the probed layout and the job.

    The recommendation was measured on the probed layout (session.json's
    `launch`: nodes, nproc per node), so it sets nodes and tasks per node over
    the preset's; the SLURM job the session ran in (`job`) fills in the
    partition, account and CPUs that the preset does not give.

    Raises:
        UsageError: hints or a launch block that are not what tuneup writes.
    """
    flat = _flatten(session.get("hints") or {})
    launch = session.get("launch")
    if isinstance(launch, Mapping):
        nodes = _whole(launch.get("nodes", 1), "launch", "nodes")
        nproc = launch.get("nproc")
        if nproc is None and launch.get("world_size") is not None:
            nproc = _whole(launch["world_size"], "launch", "world_size") // nodes
        if nproc is not None:
            flat["tasks_per_node"] = _whole(nproc, "launch", "nproc")
        flat["nodes"] = nodes
    job = session.get("job")
    if isinstance(job, Mapping):
        for key in ("account", "partition"):
            if job.get(key) and key not in flat:
                flat[key] = str(job[key])
        for key, hint in (("cpus_on_node", "cpus_per_node"), ("cpus_per_task", "cpus_per_task")):
            if job.get(key) is not None and hint not in flat:
                flat[hint] = _whole(job[key], "job", key)
    return flat


def _whole(value: Any, block: str, key: str) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise UsageError(
            f"session.json's {block} '{key}' must be a positive whole number, got {value!r}: "
            "the results folder is damaged"
        )
    return value
