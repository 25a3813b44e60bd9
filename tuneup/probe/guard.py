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

Caveat: a probe with a larger global batch warms its learning rate up when
the schedule scales it, so its loss at step N legitimately lags the
baseline's; callers comparing such probes should pass ``baseline_losses=None``
(only the NaN/Inf and growth checks then apply).
"""

from __future__ import annotations

import math
from collections.abc import Sequence

DEFAULT_TOLERANCE = 0.20
DEFAULT_ABS_TOLERANCE = 0.01


def check_loss(
    losses: Sequence[float],
    baseline_losses: Sequence[float] | None,
    tolerance: float = DEFAULT_TOLERANCE,
    abs_tolerance: float = DEFAULT_ABS_TOLERANCE,
) -> str | None:
    """Why the probe must be marked diverged, or None when its loss looks sound.

    Args:
        losses: the probe's loss per recorded step, from the fixed seed.
        baseline_losses: the baseline's losses at the same steps, or None.
        tolerance: allowed relative excess over the baseline (and over the first loss).
        abs_tolerance: allowed absolute excess on top of the relative one.
    """
    for step, value in enumerate(losses):
        if not math.isfinite(value):
            return f"loss is {value} at recorded step {step + 1}"
    if len(losses) >= 2 and _worse(losses[-1], losses[0], tolerance, abs_tolerance):
        return f"loss grew from {losses[0]:.4g} to {losses[-1]:.4g} over {len(losses)} steps"
    if baseline_losses:
        common = min(len(losses), len(baseline_losses))
        if common:
            mine, theirs = losses[common - 1], baseline_losses[common - 1]
            if math.isfinite(theirs) and _worse(mine, theirs, tolerance, abs_tolerance):
                excess = 100.0 * (mine - theirs) / abs(theirs) if theirs else math.inf
                return (
                    f"loss {mine:.4g} at recorded step {common} is {excess:.0f}% above "
                    f"the baseline's {theirs:.4g} (tolerance {100 * tolerance:.0f}% + "
                    f"{abs_tolerance:g})"
                )
    return None


def _worse(value: float, reference: float, tolerance: float, abs_tolerance: float) -> bool:
    return value > reference + tolerance * abs(reference) + abs_tolerance
