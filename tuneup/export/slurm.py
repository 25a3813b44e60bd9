"""Job exports: environment variables and a SLURM batch script for a tuned config.

Pure functions of a validated TrainConfig and the machine hints: the preset's,
with a finished session's probed layout and SLURM job laid over them
(`hints_from_session`). What the hints do not say becomes a clearly marked
placeholder (`<account>`) or a default stated in a comment, never a silent guess.

Hints (tuneup.cluster.site): nodes, tasks_per_node, gpus_per_node,
cpus_per_node (or cores_per_node), cpus_per_task (or cores_per_task), account,
partition, qos, constraint, time, job_name, hint, gpu_request,
cuda_visible_devices, env, setup; at the top level or under `slurm:`.

The CPUs a task reserves are the site's share per GPU (`cpus_per_task`, else
the node's CPUs over its tasks): sites allot memory by reserved core, and the
loader workers tuneup measured are the config's `num_data_workers`, not the
reservation.
"""

from __future__ import annotations

import shlex
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from tuneup.cluster.site import SiteHints, flat_site_hints, read_site_hints
from tuneup.config import TrainConfig
from tuneup.errors import UsageError
from tuneup.export.configs import render_tuneup

DEFAULT_TIME = "01:00:00"
HEREDOC_END = "TUNEUP_CONFIG"  # quoted where it opens: the config between is data
MASTER_PORT = 29500
# NCCL's network variables a site may want; those its hints do not set stay commented.
NCCL_PLACEHOLDERS = (
    ("NCCL_DEBUG", "WARN"),
    ("NCCL_SOCKET_IFNAME", "<interface>"),
    ("NCCL_IB_HCA", "<hca>"),
    ("NCCL_NET_GDR_LEVEL", "<level>"),
)


@dataclass(frozen=True)
class JobLayout:
    """How the job is laid out: ranks, GPUs and CPUs, and the site's habits."""

    nodes: int
    tasks_per_node: int
    gpus_per_node: int
    cpus_per_task: int
    omp_threads: int
    site: SiteHints
    cpus_why: str = ""  # how cpus_per_task was chosen, for a comment in the script
    cpus_note: str = ""  # when the loader workers want more CPUs than are reserved

    @property
    def ranks(self) -> int:
        return self.nodes * self.tasks_per_node

    @property
    def job_name(self) -> str:
        return self.site.job_name or "tuneup-train"


def _cpus(workers: int, tasks: int, gpus_per_task: int, site: SiteHints) -> tuple[int, str, str]:
    """CPUs per task, why, and a note when the loader workers want more than that."""
    wanted = workers + 1
    node_share = site.cpus_per_node // tasks if site.cpus_per_node else None
    if site.cpus_per_task is not None:
        cpus = site.cpus_per_task * max(1, gpus_per_task)
        per = "" if gpus_per_task <= 1 else f" x {gpus_per_task} GPUs"
        why = f"the site's share, {site.cpus_per_task} CPUs per GPU{per} (hint cpus_per_task)"
        if node_share is not None and node_share < cpus:
            cpus, why = max(1, node_share), f"{why}, within {site.cpus_per_node} CPUs per node"
    elif node_share is not None:
        cpus = max(1, node_share)
        why = f"the node's share: {site.cpus_per_node} CPUs per node / {tasks} task(s)"
    else:
        return (
            wanted,
            (
                f"{workers} loader workers + 1 training process (no CPU share in the hints: "
                + (
                    "set cpus_per_task to your site's CPUs per GPU)"
                    if gpus_per_task
                    else "set cpus_per_task to the CPUs each task may use)"
                )
            ),
            "",
        )
    note = ""
    if cpus < wanted:
        note = (
            f"{workers} loader workers + 1 training process want {wanted} CPUs, more than "
            f"the {cpus} reserved: they will share cores"
        )
    return cpus, why, note


