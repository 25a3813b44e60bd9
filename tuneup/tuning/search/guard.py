"""Correctness guard: is a faster probe still training the same model?

Probes that change the arithmetic (TF32, AMP, fused Adam, JIT, graphs) or the
learning rate record their loss from the same fixed seed as the baseline. A
probe is marked ``diverged`` when its loss is NaN/Inf, or clearly worse than
the baseline's at the last step both recorded, or it grew over the run.

Tolerance: the loss may exceed the baseline's by ``tolerance`` (20%) relative
plus ``abs_tolerance`` (0.01) absolute. TF32, bf16 and fp16 round differently
and Adam amplifies those differences over a few dozen steps, which moves the
loss by a few percent at most; a broken run (NaN gradients skipped by the
scaler, a learning rate 100x too high, a wrong fused kernel) is off by far
more than 20%. The absolute term keeps tiny losses near zero from tripping
the relative test on rounding alone.

Another batch size: a probe whose batch is k times the baseline's has seen
as many samples after step j as the baseline after step j x k, so the two
are compared there, at equal samples seen (``batch_ratio=k``), never at
equal steps (where the bigger batch has seen k times the data). One
exception: a batch above the config's base batch with a scaling rule ramps
its learning rate up over ``warmup_steps`` (the tutorial's schedule), so
during a short probe it learns slower per sample by design; that lag is
reported with its numbers (`equal_samples_note`) and only NaN/Inf and
growth mark such a probe diverged (`lr_warming_up`).
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import Any

from tuneup.config import LR_SCHEDULE_DEFAULT, TrainConfig
from tuneup.probe.batches import batch_of as step_batch

DEFAULT_TOLERANCE = 0.20
DEFAULT_ABS_TOLERANCE = 0.01


BATCH_KNOBS = ("global_batch_size", "local_batch_size")


def batch_of(values: Mapping[str, Any]) -> int | None:
    """The batch a probe's step takes: local_batch_size when set, else the global one
    (tuneup.probe.batches.batch_of); a knob left out takes TrainConfig's default (64)."""
    found = step_batch(values, float(TrainConfig.global_batch_size))
    return int(found) if found else None


def batch_ratio(values: Mapping[str, Any], baseline_values: Mapping[str, Any]) -> float:
    """How many of the baseline's samples one of this probe's steps takes (1: same batch)."""
    mine, theirs = batch_of(values), batch_of(baseline_values)
    if mine is None or theirs is None or mine == theirs:
        return 1.0
    return mine / theirs


def lr_warming_up(values: Mapping[str, Any]) -> bool:
    """True when the config's schedule ramps the learning rate up (batch above base, scaled)."""
    schedule = {**LR_SCHEDULE_DEFAULT, **dict(values.get("lr_schedule") or {})}
    batch = values.get("global_batch_size", TrainConfig.global_batch_size)
    base = values.get("base_batch_size", TrainConfig.base_batch_size)
    return (
        isinstance(batch, int)
        and isinstance(base, int)
        and batch > base
        and schedule.get("scaling") != "none"
        and int(schedule.get("warmup_steps") or 0) > 1
    )


def equal_samples_note(
    losses: Sequence[float], baseline_losses: Sequence[float], batch_ratio: float
) -> str | None:
    """The loss against the baseline's at equal samples seen, in words (None: no overlap)."""
    at = equal_samples(losses, baseline_losses, batch_ratio)
    if at is None:
        return None
    step, base_step = at
    mine, theirs = losses[step - 1], baseline_losses[base_step - 1]
    if not (math.isfinite(mine) and math.isfinite(theirs)) or theirs == 0:
        return None
    return (
        f"after the samples of the baseline's recorded step {base_step} (its own step {step}) "
        f"its loss is {mine:.4g} against the baseline's {theirs:.4g} "
        f"({100 * (mine / theirs - 1):+.0f}%)"
    )


def equal_samples(
    losses: Sequence[float], baseline_losses: Sequence[float], batch_ratio: float = 1.0
) -> tuple[int, int] | None:
    """The last (probe step, baseline step), 1-based, at which both had seen the same samples."""
    if batch_ratio <= 0:
        return None
    for step in range(min(len(losses), int(len(baseline_losses) / batch_ratio + 1e-9)), 0, -1):
        theirs = step * batch_ratio
        if abs(theirs - round(theirs)) < 1e-9 and round(theirs) >= 1:
            return step, round(theirs)
    return None


def check_loss(
    losses: Sequence[float],
    baseline_losses: Sequence[float] | None,
    tolerance: float = DEFAULT_TOLERANCE,
    abs_tolerance: float = DEFAULT_ABS_TOLERANCE,
    *,
    batch_ratio: float = 1.0,
) -> str | None:
    """Why the probe must be marked diverged, or None when its loss looks sound.

    Args:
        losses: the probe's loss per recorded step, from the fixed seed.
        baseline_losses: the baseline's losses at the same steps, or None.
        tolerance: allowed relative excess over the baseline (and over the first loss).
        abs_tolerance: allowed absolute excess on top of the relative one.
        batch_ratio: the probe's batch over the baseline's: compared at equal samples seen.
    """
    for step, value in enumerate(losses):
        if not math.isfinite(value):
            return f"loss is {value} at recorded step {step + 1}"
    if len(losses) >= 2 and _worse(losses[-1], losses[0], tolerance, abs_tolerance):
        return f"loss grew from {losses[0]:.4g} to {losses[-1]:.4g} over {len(losses)} steps"
    at = equal_samples(losses, baseline_losses, batch_ratio) if baseline_losses else None
    if baseline_losses and at is not None:
        step, base_step = at
        mine, theirs = losses[step - 1], baseline_losses[base_step - 1]
        if math.isfinite(theirs) and _worse(mine, theirs, tolerance, abs_tolerance):
            excess = 100.0 * (mine - theirs) / abs(theirs) if theirs else math.inf
            where = (
                f"at recorded step {step}"
                if step == base_step
                else f"at recorded step {step} (the samples of the baseline's step {base_step})"
            )
            return (
                f"loss {mine:.4g} {where} is {excess:.0f}% above "
                f"the baseline's {theirs:.4g} (tolerance {100 * tolerance:.0f}% + "
                f"{abs_tolerance:g})"
            )
    return None


def _worse(value: float, reference: float, tolerance: float, abs_tolerance: float) -> bool:
    return value > reference + tolerance * abs(reference) + abs_tolerance


def loss_verdict(
    losses: Sequence[float],
    values: Mapping[str, Any],
    baseline_losses: Sequence[float] | None,
    baseline_values: Mapping[str, Any],
) -> str | None:
    """The guard for a probe of `values` against the baseline's: equal samples seen, and a
    bigger batch still ramping its learning rate judged on NaN and growth only."""
    ratio = batch_ratio(values, baseline_values) if baseline_losses else 1.0
    if ratio != 1.0 and lr_warming_up(values):
        baseline_losses = None  # slower per sample by design: reported, not judged
    return check_loss(losses, baseline_losses, batch_ratio=ratio)
