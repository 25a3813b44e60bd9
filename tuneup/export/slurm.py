"""Job exports: environment variables and a SLURM batch script for a tuned config.

Pure functions of a validated TrainConfig and the preset's machine hints. What
the hints do not say becomes a clearly marked placeholder (`<account>`) or a
stated default, never a silent guess.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from tuneup.config import TrainConfig
from tuneup.errors import UsageError
from tuneup.export.configs import render_tuneup

_INT_HINTS = ("nodes", "gpus_per_node", "cpus_per_node", "cpus_per_task")
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


def job_layout(cfg: TrainConfig, hints: Mapping[str, Any] | None) -> JobLayout:
    """One rank per GPU; CPUs per task from the hints, else enough for the loader workers."""
    flat = _flatten(hints)
    on_gpu = cfg.device != "cpu"
    gpus = flat.get("gpus_per_node", 1) if on_gpu else 0
    tasks = gpus if gpus > 0 else 1
    if "cpus_per_task" in flat:
        cpus = flat["cpus_per_task"]
    elif "cpus_per_node" in flat:
        cpus = max(1, flat["cpus_per_node"] // tasks)
    else:
        cpus = cfg.num_data_workers + 1  # the training process and its loader workers
    slurm = {key: flat.get(key) for key in ("account", "partition", "qos", "constraint")}
    slurm["time"] = flat.get("time", DEFAULT_TIME)
    slurm["job_name"] = flat.get("job_name", "tuneup-train")
    return JobLayout(
        nodes=flat.get("nodes", 1),
        tasks_per_node=tasks,
        gpus_per_node=gpus,
        cpus_per_task=cpus,
        omp_threads=max(1, cpus - cfg.num_data_workers),
        slurm=slurm,
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
        f"#SBATCH --cpus-per-task={layout.cpus_per_task}",
        f"#SBATCH --time={slurm['time']}",
        "#SBATCH --output=%x-%j.out",
    ]
    return lines


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
        "# rank 0's node and a free port, for the process group",
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
        # Since Slurm 22.05 srun no longer inherits --cpus-per-task from sbatch.
        f'srun --cpus-per-task={layout.cpus_per_task} tuneup train --config "$CONFIG"',
    ]
    return "\n".join(lines) + "\n"
