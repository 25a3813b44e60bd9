"""Values shared by the probe engine: outcomes, phase measurements, probe results, events.

Pure data: no torch, no processes, no clock. Everything here round-trips
through JSON (the worker's events, the journal).
"""

from __future__ import annotations

import dataclasses
import functools
import json
import math
import types
import typing
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from enum import Enum
from typing import Any

from tuneup.probe.figures import ProbeFigures, figure_names


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
# The reason of a probe the user dropped (the app's `s`: skip the rest of this stage): not a
# failure, and its stage reads as skipped.
USER_SKIP = "skipped by the user"

PROFILE_MISSING = "missing"
"""A profile's key for what it lacks and why, in one line naming the place (a trace that
could not be written or read: TMPDIR full, the probes' folder): its other figures stand."""

# Event kinds the worker writes, one JSON object per line with a "event" key.
EVENT_KINDS = ("start", "warmup", "trial", "loss", "result", "error")
ERROR_KINDS = ("oom", "cuda", "nccl", "compile", "unsupported", "other")


@dataclass(frozen=True)
class ProbeBudget:
    """How a probe measures, as a preset sets it (``probe.budget``): in seconds, not steps.

    A trial lasts ``trial_s``: the steps it runs follow from the step time the
    warm-up measured, so a 60 ms GPU step and a 0.5 s loader-bound one are
    timed alike. A phase runs ``min_trials`` to ``max_trials`` trials and stops
    adding them once they agree within ``trial_noise`` (nvbench's rule). The
    warm-up runs until the step time is steady, never longer than
    ``warmup_cap_s``. tuneup.probe.plan turns a budget into each probe's plan.
    """

    trial_s: float = 1.0
    min_trials: int = 2
    max_trials: int = 5
    trial_noise: float = 0.01  # relative spread of the trials at which a phase has enough
    warmup_cap_s: float = 30.0
    warmup_tolerance: float = 0.05  # step time stable when consecutive windows differ < 5%
    loss_steps: int = 20  # fixed-seed loss recorded for this many steps
    limit_s: float = 600.0  # per probe, warm-up and trials included

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> ProbeBudget:
        """A budget as recorded (session.json, a ladder record), older step-counted ones too:
        their trial count is kept as max_trials; their step counts mean nothing now."""
        known = {f.name for f in dataclasses.fields(cls)}
        values = {k: v for k, v in data.items() if k in known}
        if "trials" in data and "max_trials" not in data:
            values["max_trials"] = data["trials"]
        return cls(**values)


GPU_BUDGET = ProbeBudget(trial_s=0.5, trial_noise=0.005, warmup_cap_s=15.0, limit_s=300.0)
"""A GPU preset's budget where it says nothing else: steps of tens of ms repeat to 0.01%, so
half-second trials agree to 0.5% in two (pyperf keeps one default per value, likewise)."""


def default_budget(device: str) -> ProbeBudget:
    """The budget a preset's `probe.budget` is laid over: a CUDA preset's is GPU_BUDGET."""
    return GPU_BUDGET if device == "cuda" else ProbeBudget()


