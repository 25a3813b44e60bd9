"""How long a ladder will take: a documented model, fed by what this machine measured.

The model, so the number can be checked by hand:

* probes = baseline repeats (2) + for every stage with candidates: its
  candidates, the incumbent measured before and after them (2), and the pairs
  its decision takes (`pairs_per_stage`, 2 probes each) + 2 x confirm pairs (3)
  (none of these when no stage has candidates). Until a session has decided a
  stage, a stage takes PAIRS_PER_STAGE pairs; then what its stages took
  (`pairs_seen`: a close call on a noisy machine takes many more).
* probes come in two kinds (`LadderShape`): those that start a process (each
  baseline probe, the first of each confirmation pair, every probe of a trainer
  that cannot share one) and those a serving process runs (a stage's probes,
  the second of each confirmation pair).
* a probe's cost (`ProbeCosts`): before any probe ran, StepModel's guess:
  start-up + (loss steps + the warm-up cap + 3 phases x T trials x K steps) x
  the step time, never more than the budget's per-probe limit, and for a probe
  in a serving process its own (smaller) start-up. As soon as probes finish,
  the median wall time of each kind on this machine (`measured_costs`): start
  and set-up, warm-up, trials and all, as they really were.

Pure: values in, values out.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from dataclasses import dataclass

from tuneup.probe.stats import median
from tuneup.probe.types import PHASES, Budget, ProbeResult

BASELINE_REPEATS = 2
CONFIRM_PAIRS = 3
ANCHORS_PER_STAGE = 2  # the incumbent before and after a stage's candidates
# The pairs a decision takes beyond its screen, before any was seen: cpu-smoke ladders on
# 2 cores took 4.5 to 7.6 a stage (bench/ladder_speed.py's runs); a quieter machine
# takes fewer, and a session learns its own (pairs_seen) and keeps it for the next.
PAIRS_PER_STAGE = 5.0
PRIOR_WEIGHT = 2.0  # the prior counts as this many stages when the session's own are few
MIN_TRIALS = 2  # below two trials there is no spread to judge the noise by


@dataclass(frozen=True)
class StepModel:
    """The guessed cost of a probe: seconds to start one, and seconds per training step.

    `served_startup_s`: seconds to start a probe in a process that ran one
    before (the trainer shares processes); None: every probe starts its own.
    """

    startup_s: float = 30.0
    step_s: float = 0.5
    served_startup_s: float | None = None


@dataclass(frozen=True)
class ProbeCosts:
    """Seconds of wall time one probe takes: one that starts its process, one a serving
    process runs; `measured` when they come from this machine's probes, not a guess."""

    fresh_s: float
    served_s: float
    measured: bool = False


@dataclass(frozen=True)
class LadderShape:
    """The probes a ladder runs (or has left), by kind: expected counts, so fractional."""

    fresh: float
    served: float

    @property
    def probes(self) -> int:
        return round(self.fresh + self.served)

    def seconds(self, costs: ProbeCosts) -> float:
        return self.fresh * costs.fresh_s + self.served * costs.served_s


def probe_steps(budget: Budget) -> int:
    """Steps one probe runs at most: the loss record, the warm-up cap and every phase's trials."""
    return (
        budget.loss_steps
        + budget.warmup_max_steps
        + len(PHASES) * budget.trials * budget.trial_steps
    )


def probe_seconds(budget: Budget, model: StepModel) -> float:
    """One probe's wall time in a process of its own, capped by the budget's per-probe limit."""
    return min(budget.limit_s, model.startup_s + probe_steps(budget) * model.step_s)


def guess_costs(budget: Budget, model: StepModel) -> ProbeCosts:
    """StepModel's guess of both kinds of probe (the same when the trainer shares no process)."""
    fresh = probe_seconds(budget, model)
    if model.served_startup_s is None:
        return ProbeCosts(fresh, fresh)
    served = min(budget.limit_s, model.served_startup_s + probe_steps(budget) * model.step_s)
    return ProbeCosts(fresh, served)


