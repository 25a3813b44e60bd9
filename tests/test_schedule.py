"""The learning rate a run sees: batch-size scaling, linear warm-up, cosine decay.

Expected values come from the workload's description (Adam at start_lr, cosine
decay to end_lr over the run; with a global batch above the base batch the peak
is scaled by sqrt or linear of the ratio and reached by a linear warm-up),
written out here independently of tuneup's code.
"""

from __future__ import annotations

import math
from itertools import pairwise

import pytest

from tuneup.config import build_config
from tuneup.unet.schedule import initial_lr, lr_at, schedule_for

TOTAL = 1000
WARMUP = 128
START = 2e-4
END = 1e-5  # not zero, so reaching end_lr is visible


def expected_peak(scaling: str, global_batch: int, base_batch: int) -> float:
    ratio = global_batch / base_batch
    return START * {"none": 1.0, "sqrt": math.sqrt(ratio), "linear": ratio}[scaling]


def expected_lr(step: int, *, global_batch: int, base_batch: int, scaling: str) -> float:
    """The workload's schedule read plainly: ramp to the peak, then cosine down to END."""
    peak = expected_peak(scaling, global_batch, base_batch)
    if global_batch > base_batch and scaling != "none":
        if step < WARMUP:
            return peak * step / WARMUP
        progress = (step - WARMUP) / (TOTAL - WARMUP)
    else:
        progress = step / TOTAL
    return END + (peak - END) * (1 + math.cos(math.pi * progress)) / 2


def lr(step: int, *, global_batch: int, base_batch: int, scaling: str) -> float:
    return lr_at(
        step,
        total_steps=TOTAL,
        global_batch=global_batch,
        base_batch=base_batch,
        scaling=scaling,
        start_lr=START,
        end_lr=END,
        warmup_steps=WARMUP,
    )


def close(value: float) -> object:
    return pytest.approx(value, rel=1e-9, abs=1e-15)


UNSCALED = [(64, 64, "sqrt"), (64, 64, "linear"), (256, 64, "none"), (64, 64, "none")]


@pytest.mark.parametrize(("global_batch", "base_batch", "scaling"), UNSCALED)
def test_without_scaling_cosine_runs_from_start_lr_to_end_lr(global_batch, base_batch, scaling):
    def at(step: int) -> float:
        return lr(step, global_batch=global_batch, base_batch=base_batch, scaling=scaling)

    assert at(0) == close(START)
    assert at(TOTAL // 2) == close((START + END) / 2)
    assert at(TOTAL) == close(END)
    for step in range(0, TOTAL + 1, 7):
        want = expected_lr(step, global_batch=global_batch, base_batch=base_batch, scaling=scaling)
        assert at(step) == close(want), step


@pytest.mark.parametrize(("scaling", "factor"), [("sqrt", 2.0), ("linear", 4.0)])
def test_global_256_over_base_64_scales_the_peak(scaling, factor):
    assert initial_lr(START, scaling, 256, 64) == close(factor * START)
    run = [lr(s, global_batch=256, base_batch=64, scaling=scaling) for s in range(TOTAL + 1)]
    assert max(run) == close(factor * START)
    assert run[WARMUP] == close(factor * START)  # the peak is reached when warm-up ends


@pytest.mark.parametrize("scaling", ["sqrt", "linear"])
def test_warm_up_is_linear_from_zero_to_the_peak(scaling):
    peak = expected_peak(scaling, 256, 64)
    for step in (0, 1, WARMUP // 4, WARMUP // 2, WARMUP - 1):
        got = lr(step, global_batch=256, base_batch=64, scaling=scaling)
        assert got == close(peak * step / WARMUP), step
        assert got == close(expected_lr(step, global_batch=256, base_batch=64, scaling=scaling))


@pytest.mark.parametrize(
    ("global_batch", "base_batch", "scaling"),
    [(256, 64, "none"), (64, 64, "sqrt"), (32, 64, "sqrt"), (32, 64, "linear")],
)
def test_no_warm_up_unless_the_batch_was_scaled_up(global_batch, base_batch, scaling):
    run = [
        lr(s, global_batch=global_batch, base_batch=base_batch, scaling=scaling)
        for s in range(WARMUP + 2)
    ]
    assert run[0] == max(run)  # the run starts at its highest rate
    assert run[1] > 0.99 * run[0]  # no ramp from zero
    assert all(a >= b for a, b in pairwise(run))


@pytest.mark.parametrize("scaling", ["sqrt", "linear"])
def test_after_warm_up_the_cosine_takes_over(scaling):
    peak = expected_peak(scaling, 256, 64)
    run = [lr(s, global_batch=256, base_batch=64, scaling=scaling) for s in range(TOTAL + 1)]
    assert run[WARMUP] == close(peak)
    assert run[WARMUP - 1] == close(peak * (WARMUP - 1) / WARMUP)  # no jump at the seam
    after = run[WARMUP:]
    assert all(a > b for a, b in pairwise(after))  # decays every step
    assert after[-1] < 0.5 * peak
    assert min(after) >= END


@pytest.mark.parametrize("scaling", ["sqrt", "linear"])
def test_a_warmed_up_run_still_decays_to_end_lr(scaling):
    assert lr(TOTAL, global_batch=256, base_batch=64, scaling=scaling) == close(END)
    for step in range(WARMUP, TOTAL + 1, 9):
        want = expected_lr(step, global_batch=256, base_batch=64, scaling=scaling)
        assert lr(step, global_batch=256, base_batch=64, scaling=scaling) == close(want), step


def test_a_configs_lr_schedule_drives_the_run():
    cfg = build_config(
        {"global_batch_size": 256, "lr_schedule": {"scaling": "linear", "start_lr": 1e-4}}
    )
    schedule = schedule_for(
        cfg.lr_schedule,
        total_steps=TOTAL,
        global_batch=cfg.global_batch_size,
        base_batch=cfg.base_batch_size,
    )
    warmup = cfg.lr_schedule["warmup_steps"]  # the default, 128 as in the tutorial
    assert warmup == 128
    assert schedule(warmup) == close(4 * 1e-4)
    assert schedule(warmup // 2) == close(2 * 1e-4)
    for step in (1, 50, warmup, 400, TOTAL):
        assert schedule(step) == lr_at(
            step,
            total_steps=TOTAL,
            global_batch=256,
            base_batch=64,
            scaling="linear",
            start_lr=1e-4,
            end_lr=0.0,
            warmup_steps=warmup,
        )
