"""The ladder-duration estimate: the documented model, the fit sentence, and trimming."""

from __future__ import annotations

import dataclasses

import pytest

from tuneup.probe.estimate import (
    PAIRS_PER_STAGE,
    ProbeCosts,
    StepModel,
    estimate_ladder_seconds,
    fits,
    guess_costs,
    ladder_shape,
    measured_costs,
    pairs_seen,
    probe_count,
    probe_seconds,
    rescaled,
    time_left_text,
    trim,
)
from tuneup.probe.types import Budget, ProbeResult, Status

BUDGET = Budget(warmup_max_steps=10, trial_steps=5, trials=4, loss_steps=10, limit_s=600)
MODEL = StepModel(startup_s=20.0, step_s=0.5)


def test_one_probe_is_startup_plus_every_step_it_may_run() -> None:
    steps = 10 + 10 + 3 * 4 * 5
    assert probe_seconds(BUDGET, MODEL) == 20.0 + steps * 0.5


def test_a_probe_never_costs_more_than_its_limit() -> None:
    slow = StepModel(startup_s=20.0, step_s=100.0)
    assert probe_seconds(BUDGET, slow) == BUDGET.limit_s


def test_probes_are_baselines_screens_pairs_and_the_confirmation() -> None:
    # 2 baselines + 10 candidates + per stage 2 anchors and five pairs + 3 confirm pairs
    assert probe_count([4, 3, 3]) == 2 + 10 + 3 * (2 + 10) + 6
    assert probe_count([4, 0, 3]) == 2 + 7 + 2 * (2 + 10) + 6  # a skipped stage costs nothing
    assert probe_count([0, 0]) == 2  # nothing to try: only the baseline runs
    assert probe_count([4, 3, 3], pairs_per_stage=1) == 2 + 10 + 3 * (2 + 2) + 6


def test_baselines_and_each_confirmation_pair_start_a_process_and_the_rest_share_one() -> None:
    shape = ladder_shape([4, 3])
    assert shape.fresh == 2 + 3
    assert shape.served == (4 + 12) + (3 + 12) + 3
    alone = ladder_shape([4, 3], shares_processes=False)
    assert (alone.fresh, alone.served) == (shape.fresh + shape.served, 0)


def test_a_shared_process_spares_the_start_up_in_the_guess() -> None:
    shared = guess_costs(BUDGET, StepModel(startup_s=20.0, step_s=0.5, served_startup_s=1.0))
    assert shared.fresh_s == probe_seconds(BUDGET, MODEL)
    assert shared.served_s == shared.fresh_s - 19.0
    assert not shared.measured
    assert guess_costs(BUDGET, MODEL).served_s == guess_costs(BUDGET, MODEL).fresh_s


def ran(
    wall: float, served_before: int, spawn: float | None = None, ok: bool = True
) -> ProbeResult:
    one_time = {"spawn": spawn} if spawn is not None else {}
    status = Status.OK if ok else Status.CRASH
    return ProbeResult(
        "s", {}, {}, status, wall_s=wall, served_before=served_before, one_time_s=one_time
    )


def test_measured_costs_are_the_medians_of_each_kind_of_probe() -> None:
    guess = ProbeCosts(100.0, 10.0)
    results = [
        ran(3.0, 0),
        ran(2.6, 0),
        ran(2.8, 0),
        ran(0.6, 1),
        ran(0.5, 2),
        ran(9.0, 3, ok=False),
    ]
    costs = measured_costs(results, guess)
    assert (costs.fresh_s, costs.served_s, costs.measured) == (2.8, 0.55, True)
    assert measured_costs([], guess) == guess


def test_a_kind_not_measured_yet_is_derived_from_the_other() -> None:
    shares = ProbeCosts(40.0, 15.0)
    fresh_only = measured_costs([ran(3.0, 0, spawn=2.0), ran(2.8, 0, spawn=1.8)], shares)
    assert fresh_only.fresh_s == 2.9 and fresh_only.served_s == pytest.approx(1.0)
    # A trainer that shares no process: its probes all cost what a fresh one does.
    alone = measured_costs([ran(3.0, 0, spawn=2.0)], ProbeCosts(40.0, 40.0))
    assert alone.served_s == alone.fresh_s == 3.0
    served_only = measured_costs([ran(0.5, 1)], shares)
    assert served_only.fresh_s == 0.5 + 25.0