def measured_costs(results: Sequence[ProbeResult], fallback: ProbeCosts) -> ProbeCosts:
    """The median wall time of each kind among the probes that ran ok; `fallback` where none.

    A kind not measured yet is derived from the other: a served probe costs a
    fresh one less its process start (`spawn`), where the trainer shares processes
    at all (`fallback` says: its served cost is below its fresh one); a fresh one
    costs a served one plus the guessed difference.
    """
    ran = [r for r in results if r.ok and r.wall_s > 0]
    fresh = [r.wall_s for r in ran if r.served_before == 0]
    served = [r.wall_s for r in ran if r.served_before > 0]
    if not fresh and not served:
        return fallback
    shares = fallback.served_s < fallback.fresh_s
    if fresh and served:
        return ProbeCosts(median(fresh), median(served), measured=True)
    if fresh:
        spawns = [r.one_time_s["spawn"] for r in ran if "spawn" in r.one_time_s]
        start = median(spawns) if spawns and shares else 0.0
        return ProbeCosts(median(fresh), max(median(fresh) - start, 0.0), measured=True)
    gap = fallback.fresh_s - fallback.served_s
    return ProbeCosts(median(served) + gap, median(served), measured=True)


def stage_probes(candidates: int, pairs_per_stage: float) -> float:
    """Probes one stage with candidates is expected to take: screen, anchors and pairs."""
    return candidates + ANCHORS_PER_STAGE + 2 * pairs_per_stage


def pairs_seen(
    stages: Sequence[tuple[int, int]],
    prior: float = PAIRS_PER_STAGE,
    weight: float = PRIOR_WEIGHT,
) -> float:
    """The pairs a stage's decision takes here, from the stages decided so far.

    Args:
        stages: (probes it took, its candidates) of each decided stage with candidates.
        prior: the pairs assumed before any stage was decided.
        weight: how many stages the prior counts as, so one stage does not swing it.
    """
    seen = [max(0.0, (n - c - ANCHORS_PER_STAGE) / 2) for n, c in stages if c > 0]
    return (prior * weight + sum(seen)) / (weight + len(seen))


def ladder_shape(
    candidate_counts: Sequence[int],
    *,
    baseline_repeats: int = BASELINE_REPEATS,
    confirm_pairs: int = CONFIRM_PAIRS,
    pairs_per_stage: float = PAIRS_PER_STAGE,
    shares_processes: bool = True,
) -> LadderShape:
    """The probes a ladder runs, by kind (the module docstring's model)."""
    active = [n for n in candidate_counts if n > 0]
    if not active:
        return LadderShape(baseline_repeats, 0.0)  # nothing to adopt: no confirmation, no pairs
    stages = sum(stage_probes(n, pairs_per_stage) for n in active)
    shape = LadderShape(baseline_repeats + confirm_pairs, stages + confirm_pairs)
    return shape if shares_processes else LadderShape(shape.fresh + shape.served, 0.0)


def probe_count(
    candidate_counts: Sequence[int],
    *,
    baseline_repeats: int = BASELINE_REPEATS,
    confirm_pairs: int = CONFIRM_PAIRS,
    pairs_per_stage: float = PAIRS_PER_STAGE,
) -> int:
    """Probes the ladder runs: baselines, each stage's screen and pairs, the confirmation."""
    return ladder_shape(
        candidate_counts,
        baseline_repeats=baseline_repeats,
        confirm_pairs=confirm_pairs,
        pairs_per_stage=pairs_per_stage,
    ).probes


def estimate_ladder_seconds(
    candidate_counts: Sequence[int],
    budget: Budget,
    model: StepModel | None = None,
    *,
    costs: ProbeCosts | None = None,
    pairs_per_stage: float = PAIRS_PER_STAGE,
    baseline_repeats: int = BASELINE_REPEATS,
    confirm_pairs: int = CONFIRM_PAIRS,
    shares_processes: bool = True,
) -> float:
    """The ladder's expected wall time in seconds.

    Args:
        candidate_counts: each chosen stage's number of candidates (0 for a skipped one).
        budget: the preset's per-probe budget (T, K, warm-up cap, loss steps, limit).
        model: start-up and step-time guesses; `StepModel()` when None.
        costs: what probes cost on this machine, when measured (`measured_costs`, or a
            session's record); else the model's guess for `budget`.
        pairs_per_stage: the pairs a stage's decision takes (`pairs_seen`).
        baseline_repeats, confirm_pairs: as the session runs them.
        shares_processes: probes may share a worker process (one rank each, and
            fresh processes not asked for); else every probe costs a fresh one.
    """
    model = model or StepModel()
    if costs is None:
        costs = guess_costs(budget, model)
    shape = ladder_shape(
        candidate_counts,
        baseline_repeats=baseline_repeats,
        confirm_pairs=confirm_pairs,
        pairs_per_stage=pairs_per_stage,
        shares_processes=shares_processes and costs.served_s < costs.fresh_s,
    )
    return shape.seconds(costs)


