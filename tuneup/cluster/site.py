"""A site's batch habits, as a preset's `probe.hints` give them.

Sites write their job scripts their own way: Jean Zay reserves each GPU's
share of the node's cores (`--cpus-per-task=8` on its 8-GPU A100 nodes, 10 on
its 4-GPU V100 nodes) with `--hint=nomultithread`, a QOS and a constraint, and
asks for GPUs with `--gres=gpu:N`; the NERSC tutorial's Perlmutter jobs take 32
CPUs a task with `-C gpu`, set `NCCL_NET_GDR_LEVEL=PHB` and list the GPUs in
reverse (`CUDA_VISIBLE_DEVICES=3,2,1,0`) so that each rank's GPU is the one
nearest the cores SLURM binds it to. Hints say these things once, in the
preset; the sbatch and env exports apply them.

Pure: the hints' names, what each may hold, and a typed reading of them.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from tuneup.errors import UsageError
from tuneup.quoting import unsafe_character

INT_HINTS = ("nodes", "tasks_per_node", "gpus_per_node", "cpus_per_node", "cpus_per_task")
TEXT_HINTS = (
    "account",
    "partition",
    "qos",
    "constraint",
    "time",
    "job_name",
    "hint",
    "gpu_request",
    "cuda_visible_devices",
)
# `env`: variables every job of the site sets (NCCL's, say); `setup`: the lines that
# load the software (module load ..., a container), written as a commented template.
SITE_MAPPINGS = ("env", "setup")
# Accepted spellings of the same hint (presets speak of cores).
ALIASES = {"cores_per_node": "cpus_per_node", "cores_per_task": "cpus_per_task"}
SITE_HINT_KEYS = INT_HINTS + TEXT_HINTS + SITE_MAPPINGS + tuple(ALIASES)

# How a job asks for GPUs: `--gpus-per-node=N` (SLURM's own), or `--gres=gpu:N` (Jean
# Zay's scripts and older sites). Either way every rank sees all of its node's GPUs
# and takes the one of its local rank.
GPU_REQUESTS = ("gpus-per-node", "gres")
_ENV_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*\Z")
_DEVICE_LIST = re.compile(r"[A-Za-z0-9-]+(,[A-Za-z0-9-]+)*\Z")


@dataclass(frozen=True)
class SiteHints:
    """The hints the exports read, checked; None where the preset says nothing."""

    nodes: int | None = None
    tasks_per_node: int | None = None
    gpus_per_node: int | None = None
    cpus_per_node: int | None = None
    cpus_per_task: int | None = None  # the node's share per GPU (one rank per GPU)
    account: str | None = None
    partition: str | None = None
    qos: str | None = None
    constraint: str | None = None
    time: str | None = None
    job_name: str | None = None
    hint: str | None = None  # --hint, e.g. nomultithread
    gpu_request: str = GPU_REQUESTS[0]
    cuda_visible_devices: str | None = None  # e.g. "3,2,1,0"
    env: tuple[tuple[str, str], ...] = ()
    setup: tuple[str, ...] = ()


def hint_problem(key: str, value: Any, where: str) -> str | None:
    """What is wrong with one site hint's value, in one line; None when it is sound."""
    key = ALIASES.get(key, key)
    if value is None:
        return None
    if key in INT_HINTS:
        least = 0 if key == "gpus_per_node" else 1
        if isinstance(value, bool) or not isinstance(value, int) or value < least:
            return f"{where}{key}: must be a whole number of at least {least}, got {value!r}"
    elif key == "time":
        if not isinstance(value, str):
            return (
                f'{where}time: must be text like "01:00:00", got {value!r} '
                "(quote it: YAML reads 01:00:00 unquoted as a number of seconds)"
            )
        return _word_problem(key, value, where)
    elif key == "gpu_request":
        if value not in GPU_REQUESTS:
            return f"{where}gpu_request: must be one of {', '.join(GPU_REQUESTS)}, got {value!r}"
    elif key == "cuda_visible_devices":
        if not isinstance(value, str) or not _DEVICE_LIST.match(value):
            return (
                f'{where}cuda_visible_devices: must be a list of GPUs like "3,2,1,0", got {value!r}'
            )
    elif key == "env":
        return _env_problem(value, where)
    elif key == "setup":
        lines = [value] if isinstance(value, str) else value
        if not isinstance(lines, list) or not all(isinstance(v, str) for v in lines):
            return f"{where}setup: must be a line of shell or a list of lines, got {value!r}"
        for line in (part for entry in lines for part in entry.splitlines()):
            char = unsafe_character(line, allow="\t")
            if char is not None:
                return f"{where}setup: the line {line!r} holds the control character {char}"
    elif not isinstance(value, (str, int, float)) or isinstance(value, bool):
        return f"{where}{key}: must be text, got {type(value).__name__}"
    else:
        return _word_problem(key, str(value), where)
    return None


def _word_problem(key: str, text: str, where: str) -> str | None:
    """A hint written into an `#SBATCH` line must be one word: sbatch splits the line at
    spaces, and a newline would end the comment and make the rest a command."""
    char = unsafe_character(text)
    if char is not None:
        return f"{where}{key}: holds the control character {char}, got {text!r}"
    if not text or any(c.isspace() or c in "\"'\\" for c in text):
        return f"{where}{key}: must be one word, without spaces or quotes, got {text!r}"
    return None


def _env_problem(value: Any, where: str) -> str | None:
    if not isinstance(value, Mapping):
        return f"{where}env: must map variable names to values, got {value!r}"
    for name, text in value.items():
        if not isinstance(name, str) or not _ENV_NAME.match(name):
            return f"{where}env: {name!r} is not a variable name"
        if isinstance(text, (bool, Mapping, list)) or text is None:
            return f"{where}env.{name}: must be text or a number, got {text!r}"
        char = unsafe_character(str(text))
        if char is not None:
            return f"{where}env.{name}: holds the control character {char}, got {text!r}"
    return None


def flat_site_hints(hints: Mapping[str, Any] | None) -> dict[str, Any]:
    """The site hints at the top level or under `slurm:`, aliases resolved, others dropped."""
    if hints is None:
        return {}
    if not isinstance(hints, Mapping):
        raise UsageError(f"export hints must be a mapping, got {hints!r}")
    flat: dict[str, Any] = {}
    nested = hints.get("slurm")
    for source in (hints, nested if isinstance(nested, Mapping) else {}):
        for key, value in source.items():
            key = ALIASES.get(key, key)
            if key in SITE_HINT_KEYS and value is not None:
                flat[key] = value
    return flat


def read_site_hints(hints: Mapping[str, Any] | None) -> SiteHints:
    """The hints as a SiteHints.

    Raises:
        UsageError: the first hint whose value cannot be used, saying which and why.
    """
    flat = flat_site_hints(hints)
    for key, value in flat.items():
        problem = hint_problem(key, value, "")
        if problem is not None:
            raise UsageError(f"export hint {problem}")
    env = flat.get("env") or {}
    setup = flat.get("setup") or ()
    given: dict[str, Any] = {key: flat[key] for key in INT_HINTS if key in flat}
    given.update({key: str(flat[key]) for key in TEXT_HINTS if key in flat})
    return SiteHints(
        **given,
        env=tuple((str(k), str(v)) for k, v in env.items()),
        # a `setup: |` block is several lines: each is written commented on its own
        setup=tuple(
            line
            for entry in ([setup] if isinstance(setup, str) else setup)
            for line in entry.splitlines()
        ),
    )
