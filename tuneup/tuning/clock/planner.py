"""A ladder planned to a time budget: what fits, what it leaves out, and why.

Before the first probe the ladder is priced with the estimate's model
(tuneup.costs.estimate: the same model as the time left and the GPU twin).
Where it would not fit the time budget (the user's `--budget`, or the time left
in the allocation):

1. the trials are shortened, halving ``trial_s`` down to a quarter of the
   preset's (a trial still holds whole steps: the plan takes at least one);
2. then stages are left out, the lowest expected gain per second first (each
   stage declares its expected gain: TF32 off, which shows what TF32 is worth,
   expects none and goes first; the loader, which the tutorial took from 90 to
   400 samples/s, goes last). Before a whole stage goes, its dearest candidate
   may (`dearer_first`: the one whose cuDNN search runs at the largest batch),
   each candidate taken to bring an equal share of its stage's gain: batch 256's
   search alone took 162 s of the H200's 731 s ladder (2026-11-27c), where batch
   128's took 66 s and won, so a budget that leaves 256 out keeps the answer.

The baseline and the confirmation are always kept: without them there is no
answer. A limit that not even the baseline's first probe fits at the shortest
trials (`LadderPlan.baseline_fits`) is refused before anything runs. The plan says
what fits and what it leaves out before the first probe (`LadderPlan.lines`),
and the session keeps to it (session.py).

Pure: values in, values out.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from dataclasses import dataclass

from tuneup.costs.estimate import (
    BASELINE_REPEATS,
    CONFIRM_PAIRS,
    Habits,
    ProbeCosts,
    StageShape,
    ladder_shape,
    searches_first,
    stage_shape,
)
from tuneup.costs.one_time import conv_key, kernels_change
from tuneup.probe.batches import batch_ratio
from tuneup.probe.durations import duration_text
from tuneup.probe.types import Candidate, ProbeBudget

SHORTEST_TRIAL_SHARE = 0.25
"""Trials are never shortened below this share of the preset's trial length."""

# A probe is started only with this much time to spare before the allocation's end (SLURM
# then sends SIGTERM and, KillWait later, SIGKILL); a probe's price is stretched by
# TIME_STRETCH before it is held against what is left (time_gate.py).
TIME_MARGIN_S = 15.0
TIME_STRETCH = 1.25

BUDGET = "budget"  # the limit is the user's --budget
ALLOCATION = "allocation"  # the limit is the allocation's end (SLURM's time limit)


def limit_words(whose: str, seconds: float | None = None) -> str:
    """ "your 10 min budget", or "the allocation" (with its time left, where given)."""
    if whose == ALLOCATION:
        return "the allocation" + (
            f" ({duration_text(seconds)} left)" if seconds is not None else ""
        )
    return f"your {duration_text(seconds)} budget" if seconds is not None else "your budget"


def longer_words(whose: str) -> str:
    """What runs what a limit left out: a longer --budget, or a longer allocation."""
    if whose == ALLOCATION:
        return "a longer allocation, or --resume in the next one, runs them"
    return "a longer --budget runs them"


