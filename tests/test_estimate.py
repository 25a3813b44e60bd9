"""The ladder-duration estimate: the documented model, the fit sentence, and trimming."""

from __future__ import annotations

from tuneup.probe.estimate import (
    StepModel,
    estimate_ladder_seconds,
    fits,
    probe_count,
    probe_seconds,
    trim,
)
from tuneup.probe.types import Budget

BUDGET = Budget(warmup_max_steps=10, trial_steps=5, trials=4, loss_steps=10, limit_s=600)
MODEL = StepModel(startup_s=20.0, step_s=0.5)


def test_one_probe_is_startup_plus_every_step_it_may_run() -> None:
    steps = 10 + 10 + 3 * 4 * 5
    assert probe_seconds(BUDGET, MODEL) == 20.0 + steps * 0.5


def test_a_probe_never_costs_more_than_its_limit() -> None:
    slow = StepModel(startup_s=20.0, step_s=100.0)
    assert probe_seconds(BUDGET, slow) == BUDGET.limit_s


def test_probes_are_baselines_screens_pairs_and_the_confirmation() -> None:
    # 2 baselines + 10 candidates + per stage 2 anchors and one pair + 3 confirm pairs
    assert probe_count([4, 3, 3]) == 2 + 10 + 3 * (2 + 2) + 6
    assert probe_count([4, 0, 3]) == 2 + 7 + 2 * (2 + 2) + 6  # a skipped stage costs nothing
    assert probe_count([0, 0]) == 2  # nothing to try: only the baseline runs


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