def job_layout(
    cfg: TrainConfig, hints: Mapping[str, Any] | None, *, one_task: bool = False
) -> JobLayout:
    """One rank per GPU (or, with `one_task`, one task holding the node's GPUs).

    `tasks_per_node` (the probed layout) wins over `gpus_per_node`: each rank
    gets one GPU. A command that starts its own ranks (`one_task`) runs as one
    task per node with all of the node's GPUs. CPUs per task: the site's share.
    """
    site = read_site_hints(hints)
    on_gpu = cfg.device != "cpu"
    if one_task:
        tasks = 1
        gpus = (site.gpus_per_node or site.tasks_per_node or 1) if on_gpu else 0
        gpus_per_task = gpus
    elif site.tasks_per_node is not None:
        tasks = site.tasks_per_node
        gpus = tasks if on_gpu else 0
        gpus_per_task = 1
    else:
        gpus = (1 if site.gpus_per_node is None else site.gpus_per_node) if on_gpu else 0
        tasks = gpus if gpus > 0 else 1
        gpus_per_task = 1
    cpus, why, note = _cpus(cfg.num_data_workers, tasks, gpus_per_task if on_gpu else 0, site)
    return JobLayout(
        nodes=site.nodes or 1,
        tasks_per_node=tasks,
        gpus_per_node=gpus,
        cpus_per_task=cpus,
        omp_threads=max(1, cpus - cfg.num_data_workers),
        site=site,
        cpus_why=why,
        cpus_note=note,
    )


def env_lines(cfg: TrainConfig, layout: JobLayout) -> list[str]:
    """`export` lines (and commented placeholders) for the run's environment."""
    lines: list[str] = []
    if cfg.tf32:
        lines.append("# TF32 stays on: NVIDIA_TF32_OVERRIDE must be unset (or 1)")
    else:
        lines.append("# TF32 off: read once when CUDA starts, so it must be set before training")
        lines.append("export NVIDIA_TF32_OVERRIDE=0")
    if cfg.intra_op_threads > 0:  # measured: the threads stage's pick
        lines.append("# intra-op threads of each training process, as the threads stage chose")
        lines.append(f"export OMP_NUM_THREADS={cfg.intra_op_threads}")
    else:  # no count was measured faster than torch's own: none is written
        lines.append(
            "# intra-op threads: torch's own choice (no count was tuned); to leave the "
            f"{cfg.num_data_workers} loader workers a core each, try"
        )
        lines.append(f"# export OMP_NUM_THREADS={layout.omp_threads}")
    return lines + site_env_lines(layout.site, on_gpu=cfg.device != "cpu")


def site_env_lines(site: SiteHints, *, on_gpu: bool = True) -> list[str]:
    """The site's GPU order and variables (its hints), and, for a job on GPUs, NCCL's
    others as placeholders."""
    lines: list[str] = []
    if site.cuda_visible_devices:
        lines += [
            "# the site's GPU order: each rank's GPU is the one nearest the CPUs SLURM binds it to",
            f"export CUDA_VISIBLE_DEVICES={site.cuda_visible_devices}",
        ]
    if site.env:
        lines.append("# the site's environment (the preset's hints)")
        lines += [f"export {name}={shlex.quote(value)}" for name, value in site.env]
    named = {name for name, _ in site.env}
    left = [(n, v) for n, v in NCCL_PLACEHOLDERS if n not in named] if on_gpu else []
    if left:
        lines.append("# NCCL (several GPUs): uncomment and fill in what your site recommends")
        lines += [f"# export {name}={value}" for name, value in left]
    return lines


def render_env(cfg: TrainConfig, hints: Mapping[str, Any] | None) -> str:
    header = "# tuneup: environment of the tuned configuration; source this file before training"
    return "\n".join([header, *env_lines(cfg, job_layout(cfg, hints))]) + "\n"


