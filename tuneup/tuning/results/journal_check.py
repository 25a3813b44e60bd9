"""Whether a journal line belongs to its session, and could have been measured, checked
as it is read.

A line is typed by `ProbeResult.from_journal` (its fields and their kinds); here its
figures are held to what a probe can measure (`impossible_figure`), and the line to
the session.json beside it: a probe of this session carries its id, names a stage
this session may run, and differs from its base config only in knobs a stage sets.
A line that fails (copied from another session's journal, forged, or damaged) is
moved aside by the journal's repair, never replayed.
"""

from __future__ import annotations

import functools
import math
import uuid
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from tuneup.probe.stages import scan_stages, stage_names
from tuneup.probe.targets import split_target_stage
from tuneup.probe.types import BASELINE_STAGE, CONFIRM_STAGE, ProbeResult

SESSION_ID = "id"
"""session.json's key for the session's id, which each probe it journals carries."""


def new_session_id() -> str:
    """A new session's id: twelve hex digits, random."""
    return uuid.uuid4().hex[:12]


@functools.cache
def _tuned_knobs() -> frozenset[str]:
    """Every knob some registered stage sets: the only ones a probe's config may change."""
    stages, _warnings = scan_stages()
    return frozenset(k for stage in stages.values() for k in stage.knobs)


@functools.cache
def _registered() -> frozenset[str]:
    return frozenset(stage_names())


@dataclass(frozen=True)
class SessionFacts:
    """What a journal line must agree with: the session's id, stages and base config."""

    session_id: str = ""
    stages: frozenset[str] = frozenset()
    base: Mapping[str, Any] | None = None

    @classmethod
    def from_session(cls, info: Mapping[str, Any]) -> SessionFacts:
        stages = info.get("stages")
        base = info.get("base_config")
        return cls(
            session_id=str(info.get(SESSION_ID) or ""),
            stages=frozenset(str(s) for s in stages) if isinstance(stages, list) else frozenset(),
            base=base if isinstance(base, Mapping) else None,
        )

    def problem(self, result: ProbeResult) -> str | None:
        """Why `result` is not a probe of this session ("is not this session's (...)");
        None when it may be (a line older than the id is held to its stage and config)."""
        if self.session_id and result.session and result.session != self.session_id:
            return (
                f"is another session's (its id is {result.session}, this session's "
                f"{self.session_id})"
            )
        own = [BASELINE_STAGE, *sorted(self.stages), CONFIRM_STAGE]
        stage, _target = split_target_stage(result.stage)  # data@tutorial: a target's
        if stage not in own and stage not in _registered():
            return (
                f"is not this session's (stage {result.stage!r} is none of its stages: "
                f"{', '.join(own)})"
            )
        if self.base is None:
            return None
        config, base, tuned = result.config, self.base, _tuned_knobs()
        off = sorted(k for k in {*config, *base} if k not in tuned and config.get(k) != base.get(k))
        if not off:
            return None
        more = f" and {len(off) - 1} more knob(s)" if len(off) > 1 else ""
        return (
            f"is another session's ({off[0]} is {config.get(off[0])!r} where this session's "
            f"base has {base.get(off[0])!r}, and no stage sets it{more})"
        )


# What a probe can measure. Above these a figure is damage or forgery, never a machine: no
# trainer reads a trillion samples a second (a GPU-resident loader reads millions), and no
# probe, warm-up or compile runs for four months.
MAX_RATE = 1e12
MAX_SECONDS = 1e7
_RATES = ("io_sps", "synthetic_sps", "full_sps")
_RATE_LISTS = ("io_sps_trials", "synthetic_sps_trials", "full_sps_trials", "rank_sps")
_SECONDS = ("warmup_s", "timed_s", "wall_s", "compile_cold_s")
_NOT_NEGATIVE = (
    "iqr_pct",
    "break_even_steps",
    "power_mean_w",
    "energy_j_per_sample",
    "mem_peak_mb",
    "gpu_mem_used_mb",
    "scaler_overflows",
    "trials_discarded",
    "far_trials",
    "served_before",
)


def impossible_figure(result: ProbeResult) -> str | None:
    """Why a journaled probe's figures cannot be a measurement ("holds an impossible figure
    (...)"); None when each is in its range. A NaN (journaled as null) is no figure and
    passes: the statistics pass over it.

    The ranges: samples/s (a phase's, a trial's, a rank's) from 0 (nothing measured) to
    MAX_RATE; seconds from 0 to MAX_SECONDS; GPU use 0-100%; counts, spreads, power,
    energy and memory not below 0; ranks at least 1, a straggler one of them.
    """
    checks: list[tuple[str, float | None, float, float, str]] = []
    for name in _RATES:
        checks.append((name, getattr(result, name), 0.0, MAX_RATE, "samples/s"))
    for name in _RATE_LISTS:
        checks += [(name, v, 0.0, MAX_RATE, "samples/s") for v in getattr(result, name)]
    for name in _SECONDS:
        checks.append((name, getattr(result, name), 0.0, MAX_SECONDS, "seconds"))
    for part, seconds in result.one_time_s.items():
        checks.append((f"one_time_s[{part!r}]", seconds, 0.0, MAX_SECONDS, "seconds"))
    for name in _NOT_NEGATIVE:
        checks.append((name, getattr(result, name), 0.0, math.inf, "figures"))
    checks.append(("gpu_util_mean", result.gpu_util_mean, 0.0, 100.0, "percentages"))
    checks.append(("ranks", result.ranks, 1.0, math.inf, "rank counts"))
    checks += [("stragglers", r, 0.0, result.ranks - 1, "ranks") for r in result.stragglers]
    for name, value, low, high, unit in checks:
        if value is None or (isinstance(value, float) and math.isnan(value)):
            continue
        if not low <= value <= high:
            return f"holds an impossible figure ({name} is {value!r}; {_range(unit, low, high)})"
    return None


def _range(unit: str, low: float, high: float) -> str:
    if unit == "ranks":
        return f"its ranks are 0 to {high:.0f}"
    if math.isinf(high):
        return f"{unit} are {low:g} or more"
    return f"{unit} are {low:g} to {high:,.0f}"
