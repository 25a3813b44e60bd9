"""When the next probe may start under the allocation's end and the time budget, and with
what trials: shorter ones where only they fit, never below the floor."""

from __future__ import annotations

from typing import Any

import pytest

from tuneup.costs.estimate import Habits, ProbeCosts
from tuneup.probe.types import Candidate, ProbeBudget
from tuneup.tuning.clock.planner import ALLOCATION, TIME_MARGIN_S, TIME_STRETCH
from tuneup.tuning.search.search_records import StageCut
from tuneup.tuning.session.control import OutOfTime
from tuneup.tuning.session.time_gate import TimeGate

BUDGET = ProbeBudget(trial_s=1.0, min_trials=2, max_trials=2, warmup_cap_s=1.0)


class Clock:
    """A ladder clock whose probe costs 2 s plus 8 trials' time (its phases' trials)."""

    def __init__(self, heard: bool = True) -> None:
        self.heard_any = heard
        self.base_batch: float | None = None
        self.incumbent_batch: float | None = None

    def probe_s(self, candidate: Candidate, values: dict[str, Any], budget: ProbeBudget) -> float:
        return 2.0 + 8 * budget.trial_s

    def costs(self) -> ProbeCosts:
        return ProbeCosts(2.0, 0.5, 0.0, {"full": 0.01}, {"full": 2.0})

    def habits(self, stage: str | None) -> Habits:
        return Habits(1.0, 0.5)


def gate(now: float, **changes: Any) -> TimeGate:
    made = TimeGate(Clock(), BUDGET, 0.25, now=lambda: now, **changes)  # type: ignore[arg-type]
    return made


def need(trial_s: float) -> float:
    return TIME_STRETCH * (2.0 + 8 * trial_s)


def test_a_probe_that_fits_only_with_shorter_trials_runs_with_them_never_below_the_floor():
    made = gate(0.0)
    made.start(need(0.5) + 0.1)  # room for trials of 0.5 s, not of 1 s
    asked = Candidate("c", {})
    assert made.trials_for("baseline", asked, {}) == 0.5
    made.start(need(1.0) + 0.1)
    assert made.trials_for("baseline", asked, {}) is None  # as planned
    made.start(need(0.25) - 0.1)  # not even the floor's trials fit
    made.have_baseline = True
    with pytest.raises(StageCut, match=r"your budget has .* the baseline's next repeat"):
        made.trials_for("baseline", asked, {})


def test_a_baseline_before_any_ran_ok_ends_the_ladder_and_a_stage_keeps_the_confirmation():
    made = gate(0.0)
    made.start(need(0.25) - 0.1)
    with pytest.raises(OutOfTime, match="in your budget"):
        made.trials_for("baseline", Candidate("c", {}), {})
    made.start(1000.0)
    reserve = made.confirmation_s()
    made.start(reserve + need(0.25) - 0.1)  # the probe fits, beside the confirmation it does not
    with pytest.raises(StageCut, match="kept for the confirmation"):
        made.trials_for("amp", Candidate("c", {}), {})
    # the confirmation keeps no reserve: the same probe may start (it would raise if not)
    assert made.trials_for("confirm", Candidate("c", {}), {}) in (None, 0.5, 0.25)


def test_the_allocations_end_is_named_as_such_and_a_shorter_trial_meets_it_too():
    left = [need(0.5) + TIME_MARGIN_S + 0.1]
    made = TimeGate(
        Clock(heard=False),  # type: ignore[arg-type]
        BUDGET,
        0.25,
        time_left=lambda: left[0],
        whose=ALLOCATION,
    )
    assert made.trials_for("baseline", Candidate("c", {}), {}) == 0.5  # before any probe too
    left[0] = need(0.25) + TIME_MARGIN_S - 0.1
    with pytest.raises(OutOfTime, match="in the allocation"):
        made.trials_for("baseline", Candidate("c", {}), {})


def test_a_stage_whose_candidates_keep_the_kernels_is_gated_without_their_first_steps():
    # as the plan priced it: fused Adam pays no cuDNN search, bf16 does (30 s here)
    from tuneup.tuning.search.search_records import StagePlan

    class Searching(Clock):
        def costs(self) -> ProbeCosts:
            return ProbeCosts(2.0, 0.5, 30.0, {"full": 0.01}, {"full": 2.0})

    made = TimeGate(Searching(), BUDGET, 0.25, now=lambda: 0.0)  # type: ignore[arg-type]
    made.start(40.0)
    fused = StagePlan("optimizer", [Candidate("fused", {"optimizer_impl": "fused"})])
    bf16 = StagePlan("amp", [Candidate("bf16", {"amp_mode": "bf16"})])
    assert made.stage_gate(fused) is None
    said = made.stage_gate(bf16)
    assert said is not None and said.startswith("left out:")


def test_a_stage_after_a_larger_batch_was_adopted_is_gated_at_that_batch():
    # on the H200 the batch stage comes before jit and CUDA graphs: once 256 is adopted,
    # their new kernels' first steps are searched at 256 (4x batch 64's), not at 64
    from tuneup.tuning.search.search_records import StagePlan

    class Grown(Clock):
        def costs(self) -> ProbeCosts:
            return ProbeCosts(2.0, 0.5, 30.0, {"full": 0.01}, {"full": 2.0}, batch_exponent=1.0)

    bf16 = StagePlan("amp", [Candidate("bf16", {"amp_mode": "bf16"})])
    clock = Grown()
    clock.base_batch = 64.0
    made = TimeGate(clock, BUDGET, 0.25, now=lambda: 0.0)  # type: ignore[arg-type]
    made.start(60.0)
    assert made.stage_gate(bf16) is None  # its 30 s search fits at 64
    clock.incumbent_batch = 256.0
    said = made.stage_gate(bf16)
    assert said is not None and said.startswith("left out:")  # 120 s at 256 does not