def duration_text(seconds: float) -> str:
    """As people read it: "45 s", "3 min 20 s", "12 min", "2 h 05 min"."""
    if seconds < 59.5:
        return f"{seconds:.0f} s"
    if seconds < 9.5 * 60:
        minutes, rest = divmod(round(seconds), 60)
        return f"{minutes} min {rest:02d} s" if rest else f"{minutes} min"
    minutes = round(seconds / 60)
    if minutes < 60:
        return f"{minutes} min"
    return f"{minutes // 60} h {minutes % 60:02d} min"


def time_left_text(seconds: float, measured: bool) -> str:
    """ "about 3 min left", and "(a guess)" while no probe of this machine has said better."""
    said = f"about {duration_text(max(seconds, 0.0))} left"
    return said if measured else f"{said} (a guess until the first probes finish)"


def time_limit(budget_s: float | None, allocation_left_s: float | None) -> float | None:
    """The tighter of the user's time budget and the allocation's remaining time."""
    limits = [s for s in (budget_s, allocation_left_s) if s is not None]
    return min(limits) if limits else None


def fits(
    estimate_s: float, budget_s: float | None, allocation_left_s: float | None
) -> tuple[bool, str]:
    """Whether the ladder fits the time budget and the allocation, and a sentence saying so."""
    said = f"estimated {duration_text(estimate_s)}"
    if budget_s is not None and estimate_s > budget_s:
        return False, f"{said}: over the {duration_text(budget_s)} time budget"
    if allocation_left_s is not None and estimate_s > allocation_left_s:
        return False, (
            f"{said}: more than the {duration_text(allocation_left_s)} left in the allocation"
        )
    limits = []
    if budget_s is not None:
        limits.append(f"the {duration_text(budget_s)} budget")
    if allocation_left_s is not None:
        limits.append(f"the {duration_text(allocation_left_s)} left in the allocation")
    return True, f"{said}" + (f", fits {' and '.join(limits)}" if limits else "")


@dataclass(frozen=True)
class Trimmed:
    """What `trim` kept: the stage names, the budget (T may be lower) and the new estimate."""

    stages: tuple[str, ...]
    budget: Budget
    estimate_s: float
    fits: bool


def rescaled(
    costs: ProbeCosts, measured_at: Budget, budget: Budget, model: StepModel
) -> ProbeCosts:
    """Costs measured under one budget, carried to another by the model's ratio of the two."""
    if budget == measured_at:
        return costs
    then, now = guess_costs(measured_at, model), guess_costs(budget, model)
    return dataclasses.replace(
        costs,
        fresh_s=costs.fresh_s * now.fresh_s / then.fresh_s,
        served_s=costs.served_s * now.served_s / then.served_s,
    )


def trim(
    plans: Sequence[tuple[str, int]],
    budget: Budget,
    limit_s: float | None,
    model: StepModel | None = None,
    *,
    costs: ProbeCosts | None = None,
    pairs_per_stage: float = PAIRS_PER_STAGE,
    shares_processes: bool = True,
) -> Trimmed:
    """Drop the last stages, then lower T, until the ladder fits `limit_s`.

    The last stages go first because the ladder's order puts the cheapest,
    most reliable wins early. When even the baseline alone does not fit, T is
    lowered down to `MIN_TRIALS`; `fits` is False if that is still too long.

    Args:
        plans: (stage name, candidate count) in ladder order.
        budget: the per-probe budget.
        limit_s: the time available (see `time_limit`); None keeps everything.
        model: start-up and step-time guesses.
        costs, pairs_per_stage: what this machine measured (under `budget`), when known.
        shares_processes: as for estimate_ladder_seconds.
    """
    kept = list(plans)
    model = model or StepModel()

    def cost(chosen: list[tuple[str, int]], b: Budget) -> float:
        measured = None if costs is None else rescaled(costs, budget, b, model)
        return estimate_ladder_seconds(
            [n for _, n in chosen],
            b,
            model,
            costs=measured,
            pairs_per_stage=pairs_per_stage,
            shares_processes=shares_processes,
        )

    if limit_s is None:
        return Trimmed(tuple(n for n, _ in kept), budget, cost(kept, budget), True)
    while kept and cost(kept, budget) > limit_s:
        kept.pop()
    while cost(kept, budget) > limit_s and budget.trials > MIN_TRIALS:
        budget = dataclasses.replace(budget, trials=budget.trials - 1)
    estimate = cost(kept, budget)
    return Trimmed(tuple(n for n, _ in kept), budget, estimate, estimate <= limit_s)