@dataclass(frozen=True)
class LadderPlan:
    """A ladder fitted to a time limit.

    Attributes:
        stages: the stages kept, in ladder order.
        left_out: the stages left out, in ladder order, each with its expected gain
            and its estimated seconds.
        budget: the probe budget to run with (its trials maybe shortened).
        estimate_s: the kept ladder's estimated wall time.
        limit_s: the time it had to fit (None: no limit).
        whose: BUDGET (the user's --budget) or ALLOCATION (the allocation's time left).
        shortened: the trials were shortened to fit.
        baseline_s: the baseline's first probe at the shortest trials, stretched as the
            session prices a probe: what no limit may be under (the session refuses
            before any probe; its repeats go where they do not fit).
    """

    stages: tuple[str, ...]
    left_out: tuple[tuple[str, float, float], ...]
    budget: ProbeBudget
    estimate_s: float
    limit_s: float | None
    shortened: bool = False
    baseline_s: float = 0.0
    whose: str = BUDGET
    trimmed: tuple[tuple[str, tuple[str, ...], float], ...] = ()

    @property
    def baseline_fits(self) -> bool:
        return self.limit_s is None or self.baseline_s <= self.limit_s

    @property
    def fits(self) -> bool:
        return self.limit_s is None or self.estimate_s <= self.limit_s

    def reason(self, stage: str) -> str | None:
        """Why `stage` is left out, in words; None when it is kept."""
        for name, gain, seconds in self.left_out:
            if name == stage:
                return (
                    f"left out to fit {limit_words(self.whose, self.limit_s or 0)} "
                    f"(expected {100 * gain:+.0f}%, about {duration_text(seconds)})"
                )
        return None

    def left_of(self, stage: str) -> tuple[str, ...]:
        """The labels of `stage`'s candidates left out to fit (its dearest); () for none."""
        return next((labels for name, labels, _ in self.trimmed if name == stage), ())

    def trim_reason(self, stage: str) -> str:
        """Why `stage`'s dearest candidates are left out, in words."""
        seconds = next((s for name, _, s in self.trimmed if name == stage), 0.0)
        return (
            f"left out to fit {limit_words(self.whose, self.limit_s or 0)} "
            f"(its dearest candidate(s), about {duration_text(seconds)})"
        )

    def lines(self, total_stages: int) -> list[str]:
        """What fits and what is left out, for the user before the first probe."""
        if self.limit_s is None:
            return [
                f"ladder: {len(self.stages)} stage(s), estimated {duration_text(self.estimate_s)}"
            ]
        said = (
            f"{'time budget' if self.whose == BUDGET else 'time left in the allocation'} "
            f"{duration_text(self.limit_s)}: {len(self.stages)} of "
            f"{total_stages} stage(s) fit, estimated {duration_text(self.estimate_s)}"
        )
        if self.shortened:
            said += f" with trials of {self.budget.trial_s:g} s"
        lines = [said]
        if self.left_out:
            lines.append(
                "left out: "
                + ", ".join(
                    f"{name} (expected {100 * gain:+.0f}%, about {duration_text(seconds)})"
                    for name, gain, seconds in self.left_out
                )
            )
        for name, labels, seconds in self.trimmed:
            lines.append(
                f"left out of {name}: {', '.join(labels)} (its dearest, about "
                f"{duration_text(seconds)}; the stage runs its other candidates)"
            )
        if not self.fits and self.stages:
            lines.append(
                "even the baseline and the confirmation alone take longer: the session stops "
                f"at {limit_words(self.whose)}'s end with the best configuration confirmed by then"
            )
        return lines


def plan_ladder(
    stages: Sequence[StageShape],
    budget: ProbeBudget,
    costs: ProbeCosts,
    limit_s: float | None,
    *,
    habits: Habits | None = None,
    baseline_repeats: int = BASELINE_REPEATS,
    confirm_pairs: int = CONFIRM_PAIRS,
    shortest_trial_s: float | None = None,
    whose: str = BUDGET,
) -> LadderPlan:
    """Fit the ladder to `limit_s` (the module docstring's rules); None keeps everything.

    `shortest_trial_s`: the floor of the trials (default: SHORTEST_TRIAL_SHARE of
    `budget`'s); a resumed session, whose recorded budget may be shortened already, gives
    its preset's floor, so its trials never go below it.
    """
    habits = habits or Habits()
    floor = budget.trial_s * SHORTEST_TRIAL_SHARE if shortest_trial_s is None else shortest_trial_s

    def cost(kept: Sequence[StageShape], b: ProbeBudget) -> float:
        shape = ladder_shape(
            kept, baseline_repeats=baseline_repeats, confirm_pairs=confirm_pairs, habits=habits
        )
        return shape.seconds(b, costs)

    kept = [s for s in stages if s.candidates > 0]
    shortest = dataclasses.replace(budget, trial_s=min(budget.trial_s, floor))
    first = ladder_shape([], baseline_repeats=1, confirm_pairs=0, habits=habits)
    baseline_s = TIME_STRETCH * first.seconds(shortest, costs)
    if limit_s is None or cost(kept, budget) <= limit_s:
        return LadderPlan(
            _names(stages, kept),
            (),
            budget,
            cost(kept, budget),
            limit_s,
            baseline_s=baseline_s,
            whose=whose,
        )
    shortened = budget
    while cost(kept, shortened) > limit_s:
        shorter = dataclasses.replace(shortened, trial_s=shortened.trial_s / 2)
        if shorter.trial_s < floor - 1e-12:
            break
        shortened = shorter
    left: list[StageShape] = []
    while kept and cost(kept, shortened) > limit_s:
        index, fewer = _least_loss(kept, stages, shortened, costs, habits)
        if fewer is None:
            left.append(kept.pop(index))
        else:
            kept[index] = fewer
    while shortened.trial_s < budget.trial_s:  # what was left out may leave room for them
        longer = dataclasses.replace(shortened, trial_s=min(budget.trial_s, shortened.trial_s * 2))
        if cost(kept, longer) > limit_s:
            break
        shortened = longer
    left_out, trimmed = _what_went(stages, kept, left, shortened, costs, habits)
    return LadderPlan(
        _names(stages, kept),
        left_out,
        shortened,
        cost(kept, shortened),
        limit_s,
        shortened=shortened != budget,
        baseline_s=baseline_s,
        whose=whose,
        trimmed=trimmed,
    )


