"""Values shared by the probe engine: outcomes, phase measurements, probe results, events.

Pure data: no torch, no processes, no clock. Everything here round-trips
through JSON (the worker's events, the journal).
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from enum import Enum
from typing import Any


class Status(str, Enum):
    """How a probe ended."""

    OK = "ok"
    OOM = "oom"
    CRASH = "crash"
    TIMEOUT = "timeout"
    DIVERGED = "diverged"
    UNSUPPORTED = "unsupported"
    SKIPPED = "skipped"


PHASES = ("io", "synthetic", "full")

BASELINE_STAGE = "baseline"
CONFIRM_STAGE = "confirm"
FRESH_PROCESS_STAGES = frozenset({BASELINE_STAGE, CONFIRM_STAGE})
"""Stages whose probes follow no other probe in their process, however a backend may reuse
processes elsewhere: each baseline probe is the first of a fresh process (the session's
reference, and its noise from process to process), and so is each confirmation pair
(Candidate.pair), so what is recommended holds across fresh processes."""

# Event kinds the worker writes, one JSON object per line with a "event" key.
EVENT_KINDS = ("start", "warmup", "trial", "loss", "result", "error")
ERROR_KINDS = ("oom", "cuda", "nccl", "compile", "unsupported", "other")


@dataclass(frozen=True)
class Budget:
    """How long a probe may measure: warm-up, trials of K steps, and a wall-clock limit."""

    warmup_min_steps: int = 3
    warmup_max_steps: int = 30
    warmup_tolerance: float = 0.05  # step time stable when consecutive windows differ < 5%
    trial_steps: int = 10  # K
    trials: int = 5  # T
    loss_steps: int = 20  # fixed-seed loss recorded for this many steps
    limit_s: float = 600.0  # per probe, warm-up and trials included

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)


@dataclass(frozen=True)
class ProbeSpec:
    """What one probe runs: the full training config, the budget, which phases.

    `stop_below_sps`: the FULL samples/s the probe must reach to stay in the
    running; below it (clearly, after two trials) it stops early. None: no early stop.
    """

    config: dict[str, Any]
    budget: Budget = field(default_factory=Budget)
    phases: tuple[str, ...] = PHASES
    seed: int = 0
    stop_below_sps: float | None = None

    def to_dict(self) -> dict[str, Any]:
        data = {
            "config": self.config,
            "budget": self.budget.to_dict(),
            "phases": list(self.phases),
            "seed": self.seed,
        }
        if self.stop_below_sps is not None:
            data["stop_below_sps"] = self.stop_below_sps
        return data

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> ProbeSpec:
        stop = data.get("stop_below_sps")
        return cls(
            config=dict(data["config"]),
            budget=Budget(**data.get("budget", {})),
            phases=tuple(data.get("phases", PHASES)),
            seed=int(data.get("seed", 0)),
            stop_below_sps=None if stop is None else float(stop),
        )


@dataclass(frozen=True)
class Contention:
    """What else used the machine while a probe was timed (hostload.py, telemetry.py).

    Attributes:
        other_cpus: CPUs' worth of time other processes took on the probe's
            usable CPUs (not tuneup, not the probe's own processes).
        usable_cpus: the CPUs the probe could run on (its affinity).
        steal_pct: time the hypervisor gave to other guests, as a percentage
            of the usable CPUs' time (a shared VM's noisy neighbours).
        gpu_processes: compute processes of others on the probe's GPUs (NVML).
        seconds: the window the figures cover.
        note: why the probe counts as contended; empty when it does not.
    """

    other_cpus: float | None = None
    usable_cpus: int | None = None
    steal_pct: float | None = None
    gpu_processes: int | None = None
    seconds: float | None = None
    note: str = ""

    @property
    def contended(self) -> bool:
        return bool(self.note)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> Contention:
        known = {f.name for f in dataclasses.fields(cls)}
        return cls(**{k: v for k, v in data.items() if k in known})


def probe_key(values: Mapping[str, Any], ranks: int | None = None) -> str:
    """A probe's identity: its full knob values, and its ranks where they are given.

    Two probes with the same key measure the same thing: the search measures
    a configuration once per key, and a resumed session takes a journaled
    probe for the planned one of the same stage and key. The ranks tell a
    1-rank reference apart from the N-rank probe of the same values.
    """
    key = json.dumps(values, sort_keys=True, default=str)
    return key if ranks is None else f"{key}|ranks={ranks}"


@dataclass(frozen=True)
class ProbeResult:
    """One finished probe, as journaled (design.md, Results directory).

    Frozen: a step that changes a result (the loss guard, telemetry, a retry)
    makes a new one with `dataclasses.replace`.
    """

    stage: str
    variant: dict[str, Any]
    config: dict[str, Any]
    status: Status
    reason: str = ""
    io_sps: float | None = None
    synthetic_sps: float | None = None
    full_sps: float | None = None
    full_sps_trials: list[float] = field(default_factory=list)
    iqr_pct: float | None = None
    warmup_s: float | None = None
    timed_s: float | None = None  # seconds in timed trials: the part of wall_s that measured
    one_time_s: dict[str, float] = field(default_factory=dict)
    break_even_steps: float | None = None
    loss_start: float | None = None
    loss_end: float | None = None
    losses: list[float] = field(default_factory=list)
    scaler_overflows: int = 0
    gpu_util_mean: float | None = None
    power_mean_w: float | None = None
    energy_j_per_sample: float | None = None
    mem_peak_mb: float | None = None  # the worker's CUDA caching allocator: tensors only
    # NVML's device memory in use at its highest during FULL: the tensors plus the CUDA
    # context, cuDNN workspaces and the allocator's reserve (what another job would see).
    gpu_mem_used_mb: float | None = None
    throttled: bool | None = None
    wall_s: float = 0.0
    # Multi-rank probes: the ranks it ran with, each rank's own FULL samples/s
    # (its local batch over its own trial times), and the ranks flagged as
    # stragglers. `full_sps` is the job's figure, set by the slowest rank.
    ranks: int = 1
    rank_sps: list[float] = field(default_factory=list)
    stragglers: list[int] = field(default_factory=list)
    # What else used the machine during the timed window (None: not watched).
    contention: Contention | None = None
    # Leading trials dropped as outliers (late one-time work) and replaced by more trials.
    trials_discarded: int = 0
    # A failure that need not happen again (killed by a signal, an NCCL timeout).
    transient: bool = False
    # This attempt failed and the probe was run again: a later journal line replaces it.
    retried: bool = False
    # The probes its process ran before it: 0 in a fresh process (tuneup.worker.serve).
    served_before: int = 0
    # Why its trials ended early (clearly slower than it had to be); empty when they did not.
    stopped_early: str = ""
    # Where its IO figure comes from when it did not measure IO itself (its data path
    # was measured before: "carried from <stage>: <label>"); empty when it measured it.
    io_from: str = ""
    # Under torch.compile: "cold" when it compiled its graphs (first_steps holds that),
    # "warm" when they came from the compile cache; then compile_cold_s is the cold
    # compile's one-time cost where this machine measured it. "" without torch.compile.
    compile_cache: str = ""
    compile_cold_s: float | None = None
    # The device it ran on, as the worker named it ("cpu", "NVIDIA H200"); "" unknown.
    device: str = ""

    @property
    def ok(self) -> bool:
        return self.status is Status.OK

    @property
    def contended(self) -> bool:
        return self.contention is not None and self.contention.contended

    def to_journal(self) -> dict[str, Any]:
        data = dataclasses.asdict(self)
        data["status"] = self.status.value
        return data

    @classmethod
    def from_journal(cls, data: dict[str, Any]) -> ProbeResult:
        known = {f.name for f in dataclasses.fields(cls)}
        values = {k: v for k, v in data.items() if k in known}
        values["status"] = Status(values["status"])
        if isinstance(values.get("contention"), dict):
            values["contention"] = Contention.from_dict(values["contention"])
        return cls(**values)


@dataclass(frozen=True)
class Candidate:
    """One variant a stage proposes: a label and the knob values it sets on the incumbent.

    Attributes:
        label: a few words naming the variant.
        values: the knob values it sets on the incumbent.
        ranks: the ranks this probe runs with; None means the session's own
            (its --nproc x --nodes). A reference run on one GPU sets 1.
        reference: measured for comparison only (the `noddp` compute-only run,
            the single-GPU run), never adopted as the recommendation.
        stop_below_sps: set by the search on a stage's first probe of a candidate:
            the FULL samples/s below which it is out of the running, so a backend
            may stop it early (ProbeSpec.stop_below_sps); None: measure it whole.
        pair: set by the search on both probes of an A/B pair: the pair's number
            in the session. Of FRESH_PROCESS_STAGES, a pair (its re-measures too)
            starts a fresh process and may share it; None: not in a pair.
    """

    label: str
    values: dict[str, Any]
    ranks: int | None = None
    reference: bool = False
    stop_below_sps: float | None = None
    pair: int | None = None
