"""A ladder fitted to its time before it runs: the tighter of the user's --budget and the
allocation's time left, the ladder priced as the trainer knows its probes (else this
machine's record, the preset's costs or the trainer's guess), and a limit not even the
baseline fits refused in one line before anything runs.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from tuneup.cluster.job import JobEnv
from tuneup.costs.estimate import ProbeCosts, time_limit
from tuneup.errors import UsageError
from tuneup.hardware.types import MachineInfo
from tuneup.preset.load import ProbePreset
from tuneup.probe.batches import config_batch
from tuneup.probe.durations import duration_text
from tuneup.trainers.adapters import TrainerAdapter
from tuneup.tuning.clock.ladder_record import LadderRecord, machine_tag
from tuneup.tuning.clock.planner import (
    ALLOCATION,
    BUDGET,
    SHORTEST_TRIAL_SHARE,
    TIME_MARGIN_S,
    LadderPlan,
    plan_ladder,
)
from tuneup.tuning.clock.time_left import known_costs, prior_costs, stage_shapes
from tuneup.tuning.search.search_records import StagePlan
from tuneup.tuning.session.engine import Engine

DEFAULT_ROOT = Path("tuneup-results")
EngineFactory = Callable[..., Engine]  # build_engine's signature


@dataclass(frozen=True)
class TimeFit:
    """A ladder fitted to its time limit: the plan, whose limit it is (time_gate.BUDGET or
    ALLOCATION), and the floor of its trials."""

    plan: LadderPlan
    whose: str
    shortest_trial_s: float

    def applied(
        self, preset: ProbePreset, plans: list[StagePlan], notes: list[str]
    ) -> tuple[ProbePreset, list[StagePlan], list[str]]:
        """The preset with the plan's budget, the stages without the dearest candidates it
        left out, and the notes with what the plan says, where a limit applies; all as they
        were where none does."""
        if self.plan.limit_s is None:
            return preset, plans, notes
        runnable = sum(1 for p in plans if p.candidates and not p.skip_reason)
        trimmed = [self.trimmed(p) for p in plans]
        return (
            dataclasses.replace(preset, budget=self.plan.budget),
            trimmed,
            notes + self.plan.lines(runnable),
        )

    def trimmed(self, plan: StagePlan) -> StagePlan:
        """`plan` without the dearest candidates the plan left out of it (by their labels,
        as the plan and summary.json name them), each said in its not_tried; a stage proposed
        again on the incumbent (`refresh`) loses the same ones where it proposes them."""
        left = set(self.plan.left_of(plan.name))
        if not left or plan.skip_reason:
            return plan
        why = self.plan.trim_reason(plan.name)
        refresh = plan.refresh
        gone = [c for c in plan.candidates if c.label in left]
        return dataclasses.replace(
            plan,
            candidates=[c for c in plan.candidates if c.label not in left],
            not_tried=[*plan.not_tried, *(f"{c.label}: {why}" for c in gone)],
            left_for_time=[*plan.left_for_time, *(c.label for c in gone)],
            refresh=None if refresh is None else lambda values: self.trimmed(refresh(values)),
        )


def fit_to_time(
    adapter: TrainerAdapter,
    preset: ProbePreset,
    plans: list[StagePlan],
    base: dict[str, Any],
    machine: MachineInfo,
    job: JobEnv,
    record: LadderRecord,
    shares: bool,
    time_budget_s: float | None,
    shortest_trial_s: float | None,
    known: ProbeCosts | None = None,
) -> TimeFit:
    """The plan that fits the tighter of the user's --budget and the allocation's time left,
    priced as the trainer knows its probes, else as this machine's record, the preset's
    costs or the trainer's guess say.

    Raises:
        UsageError: not even the baseline fits the limit (said before anything runs).
    """
    allocation = job.seconds_left() if job.end_time is not None else None
    # the last probe ends TIME_MARGIN_S before the allocation does (time_gate.py)
    usable = None if allocation is None else max(0.0, allocation - TIME_MARGIN_S)
    limit = time_limit(time_budget_s, usable)
    yours = time_budget_s is not None and (usable is None or time_budget_s <= usable)
    whose = BUDGET if yours or usable is None else ALLOCATION
    known = known or known_costs(adapter, base, preset.budget, machine)
    costs, habits, basis = prior_costs(adapter, preset, machine_tag(machine), record, shares, known)
    shortest = shortest_trial_s or preset.budget.trial_s * SHORTEST_TRIAL_SHARE
    plan = plan_ladder(
        stage_shapes(plans, config_batch(base)),
        preset.budget,
        costs,
        limit,
        habits=habits,
        shortest_trial_s=shortest,
        whose=whose,
    )
    if not plan.baseline_fits:
        given = allocation if whose == ALLOCATION else limit
        raise UsageError(too_short(whose, max(0.0, given or 0.0), plan.baseline_s, basis))
    return TimeFit(plan, whose, shortest)


def job_warnings(job: JobEnv, time_budget_s: float | None) -> list[str]:
    """What the job's variables held that tuneup ignores, one warning line each.

    Raises:
        UsageError: the allocation's end time is unusable and no --budget stands in for
            it: the ladder is fitted to the time left, and fitted blind it would run on
            until SLURM cuts a probe off (a value of SLURM's own is never nan or a year
            past, so the environment is wrong, and a guess would hide it).
    """
    end = job.ignored_value("end_time")
    if end is not None and time_budget_s is None:
        raise UsageError(
            f"{end.line.removesuffix(': ignored')}: the time left in the allocation cannot be "
            f"told; give --budget TIME (e.g. --budget 30m) or unset {end.variable}"
        )
    return [f"warning: {ignored.line}" for ignored in job.ignored]


def too_short(whose: str, limit_s: float, baseline_s: float, basis: str) -> str:
    """The one line that refuses a limit not even the baseline fits, with its remedy."""
    need = duration_text(baseline_s)
    if whose == ALLOCATION:
        return (
            f"the allocation has {duration_text(limit_s)} left, and the baseline's first probe "
            f"alone takes about {need} ({basis}): nothing would be answered; ask for a longer "
            "allocation"
        )
    more = duration_text(60 * math.ceil(baseline_s * 1.5 / 60))
    return (
        f"--budget {duration_text(limit_s)} is shorter than the baseline's first probe alone "
        f"(about {need}, {basis}): nothing would be answered; give --budget {more} or more"
    )