def _what_went(
    stages: Sequence[StageShape],
    kept: Sequence[StageShape],
    left: Sequence[StageShape],
    budget: ProbeBudget,
    costs: ProbeCosts,
    habits: Habits,
) -> tuple[tuple[tuple[str, float, float], ...], tuple[tuple[str, tuple[str, ...], float], ...]]:
    """The stages left out (name, expected gain, seconds), in ladder order, and the
    candidates left out of those kept (name, labels, seconds saved)."""
    order = {s.name: i for i, s in enumerate(stages)}
    whole = {s.name: s for s in stages}
    left_out = tuple(
        (s.name, s.expected_gain, _stage_seconds(whole[s.name], budget, costs, habits))
        for s in sorted(left, key=lambda s: order[s.name])
    )
    trimmed = tuple(
        (
            s.name,
            s.left,
            _stage_seconds(whole[s.name], budget, costs, habits)
            - _stage_seconds(s, budget, costs, habits),
        )
        for s in kept
        if s.left
    )
    return left_out, trimmed


def _least_loss(
    kept: Sequence[StageShape],
    stages: Sequence[StageShape],
    budget: ProbeBudget,
    costs: ProbeCosts,
    habits: Habits,
) -> tuple[int, StageShape | None]:
    """What goes next: a kept stage whole (None), or its next dearest candidate (the shape
    without it): the least expected gain lost per second saved, each candidate bringing an
    equal share of its stage's gain; among equals, the later stage, and a whole stage before
    a candidate of it."""
    whole = {s.name: s for s in stages}
    options: list[tuple[float, int, int, StageShape | None]] = []
    for index, shape in enumerate(kept):
        full = whole[shape.name]
        gain = max(shape.expected_gain, 0.0)
        seconds = _stage_seconds(shape, budget, costs, habits)
        # what is left of a stage brings its candidates' shares alone
        options.append(
            (gain * shape.candidates / max(full.candidates, 1) / seconds, -index, 0, None)
        )
        fewer = full.fewer[len(shape.left)] if len(shape.left) < len(full.fewer) else None
        if fewer is not None:
            saved = seconds - _stage_seconds(fewer, budget, costs, habits)
            if saved > 1e-6:
                options.append((gain / max(full.candidates, 1) / saved, -index, 1, fewer))
    _, at, _, chosen = min(options, key=lambda o: o[:3])
    return -at, chosen


def dearer_first(
    candidates: Sequence[Candidate], batch: float | None, at: float | None = None
) -> list[Candidate]:
    """A stage's candidates dearer to start than its cheapest, the dearest first: those
    whose new kernels search (a new conv key, a compile) before those that do not, at the
    largest batch first (a cuDNN search grows with the batch: 33, 66 and 162 s at 64, 128
    and 256 on the H200); among equals the later one. Candidates priced alike (bf16, fp16,
    bf16 + channels_last) are none: which of them brings the gain no price says."""

    def price(cand: Candidate) -> tuple[bool, bool, float]:
        new = kernels_change(cand.values)
        searches = new and searches_first(conv_key(cand.values) != conv_key({}), cand.values)
        return new, searches, batch_ratio(cand.values, batch, at)

    if not candidates:
        return []
    cheapest = min(price(c) for c in candidates)
    ranked = sorted(enumerate(candidates), key=lambda ic: (price(ic[1]), ic[0]), reverse=True)
    return [cand for _, cand in ranked if price(cand) > cheapest]


def _stage_seconds(
    stage: StageShape, budget: ProbeBudget, costs: ProbeCosts, habits: Habits
) -> float:
    return max(stage_shape(stage, habits).seconds(budget, costs), 1e-9)


def _names(stages: Sequence[StageShape], kept: Sequence[StageShape]) -> tuple[str, ...]:
    chosen = {s.name for s in kept}
    return tuple(s.name for s in stages if s.name in chosen)
