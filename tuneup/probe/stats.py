"""Robust statistics for probe trials: medians, spread, and the search's noise margin.

Throughput trials are few (T of about 5) and occasionally hit by a stray
slow trial (a checkpoint, another job), so centres are medians and
spreads are deviations from the median, never means and variances.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

# sqrt(pi / 2): the median of n normal values varies this many times more than their
# mean, and a normal deviation is this many times its mean absolute deviation.
MEDIAN_EFFICIENCY = 1.2533
# Standard errors a win must clear (noise_margin).
Z_MARGIN = 2.0


def median(xs: Sequence[float]) -> float:
    """The median of a non-empty sequence."""
    if not xs:
        raise ValueError("median of an empty sequence")
    ordered = sorted(xs)
    mid = len(ordered) // 2
    if len(ordered) % 2:
        return float(ordered[mid])
    return (ordered[mid - 1] + ordered[mid]) / 2.0


EARLY_STOP_TRIALS = 2
"""A probe told to stop early is judged after this many trials, never on one: one trial
can be hit by a burst, two in a row that both fall short rarely are."""


def clearly_slower(rates: Sequence[float], stop_below: float | None) -> bool:
    """Whether the trials so far (at least EARLY_STOP_TRIALS) all fall short of `stop_below`.

    The best trial decides, so a slow first trial (late one-time work) never stops a probe.
    """
    if stop_below is None or len(rates) < EARLY_STOP_TRIALS:
        return False
    return max(rates) < stop_below


def early_stop_reason(
    rates: Sequence[float], phase: str, stop_below: float, skipped: Sequence[str] = ()
) -> str:
    """Why a probe's trials of `phase` ended after `rates` (journaled)."""
    why = (
        f"stopped after {len(rates)} {phase.upper()} trials: the best, {max(rates):.4g} "
        f"samples/s, is under the {stop_below:.4g} it had to reach"
    )
    if skipped:
        why += f"; {' and '.join(p.upper() for p in skipped)} not measured"
    return why


def quantile(xs: Sequence[float], q: float) -> float:
    """Quantile with linear interpolation between order statistics (numpy's default)."""
    if not xs:
        raise ValueError("quantile of an empty sequence")
    if not 0.0 <= q <= 1.0:
        raise ValueError(f"quantile must be in [0, 1], got {q}")
    ordered = sorted(xs)
    pos = q * (len(ordered) - 1)
    low = math.floor(pos)
    high = min(low + 1, len(ordered) - 1)
    return ordered[low] + (ordered[high] - ordered[low]) * (pos - low)


def iqr_pct(xs: Sequence[float]) -> float:
    """Interquartile range as a percentage of the median (0 for fewer than two values)."""
    if len(xs) < 2:
        return 0.0
    mid = median(xs)
    if mid == 0:
        return 0.0
    return 100.0 * (quantile(xs, 0.75) - quantile(xs, 0.25)) / abs(mid)


def relative_spread(xs: Sequence[float]) -> float:
    """Relative deviation of one trial: 1.2533 x mean |x - median| / median.

    The mean absolute deviation from the median estimates a normal standard
    deviation (times sqrt(pi / 2)) nearly as efficiently as the standard
    deviation itself, which matters with 5 to 15 trials, while one stray slow
    trial moves it linearly rather than quadratically. The sum is divided by
    n - 1 because for odd n the median's own deviation is always zero.
    """
    if len(xs) < 2:
        return 0.0
    mid = median(xs)
    if mid == 0:
        return 0.0
    mean_dev = sum(abs(x - mid) for x in xs) / (len(xs) - 1)
    return MEDIAN_EFFICIENCY * mean_dev / abs(mid)


MAD_TO_SIGMA = 1.4826  # a normal deviation is this many times its median absolute deviation


def relative_mad(xs: Sequence[float]) -> float:
    """The median absolute deviation from the median, as a normal deviation relative to the
    median (1.4826 x MAD / median): unmoved by up to half the values being wild, where
    relative_spread is moved by each (0 for fewer than two values)."""
    if len(xs) < 2:
        return 0.0
    mid = median(xs)
    if mid == 0:
        return 0.0
    return MAD_TO_SIGMA * median([abs(x - mid) for x in xs]) / abs(mid)


def noise_margin(
    trials: Sequence[float],
    floor: float = 0.02,
    *,
    per_probe: int | None = None,
    pooled: tuple[int, int] = (1, 1),
    z: float = Z_MARGIN,
) -> float:
    """Relative gain a variant must exceed to count as a win.

    Rule: ``max(floor, z * 1.2533 * s * sqrt(1 / (a T) + 1 / (b T)))`` where
    ``s = relative_spread`` of the baseline's trials (all repeats pooled) is
    the relative deviation of one trial, T the trials per probe and
    a, b the probes pooled on each side of the comparison. The square root
    term times 1.2533 is the standard error of the difference of two medians,
    so with z = 2 a variant with no real effect passes about one time in
    forty, whatever the noise. The floor (2%) keeps gains too small to matter
    (or to survive a different day on the machine) from being adopted. Fewer
    than two trials: only the floor is known.

    Args:
        trials: the baseline's FULL samples/s trials, repeats pooled.
        floor: the smallest margin ever returned.
        per_probe: T, trials in one probe (default: all of `trials`, one probe).
        pooled: probes pooled on each side (re-measured close calls pool more).
        z: how many standard errors a win must clear.
    """
    if floor < 0:
        raise ValueError(f"noise margin floor must be >= 0, got {floor}")
    finite = [t for t in trials if math.isfinite(t)]
    spread = relative_spread(finite)
    per = per_probe or max(len(finite), 1)
    a, b = pooled
    stderr = MEDIAN_EFFICIENCY * spread * math.sqrt(1.0 / (a * per) + 1.0 / (b * per))
    return max(floor, z * stderr)