STEP_COUNTED_BUDGET = {
    "trial_steps": "trial_s (seconds per trial: its steps follow from the measured step time)",
    "trials": "max_trials (a phase stops sooner once its trials agree within trial_noise)",
    "warmup_min_steps": "warmup_cap_s (the warm-up runs until the step time is steady)",
    "warmup_max_steps": "warmup_cap_s (the warm-up runs until the step time is steady)",
}
"""The budget keys of step-counted trials (before trials were timed in seconds), and what
replaced each: a preset that still gives one is told which."""


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
        note: what got in the probe's way, in words; empty when nothing did.
        busiest: the other processes that took the most CPU time in the window, with
            their CPUs' worth ("python3 1.0, pytest 0.3"); empty when none is known.
        spread: how far other processes' share moved within the window (the largest
            less the smallest of its per-second figures, in CPUs); None: not known.
        under_load: the load that got in its way was steady (hostload.steady_load): its
            neighbours in time ran under the same load, so it is compared with them, and
            every verdict it enters says "measured under load".
        confined_threads: the intra-op threads tuneup ran the probe on, fewer than torch's
            own count, because others' load was there when the ladder began (confine.py);
            None: not confined. Probes confined alike pair; others do not.
    """

    other_cpus: float | None = None
    usable_cpus: int | None = None
    steal_pct: float | None = None
    gpu_processes: int | None = None
    seconds: float | None = None
    note: str = ""
    busiest: str = ""
    spread: float | None = None
    under_load: bool = False
    confined_threads: int | None = None

    @property
    def contended(self) -> bool:
        """Something got in its way that its neighbours may not have seen: left out of
        comparisons (a steady load, `under_load`, is not)."""
        return bool(self.note) and not self.under_load

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
class ProbeResult(ProbeFigures):
    """One finished probe, as journaled (design.md, Results directory): its figures, declared
    once in `ProbeFigures` (tuneup/probe/figures.py), and what the parent knows of it.

    Positionally, its stage, variant, config, status and reason (the figures are keywords
    only, and so is the rest). It holds its figures as a journal line does, lists and
    dicts, whatever it was handed (`__post_init__`).

    Frozen: a step that changes a result (the loss guard, telemetry, a retry)
    makes a new one with `dataclasses.replace`.
    """

    stage: str
    variant: dict[str, Any]
    config: dict[str, Any]
    status: Status
    reason: str = ""
    _: dataclasses.KW_ONLY
    gpu_util_mean: float | None = None
    power_mean_w: float | None = None
    energy_j_per_sample: float | None = None
    # NVML's device memory in use at its highest during FULL: the tensors plus the CUDA
    # context, cuDNN workspaces and the allocator's reserve (what another job would see).
    gpu_mem_used_mb: float | None = None
    throttled: bool | None = None
    wall_s: float = 0.0
    # What else used the machine during the timed window (None: not watched).
    contention: Contention | None = None
    # A failure that need not happen again (killed by a signal, an NCCL timeout).
    transient: bool = False
    # This attempt failed and the probe was run again: a later journal line replaces it.
    retried: bool = False
    # Measured again on a resume: the failure (or contended run) it replaces, in words; a
    # reader of the journal puts it in that line's place.
    replaces: str = ""
    # The probes its process ran before it: 0 in a fresh process (tuneup.worker.serve).
    served_before: int = 0
    # Where its IO figure comes from when it did not measure IO itself (its data path
    # was measured before: "carried from <stage>: <label>"); empty when it measured it.
    io_from: str = ""
    # Under torch.compile, when its graphs came from the cache (compile_cache "warm"): the
    # cold compile's one-time cost where this machine measured it.
    compile_cold_s: float | None = None
    # The device it ran on, as the worker named it ("cpu", "NVIDIA H200"); "" unknown.
    device: str = ""
    # The setting it was measured in (tuneup.tuning.session.setting: CPUs, threads, GPUs, driver,
    # torch), as a digest: a resume on a changed machine measures the baseline again, and
    # those probes take the place of the ones of another setting. "": not recorded.
    setting: str = ""
    # The session it was measured in (session.json's `id`): a line of another session's
    # journal is told apart. "": not recorded (an older probe).
    session: str = ""
    # Taken from the journal by this run (a resume), not measured in it: it pairs only with
    # another so taken (probe/conditions.py). Never journaled.
    replayed: bool = field(default=False, compare=False)

    def __post_init__(self) -> None:
        """Its figures as a journal line holds them, lists and dicts, whatever it was handed
        (the worker's tuples, a read-only mapping): a line read back equals the result
        written, and `dataclasses.asdict` can copy each."""
        for name in figure_names():
            value = getattr(self, name)
            if isinstance(value, tuple):
                object.__setattr__(self, name, list(value))
            elif isinstance(value, Mapping) and not isinstance(value, dict):
                object.__setattr__(self, name, dict(value))

    @property
    def ok(self) -> bool:
        return self.status is Status.OK

    @property
    def contended(self) -> bool:
        return self.contention is not None and self.contention.contended

    @property
    def user_skipped(self) -> bool:
        """The user dropped it (the rest of its stage was skipped): it never ran."""
        return self.status is Status.SKIPPED and self.reason == USER_SKIP

    @property
    def under_load(self) -> bool:
        """It ran under a steady load other processes put on the machine, and counts."""
        return self.contention is not None and self.contention.under_load

    def rate(self, phase: str) -> float | None:
        """The phase's median samples/s as measured by this probe (None: not measured here;
        an IO figure carried from another probe, `io_from`, is not this probe's)."""
        if phase == "io" and self.io_from:
            return None
        value = {"io": self.io_sps, "synthetic": self.synthetic_sps, "full": self.full_sps}[phase]
        return value if value is not None and value > 0 else None

    def trials_of(self, phase: str) -> list[float]:
        """The phase's trial samples/s, in order."""
        if phase == "io" and self.io_from:
            return []
        return list(
            {
                "io": self.io_sps_trials,
                "synthetic": self.synthetic_sps_trials,
                "full": self.full_sps_trials,
            }[phase]
        )

    def to_journal(self) -> dict[str, Any]:
        """Its journal line: its own fields first (stage, variant, config, status, ...), as
        a line read them before its figures were declared apart, then its figures."""
        data = dataclasses.asdict(self)
        data["status"] = self.status.value
        data.pop("replayed", None)  # where it came from this time, not what it measured
        figures = set(figure_names())
        own = [f.name for f in dataclasses.fields(self) if f.name in data and f.name not in figures]
        return {**{name: data.pop(name) for name in own}, **data}

    @classmethod
    def from_journal(cls, data: dict[str, Any]) -> ProbeResult:
        """A journal line as a result, each field checked against its declared type (a
        null number is a NaN or an infinity as journaled; a field this tuneup does not
        know, a newer one's, is left out).

        Raises:
            KeyError: a field every line has is missing.
            TypeError: a field of the wrong kind, named with the kind it must be.
            ValueError: a status tuneup does not know.
        """
        hints = _journal_hints()
        values = {k: v for k, v in data.items() if k in hints}
        for name in ("status", "stage", "variant", "config"):
            if name not in values:
                raise KeyError(name)
        for name, value in values.items():
            if not _fits(value, hints[name]):
                raise TypeError(f"{name} is {_json_kind(value)}, not {_kind_of(hints[name])}")
            values[name] = _restored(value, hints[name])
        if values.get("wall_s") is None:  # a NaN as journaled: unknown, as an older line's
            values.pop("wall_s", None)
        values["status"] = Status(values["status"])
        if isinstance(values.get("contention"), dict):
            values["contention"] = Contention.from_dict(values["contention"])
        return cls(**values)


@functools.cache
def _journal_hints() -> dict[str, Any]:
    """Each field's declared type, its figures' too (the `KW_ONLY` marker is no field)."""
    names = {f.name for f in dataclasses.fields(ProbeResult)}
    return {k: v for k, v in typing.get_type_hints(ProbeResult).items() if k in names}


def _fits(value: Any, hint: Any) -> bool:
    """Whether a JSON value is of the declared type `hint` (a number may be null: the
    journal writes a NaN or an infinity so)."""
    origin, args = typing.get_origin(hint), typing.get_args(hint)
    if hint is Any:
        return True
    if origin in (typing.Union, types.UnionType):
        return any(_fits(value, arg) for arg in args)
    if hint is type(None):
        return value is None
    if hint is bool:
        return isinstance(value, bool)
    if hint is int:
        return isinstance(value, int) and not isinstance(value, bool)
    if hint is float:
        return value is None or (isinstance(value, (int, float)) and not isinstance(value, bool))
    if hint is str:
        return isinstance(value, str)
    if hint is Status:
        return value in {s.value for s in Status}
    if origin in (list, Sequence):
        return isinstance(value, list) and all(_fits(v, args[0]) for v in value)
    if origin in (dict, Mapping):
        return isinstance(value, dict) and all(
            isinstance(k, str) and _fits(v, args[1]) for k, v in value.items()
        )
    if dataclasses.is_dataclass(hint):
        known = typing.get_type_hints(hint)
        return isinstance(value, dict) and all(
            _fits(v, known[k]) for k, v in value.items() if k in known
        )
    return True


def _restored(value: Any, hint: Any) -> Any:
    """Numbers the journal wrote as null (a NaN or infinity) in a list of numbers, as NaNs
    again (the statistics pass over them)."""
    if typing.get_origin(hint) in (list, Sequence) and typing.get_args(hint)[0] is float:
        return [math.nan if v is None else v for v in value]
    return value


def _kind_of(hint: Any) -> str:
    """A declared type in words, for the line that says a field is of the wrong kind."""
    origin, args = typing.get_origin(hint), typing.get_args(hint)
    if origin in (typing.Union, types.UnionType):
        return " or ".join(_kind_of(a) for a in args)
    if origin in (list, Sequence):
        return f"a list of {_kind_of(args[0]).removeprefix('a ')}s"
    if origin in (dict, Mapping):
        return "a mapping"
    if hint is Status:
        return "a status (" + ", ".join(s.value for s in Status) + ")"
    names = {bool: "true or false", int: "a whole number", float: "a number", str: "text"}
    return names.get(hint, "null" if hint is type(None) else "a mapping")


def _json_kind(value: Any) -> str:
    if value is None:
        return "null"
    if isinstance(value, bool):
        return f"{str(value).lower()}"
    if isinstance(value, (int, float)):
        return f"the number {value}"
    if isinstance(value, str):
        return f"the text {value[:40]!r}"
    return "a list" if isinstance(value, list) else "a mapping"


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
            the samples/s of its judged phase below which it is out of the running,
            so a backend may stop it early; None: measure it whole.
        pair: set by the search on both probes of an A/B pair: the pair's number
            in the session; None: not in a pair.
        judged: the phase whose figure decides this probe: "io" for a loader knob,
            "synthetic" for a compute knob, "full" otherwise (the stage declares it).
        whole: measure every phase (the default: the baseline, an adopted
            configuration's check of FULL against min(IO, SYNTHETIC)); False: the
            judged phase alone (a stage's screens and pairs).
        loss: record the fixed-seed loss (the default); False for a configuration
            whose loss an earlier probe of the session recorded (the same seed gives
            the same curve): its probe saves the loss steps.
        trial_noise: how closely this probe's trials must agree, where probes of its
            phase vary by more than trials do (measuring a probe finer than probes
            differ buys nothing); None: the budget's.
        profile: profile a few of its FULL steps after its trials: where the step's
            time goes (the baseline, an adopted configuration, the recommendation).
        trial_s: this probe's trial length where the session shortened it to fit its
            time left (never below the plan's floor); None: the budget's.
    """

    label: str
    values: dict[str, Any]
    ranks: int | None = None
    reference: bool = False
    stop_below_sps: float | None = None
    pair: int | None = None
    judged: str = "full"
    whole: bool = True
    loss: bool = True
    trial_noise: float | None = None
    profile: bool = False
    trial_s: float | None = None
