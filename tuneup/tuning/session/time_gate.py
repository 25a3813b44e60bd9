"""When the next probe may start, and with what trials: the allocation's end and the time budget.

The session asks before every probe it runs (`TimeGate.trials_for`). A probe
is priced by the ladder's clock (time_left.py: this ladder's measured costs, or
before any probe the prior the plan used), stretched by TIME_STRETCH. Where it
does not fit what is left at its planned trials, shorter ones are tried,
halving down to the floor the plan keeps (planner.SHORTEST_TRIAL_SHARE of the
preset's): a probe is never refused for a limit a shorter trial would meet.
Where none fits:

* the allocation's end (SLURM's time limit, which kills) ends the ladder
  (OutOfTime), priced as the slowest probe so far once one ran: a resume in
  the next allocation goes on;
* under the time budget (the user's `--budget`, or the allocation's time left
  when that is shorter), a stage's probe ends its stage (StageCut; the
  confirmation keeps its time), the confirmation's ends the confirmation with
  the pairs it has, and a baseline repeat ends the baseline with the repeats it
  has: the answer is the baseline and whatever fitted. The first baseline
  probe always starts: the plan refused a budget it could not fit before
  anything ran.

The words name whose limit it is: "your budget" (`--budget`) or "the
allocation" (its end, whose remedy is a longer one or `--resume` in the next).
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from typing import Any

from tuneup.config import first_uses
from tuneup.costs.estimate import (
    LadderShape,
    ProbeKind,
    StageShape,
    confirmation_pairs,
    stage_shape,
)
from tuneup.probe.durations import duration_text
from tuneup.probe.types import BASELINE_STAGE, CONFIRM_STAGE, Candidate, ProbeBudget
from tuneup.tuning.clock.planner import BUDGET, TIME_MARGIN_S, TIME_STRETCH, limit_words
from tuneup.tuning.clock.time_left import LadderClock
from tuneup.tuning.search.search_records import StageCut, StagePlan
from tuneup.tuning.session.control import OutOfTime


@dataclass
class TimeGate:
    """The session's clock against its limits.

    Attributes:
        clock: the ladder's clock (it prices the next probe).
        budget: the probe budget the session runs (its planned trials).
        shortest_trial_s: the trials' floor.
        confirm_pairs: the confirmation's fewest pairs (its time is kept back).
        time_left: seconds left in the allocation (None: no end known).
        whose: whose the time budget is: BUDGET (`--budget`) or ALLOCATION.
        now: the time budget's clock (a simulated trainer's: its probes' own seconds).
    """

    clock: LadderClock
    budget: ProbeBudget
    shortest_trial_s: float
    confirm_pairs: int = 2
    time_left: Callable[[], float | None] | None = None
    whose: str = BUDGET
    now: Callable[[], float] = time.monotonic
    deadline: float | None = None
    limit_s: float | None = None  # the time budget as given
    used: set[tuple[str, Any]] = field(default_factory=set)  # first uses already paid
    walls: list[float] = field(default_factory=list)  # the probes' walls so far (the session's)
    have_baseline: bool = False  # an ok baseline probe was measured

    def start(self, limit_s: float | None) -> None:
        if limit_s is not None:
            self.limit_s = limit_s
            self.deadline = self.now() + limit_s

    def trials_for(self, stage: str, candidate: Candidate, values: dict[str, Any]) -> float | None:
        """The trial length the next probe runs with: None as planned, shorter where only that
        fits (module docstring).

        Raises:
            OutOfTime: the allocation ends first, or under the time budget, a baseline probe
                before any baseline ran ok.
            StageCut: under the time budget, a stage's probe, the confirmation's, or a
                baseline repeat once one ran ok.
        """
        fresh = {k: s for k, s in first_uses(values).items() if k not in self.used}
        extra = sum(fresh.values())
        heard = self.clock.heard_any
        left = self.time_left() if self.time_left is not None else None
        if left is not None:
            slowest = max(self.walls, default=0.0)  # the allocation's end kills: the worst
            trial = self._fitting(candidate, values, left - TIME_MARGIN_S, extra, slowest)
            if trial is _NONE:
                need = self._need(candidate, values, self.shortest_trial_s, extra, slowest)
                raise OutOfTime(max(left, 0.0), need, heard)
            if self.deadline is None or not heard:
                return _planned(trial, self.budget)
        if self.deadline is None or not heard:
            return None
        budget_left = self.deadline - self.now()
        reserve = 0.0
        if stage not in (BASELINE_STAGE, CONFIRM_STAGE):
            reserve = self.confirmation_s()
        trial = self._fitting(candidate, values, budget_left - reserve, extra)
        if trial is not _NONE:
            return _planned(trial, self.budget)
        need = self._need(candidate, values, self.shortest_trial_s, extra)
        whose = limit_words(self.whose)
        has = f"{whose} has {duration_text(max(budget_left, 0.0))} left"
        if stage == BASELINE_STAGE:
            if self.have_baseline:
                raise StageCut(
                    f"{has}: the baseline's next repeat takes about {duration_text(need)}"
                )
            raise OutOfTime(max(budget_left, 0.0), need, True, f"in {whose}")
        if stage == CONFIRM_STAGE:
            raise StageCut(f"{has}, a probe takes about {duration_text(need)}")
        raise StageCut(
            f"{has}, kept for the confirmation (about {duration_text(reserve)}); its next probe "
            f"takes about {duration_text(need)}"
        )

    def _fitting(
        self,
        candidate: Candidate,
        values: dict[str, Any],
        seconds: float,
        extra: float,
        slowest: float = 0.0,
    ) -> float | object:
        """The longest trial, from the planned one halving down to the floor, whose probe fits
        in `seconds`; _NONE when none does."""
        trial = float(self.budget.trial_s)
        while True:
            if self._need(candidate, values, trial, extra, slowest) <= seconds:
                return trial
            if trial / 2 < self.shortest_trial_s - 1e-12:
                return _NONE
            trial /= 2

    def _need(
        self,
        candidate: Candidate,
        values: dict[str, Any],
        trial_s: float,
        extra: float,
        slowest: float = 0.0,
    ) -> float:
        """The probe's price at trials of `trial_s`, stretched: the clock's, or where
        `slowest` is given (the allocation's end, which kills), the slowest probe so far less
        what the shorter trials save."""
        shorter = self.clock.probe_s(candidate, values, replace(self.budget, trial_s=trial_s))
        seconds = shorter
        if slowest > 0:
            planned = self.clock.probe_s(candidate, values, self.budget)
            seconds = slowest - (planned - shorter)
        return TIME_STRETCH * seconds + extra

    def confirmation_s(self) -> float:
        """The confirmation's expected time, kept back from the stages under a time budget."""
        costs = self.clock.costs()
        pairs = confirmation_pairs(self.confirm_pairs, self.clock.habits(CONFIRM_STAGE))
        shape = LadderShape({ProbeKind(("full",)): 2.0 * pairs})
        return shape.seconds(self.budget, costs)

    def stage_gate(self, plan: StagePlan) -> str | None:
        """Why a stage is left out when its turn comes: it does not fit the time budget's
        remainder, less the confirmation's time; None to run it."""
        if self.deadline is None or not self.clock.heard_any:
            return None
        left = self.deadline - self.now()
        costs = self.clock.costs()
        shape = StageShape.of(
            plan.name,
            plan.candidates,
            plan.judged,
            plan.expected_gain,
            self.clock.base_batch,
            self.clock.incumbent_batch,
        )
        need = stage_shape(shape, self.clock.habits(plan.name)).seconds(self.budget, costs)
        firsts: dict[tuple[str, Any], float] = {}
        for cand in plan.candidates:
            firsts.update(first_uses(cand.values))
        need += sum(s for k, s in firsts.items() if k not in self.used)
        reserve = self.confirmation_s()
        if left >= need + reserve:
            return None
        return (
            f"left out: {limit_words(self.whose)} has {duration_text(max(left, 0.0))} left, "
            f"and the stage needs about {duration_text(need)} besides the confirmation's "
            f"{duration_text(reserve)}"
        )


_NONE = object()


def _planned(trial: float | object, budget: ProbeBudget) -> float | None:
    """None for the planned trials, else the shorter length."""
    if not isinstance(trial, float) or trial >= budget.trial_s:
        return None
    return trial
