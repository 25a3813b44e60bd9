"""What a session's figures rest on besides its config: the machine's CPUs and thread
settings, its GPUs and driver, the torch build, the preset's document.

Recorded in session.json when a session starts and compared when it resumes: a
ladder resumed under `OMP_NUM_THREADS=1` or on fewer CPUs would otherwise set
probes measured in one setting beside a baseline measured in another, in one
table, with no word. The comparison is pure; `read_setting` reads the machine
(never importing torch: the parent must not start CUDA).
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import os
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from tuneup.hardware.machine import torch_build
from tuneup.hardware.nvml import read_driver_facts
from tuneup.hardware.types import MachineInfo
from tuneup.tuning.results.journal_check import SESSION_ID

SETTING = "setting"
"""session.json's key for the setting the session measures in."""
SETTINGS_BEFORE = "settings_before"
"""session.json's key for the settings it was resumed from, oldest first."""

THREAD_VARIABLES = ("OMP_NUM_THREADS", "MKL_NUM_THREADS")
"""The variables that set torch's intra-op threads (and MKL's) in the worker."""


@dataclass(frozen=True)
class Setting:
    """The machine and software a session measures in (None: not known here).

    Attributes:
        cpus_usable: CPUs the processes may run on (their affinity: taskset, SLURM).
        omp_threads: OMP_NUM_THREADS as set (None: unset, torch's own choice).
        mkl_threads: MKL_NUM_THREADS as set.
        gpus: the visible GPUs' models, in order.
        driver: the NVIDIA driver's version.
        torch: the installed torch's version.
        cuda: the CUDA torch was built for (None: a CPU build).
        preset: a digest of the preset's document (a preset edited since changes it).
    """

    cpus_usable: int | None = None
    omp_threads: str | None = None
    mkl_threads: str | None = None
    gpus: tuple[str, ...] = ()
    driver: str | None = None
    torch: str | None = None
    cuda: str | None = None
    preset: str | None = None

    def to_dict(self) -> dict[str, Any]:
        data = dataclasses.asdict(self)
        data["gpus"] = list(self.gpus)
        return data

    def digest(self) -> str:
        """A short name of this setting, stamped on each probe journaled in it."""
        text = json.dumps(self.to_dict(), sort_keys=True)
        return hashlib.sha256(text.encode()).hexdigest()[:12]


_LABELS = {
    "cpus_usable": "usable CPUs",
    "omp_threads": "OMP_NUM_THREADS",
    "mkl_threads": "MKL_NUM_THREADS",
    "gpus": "GPUs",
    "driver": "the NVIDIA driver",
    "torch": "torch",
    "cuda": "torch's CUDA",
    "preset": "the preset's document",
}


def _shown(key: str, value: Any) -> str:
    if key == "gpus":
        return ", ".join(str(v) for v in value) if value else "none"
    if value is None:
        return "unset" if key.endswith("_threads") else "unknown"
    return str(value)


def differences(recorded: Any, now: Setting) -> list[str]:
    """How `now` differs from the setting session.json recorded, one line each ([] when
    alike, or when the session is older than this record and holds none)."""
    if not isinstance(recorded, Mapping):
        return []
    lines = []
    for key, value in now.to_dict().items():
        if key not in recorded or recorded[key] == value:
            continue
        if key == "preset":
            lines.append("the preset's document changed since (edited, or another tuneup's)")
            continue
        before, after = _shown(key, recorded[key]), _shown(key, value)
        verb = "were" if key in ("cpus_usable", "gpus") else "was"
        lines.append(f"{_LABELS[key]} {verb} {before}, now {after}")
    return lines


def preset_digest(document: Mapping[str, Any]) -> str:
    """A digest of a preset's document, as it resolved."""
    text = json.dumps(document, sort_keys=True, default=str)
    return hashlib.sha256(text.encode()).hexdigest()[:16]


def _driver(machine: MachineInfo) -> str | None:
    """The driver's version where NVML sees GPUs (NVML is not started otherwise)."""
    return read_driver_facts().driver if machine.gpu_count else None


def read_setting(
    machine: MachineInfo,
    preset_document: Mapping[str, Any],
    environ: Mapping[str, str] | None = None,
    *,
    driver: Callable[[MachineInfo], str | None] = _driver,
    torch: Callable[[], tuple[str | None, str | None]] = torch_build,
) -> Setting:
    """The setting this process measures in, now."""
    env = os.environ if environ is None else environ
    release, cuda = torch()
    return Setting(
        cpus_usable=machine.cpus_usable,
        omp_threads=env.get(THREAD_VARIABLES[0]),
        mkl_threads=env.get(THREAD_VARIABLES[1]),
        gpus=machine.gpu_names,
        driver=driver(machine),
        torch=release,
        cuda=cuda,
        preset=preset_digest(preset_document),
    )


def record_changes(previous: Mapping[str, Any], now: Setting, session_id: str) -> dict[str, Any]:
    """What a resume changes in session.json: the setting becomes its own (the one before
    kept in `settings_before`), so the next resume compares against the setting it goes on
    in; an older session.json gets the id its new probes carry. {}: nothing."""
    changes: dict[str, Any] = {}
    if previous.get(SESSION_ID) != session_id:
        changes[SESSION_ID] = session_id
    if previous.get(SETTING) != now.to_dict():
        before = previous.get(SETTING)
        history = list(previous.get(SETTINGS_BEFORE) or [])
        changes[SETTING] = now.to_dict()
        changes[SETTINGS_BEFORE] = history + ([before] if isinstance(before, Mapping) else [])
    return changes
