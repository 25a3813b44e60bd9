"""How long a ladder will take, before it runs: a rough, documented model.

The model, so the number can be checked by hand:

* probes = baseline repeats (2) + for every stage with candidates: its
  candidates, the incumbent measured before and after them (2), and one
  more pair for the comparison that decides (`PAIRS_PER_STAGE`, 2 probes)
  + 2 x confirm pairs (3) (none of these when no stage has candidates).
  The search (tuning/search.py) runs more pairs for a close call, and fewer probes
  when the last one was already the incumbent.
* one probe = process start-up + (loss steps + the warm-up cap + 3 phases x
  T trials x K steps) x the step time, never more than the budget's per-probe
  limit (the worker is stopped there).

The step time and start-up are guesses (`StepModel`): the real ones are what
the ladder measures. Pure: values in, values out.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from dataclasses import dataclass

from tuneup.probe.types import PHASES, Budget

BASELINE_REPEATS = 2
CONFIRM_PAIRS = 3
ANCHORS_PER_STAGE = 2  # the incumbent before and after a stage's candidates
PAIRS_PER_STAGE = 1  # the pairs a decision usually takes beyond the screen's own
MIN_TRIALS = 2  # below two trials there is no spread to judge the noise by


@dataclass(frozen=True)
class StepModel:
    """The guessed cost of a probe: seconds to start one, and seconds per training step."""

    startup_s: float = 30.0
    step_s: float = 0.5


def probe_steps(budget: Budget) -> int:
    """Steps one probe runs at most: the loss record, the warm-up cap and every phase's trials."""
    return (
        budget.loss_steps
        + budget.warmup_max_steps
        + len(PHASES) * budget.trials * budget.trial_steps
    )


def probe_seconds(budget: Budget, model: StepModel) -> float:
    """One probe's wall time, capped by the budget's per-probe limit."""
    return min(budget.limit_s, model.startup_s + probe_steps(budget) * model.step_s)


def probe_count(
    candidate_counts: Sequence[int],
    *,
    baseline_repeats: int = BASELINE_REPEATS,
    confirm_pairs: int = CONFIRM_PAIRS,
) -> int:
    """Probes the ladder runs: baselines, each stage's screen and pairs, the confirmation."""
    active = [n for n in candidate_counts if n > 0]
    if not active:
        return baseline_repeats  # nothing to adopt: no confirmation, no pairs
    per_stage = ANCHORS_PER_STAGE + 2 * PAIRS_PER_STAGE
    return baseline_repeats + sum(active) + per_stage * len(active) + 2 * confirm_pairs


def estimate_ladder_seconds(
    candidate_counts: Sequence[int],
    budget: Budget,
    model: StepModel | None = None,
    *,
    baseline_repeats: int = BASELINE_REPEATS,
    confirm_pairs: int = CONFIRM_PAIRS,
) -> float:
    """The ladder's expected wall time in seconds.

    Args:
        candidate_counts: each chosen stage's number of candidates (0 for a skipped one).
        budget: the preset's per-probe budget (T, K, warm-up cap, loss steps, limit).
        model: start-up and step-time guesses; `StepModel()` when None.
        baseline_repeats, confirm_pairs: as the session runs them.
    """
    count = probe_count(
        candidate_counts, baseline_repeats=baseline_repeats, confirm_pairs=confirm_pairs
    )
    return count * probe_seconds(budget, model or StepModel())


def duration_text(seconds: float) -> str:
    """Minutes or hours as people read them: "45 s", "12 min", "2 h 05 min"."""
    if seconds < 60:
        return f"{seconds:.0f} s"
    minutes = round(seconds / 60)
    if minutes < 60:
        return f"{minutes} min"
    return f"{minutes // 60} h {minutes % 60:02d} min"


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


def trim(
    plans: Sequence[tuple[str, int]],
    budget: Budget,
    limit_s: float | None,
    model: StepModel | None = None,
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
    """
    kept = list(plans)

    def cost(chosen: list[tuple[str, int]], b: Budget) -> float:
        return estimate_ladder_seconds([n for _, n in chosen], b, model)

    if limit_s is None:
        return Trimmed(tuple(n for n, _ in kept), budget, cost(kept, budget), True)
    while kept and cost(kept, budget) > limit_s:
        kept.pop()
    while cost(kept, budget) > limit_s and budget.trials > MIN_TRIALS:
        budget = dataclasses.replace(budget, trials=budget.trials - 1)
    estimate = cost(kept, budget)
    return Trimmed(tuple(n for n, _ in kept), budget, estimate, estimate <= limit_s)