def test_pairs_seen_learn_from_decided_stages_and_start_at_the_prior() -> None:
    assert pairs_seen([]) == PAIRS_PER_STAGE
    # A stage of 1 candidate that took 13 probes: 2 anchors, 1 screen, 5 pairs.
    assert pairs_seen([(13, 1)], prior=3.0, weight=2.0) == pytest.approx((6 + 5) / 3)
    many = [(13, 1)] * 20
    assert pairs_seen(many) == pytest.approx(5.0, abs=0.2)
    assert pairs_seen([(0, 0)]) == PAIRS_PER_STAGE  # a skipped stage says nothing


def test_the_estimate_uses_what_this_machine_measured() -> None:
    costs = ProbeCosts(2.8, 0.6, measured=True)
    seconds = estimate_ladder_seconds([1, 2], BUDGET, MODEL, costs=costs, pairs_per_stage=4)
    shape = ladder_shape([1, 2], pairs_per_stage=4)
    assert seconds == pytest.approx(shape.fresh * 2.8 + shape.served * 0.6)


def test_measured_costs_follow_the_budget_by_the_models_ratio() -> None:
    costs = ProbeCosts(3.0, 1.0, measured=True)
    halved = dataclasses.replace(BUDGET, trials=2)
    moved = rescaled(costs, BUDGET, halved, MODEL)
    ratio = probe_seconds(halved, MODEL) / probe_seconds(BUDGET, MODEL)
    assert moved.fresh_s == pytest.approx(3.0 * ratio) and moved.measured
    assert rescaled(costs, BUDGET, BUDGET, MODEL) == costs


def test_the_time_left_says_when_it_is_only_a_guess() -> None:
    assert time_left_text(75, measured=True) == "about 1 min 15 s left"
    assert time_left_text(1500, measured=True) == "about 25 min left"
    assert time_left_text(30, measured=False).endswith("(a guess until the first probes finish)")


def test_more_candidates_take_longer() -> None:
    short = estimate_ladder_seconds([2, 2], BUDGET, MODEL)
    longer = estimate_ladder_seconds([2, 2, 3], BUDGET, MODEL)
    assert longer > short
    assert short == probe_count([2, 2]) * probe_seconds(BUDGET, MODEL)


def test_fits_names_the_limit_it_breaks() -> None:
    ok, message = fits(600, budget_s=3600, allocation_left_s=7200)
    assert ok and "10 min" in message and "1 h 00 min" in message
    over, message = fits(4000, budget_s=3600, allocation_left_s=None)
    assert not over and "time budget" in message
    over, message = fits(4000, budget_s=None, allocation_left_s=3000)
    assert not over and "left in the allocation" in message


def test_trim_drops_the_last_stages_until_it_fits() -> None:
    plans = [("workers", 3), ("amp", 2), ("batch_size", 4)]
    full = estimate_ladder_seconds([3, 2, 4], BUDGET, MODEL)
    trimmed = trim(plans, BUDGET, full - 1, MODEL)
    assert trimmed.fits
    assert trimmed.stages == ("workers", "amp")
    assert trimmed.estimate_s <= full - 1
    assert trimmed.budget.trials == BUDGET.trials


def test_trim_lowers_the_trials_when_the_baseline_alone_is_too_long() -> None:
    plans = [("workers", 3)]
    baseline_only = estimate_ladder_seconds([], BUDGET, MODEL)
    trimmed = trim(plans, BUDGET, baseline_only - 1, MODEL)
    assert trimmed.stages == ()
    assert trimmed.budget.trials < BUDGET.trials
    assert trimmed.fits


def test_trim_with_no_limit_keeps_everything() -> None:
    plans = [("workers", 3), ("amp", 2)]
    assert trim(plans, BUDGET, None, MODEL).stages == ("workers", "amp")