def sbatch_options(layout: JobLayout) -> list[str]:
    """The `#SBATCH` lines: the site's account, QOS, constraint and habits, the layout."""
    site = layout.site
    lines = [f"#SBATCH --job-name={layout.job_name}"]
    lines.append(f"#SBATCH --account={site.account or '<account>'}")
    lines.append(f"#SBATCH --partition={site.partition or '<partition>'}")
    for key, value in (("qos", site.qos), ("constraint", site.constraint), ("hint", site.hint)):
        if value:
            lines.append(f"#SBATCH --{key}={value}")
    lines += [
        f"#SBATCH --nodes={layout.nodes}",
        f"#SBATCH --ntasks-per-node={layout.tasks_per_node}",
    ]
    if layout.gpus_per_node:
        if site.gpu_request == "gres":
            lines.append(f"#SBATCH --gres=gpu:{layout.gpus_per_node}")
        else:
            lines.append(f"#SBATCH --gpus-per-node={layout.gpus_per_node}")
    lines += [
        f"# --cpus-per-task: {layout.cpus_why}",
        f"#SBATCH --cpus-per-task={layout.cpus_per_task}",
    ]
    if site.time is None:
        lines.append("# --time: tuneup's default (no `time` hint); set your run's length")
    lines += [
        f"#SBATCH --time={site.time or DEFAULT_TIME}",
        "#SBATCH --output=%x-%j.out",
    ]
    return lines


def setup_lines(site: SiteHints) -> list[str]:
    """Where the job loads its software: the site's usual lines as a template, commented."""
    if not site.setup:
        return ["# load your environment here (module load ..., source .venv/bin/activate)"]
    return [
        "# load your environment: the site's usual lines, to uncomment and adjust",
        *(f"# {line}" for line in site.setup),
    ]


def script_head(layout: JobLayout) -> list[str]:
    """The script up to its environment: options, strict mode, the software's lines."""
    lines = [
        "#!/bin/bash",
        "# tuneup: batch script for the tuned configuration. Replace every <...> (or delete",
        "# its line) before submitting: sbatch FILE",
        *sbatch_options(layout),
        "",
        "set -euo pipefail",
        *setup_lines(layout.site),
        "",
    ]
    if layout.cpus_note:
        lines.append(f"# note: {layout.cpus_note}")
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
        *script_head(layout),
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
    config = render_tuneup(cfg).rstrip("\n")
    if HEREDOC_END in config.splitlines():  # scalar() writes every value on its key's line
        raise UsageError(f"the config holds a line '{HEREDOC_END}', which would end it early")
    lines += [
        "",
        "# the full config, written next to the job's output",
        'CONFIG="${SLURM_SUBMIT_DIR:-.}/tuneup-${SLURM_JOB_ID:-local}.yaml"',
        f"cat > \"$CONFIG\" <<'{HEREDOC_END}'",
        config,
        HEREDOC_END,
        "",
        f"# {layout.ranks} ranks ({layout.nodes} x {layout.tasks_per_node}); "
        + (
            "each rank trains on the CPU cores of its task"
            if cfg.device == "cpu"
            else "each rank trains on GPU $SLURM_LOCALID, so every GPU stays visible "
            "(no --gpus-per-task)"
        ),
        srun_line(layout),
    ]
    return "\n".join(lines) + "\n"


def hints_from_session(session: Mapping[str, Any]) -> dict[str, Any]:
    """Export hints for a finished session: the preset's, the probed layout and the job.

    The recommendation was measured on the probed layout (session.json's
    `launch`: nodes, nproc per node), so it sets nodes and tasks per node over
    the preset's; the SLURM job the session ran in (`job`) fills in the
    partition, account and the node's CPUs that the preset does not give (not
    its CPUs per task: a probe's task may hold several GPUs).

    Raises:
        UsageError: hints or a launch block that are not what tuneup writes.
    """
    flat = flat_site_hints(session.get("hints") or {})
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
        if job.get("cpus_on_node") is not None and "cpus_per_node" not in flat:
            flat["cpus_per_node"] = _whole(job["cpus_on_node"], "job", "cpus_on_node")
    return flat


def _whole(value: Any, block: str, key: str) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise UsageError(
            f"session.json's {block} '{key}' must be a positive whole number, got {value!r}: "
            "the results folder is damaged"
        )
    return value
