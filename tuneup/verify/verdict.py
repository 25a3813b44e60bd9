"""A target's real runs against the ladder's claim: the verdict, and the part that moved.

The real factor is the recommendation's steady samples/s over the baseline's, from the
epochs after each run's first (warm-up is never counted), pooled over the rounds; its
range is from their quartiles. It holds the claim when that range meets the claim's
likely range. The user's whole run is priced too, from the same runs: its epochs at the
steady rate, each validation (scaled to the real run's samples) and the first epoch's
excess over the steady pace. What moved a miss is named with its figures: the steady
rate against the probes' (IO, where the runs read a larger box than the probes did),
validation, or the first steps. Pure: runs in, a TargetCheck out.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, replace

from tuneup.probe.describe import sps_text
from tuneup.probe.stats import median, quantile
from tuneup.tuning.results.verified import (
    BASELINE,
    RECOMMENDATION,
    Moved,
    TargetCheck,
    VerifyRun,
)
from tuneup.tuning.results.verify_words import factor_text

COMPLETE = 0.95  # an epoch that trained less than this share of its samples was cut short
MOVED = 0.10  # a run this far from its probe's rate moved


@dataclass(frozen=True)
class Claim:
    """What the session claims for a target.

    Attributes:
        factor, low, high: the speedup and its likely range (None: no claim).
        base_sps, rec_sps: the FULL samples/s the probes measured for each configuration.
        noise: the session's noise (a fraction): a claim without a range is taken as
            factor within it.
        none_why: why there is no claim, where factor is None.
    """

    factor: float | None = None
    low: float | None = None
    high: float | None = None
    base_sps: float | None = None
    rec_sps: float | None = None
    noise: float = 0.02
    none_why: str = ""

    def bounds(self) -> tuple[float, float] | None:
        if self.factor is None:
            return None
        if self.low is not None and self.high is not None:
            return min(self.low, self.factor), max(self.high, self.factor)
        return self.factor / (1 + self.noise), self.factor * (1 + self.noise)


@dataclass(frozen=True)
class RealRun:
    """The run the user will do, as its values say: its epochs, an epoch's samples and its
    validation's; and the box sides it reads against those the probes read."""

    epochs: int
    samples: int
    val_samples: int
    box: tuple[int, int] | None = None
    probe_box: tuple[int, int] | None = None


def steady_rates(run: VerifyRun) -> list[float]:
    """The samples/s of a run's epochs after its first, each one it finished whole."""
    return [rate for seconds, rate in run.epochs[1:] if _whole(seconds, rate, run.samples)]


def first_extra_s(run: VerifyRun) -> float | None:
    """What the first epoch took beyond the run's steady pace (its one-time costs)."""
    rates = steady_rates(run)
    if not run.epochs or not rates:
        return None
    seconds, rate = run.epochs[0]
    if not _whole(seconds, rate, run.samples):
        return None
    return max(0.0, seconds - run.samples / median(rates))


def _whole(seconds: float, rate: float, samples: int) -> bool:
    return samples <= 0 or seconds * rate >= COMPLETE * samples


@dataclass(frozen=True)
class _Side:
    """One configuration's runs, pooled."""

    name: str
    rates: list[float]
    val_s: float | None
    val_samples: int
    first_s: float | None
    why_none: str

    @property
    def sps(self) -> float:
        return median(self.rates)

    def run_s(self, real: RealRun, *, val: bool = True, first: bool = True) -> float:
        """The real run's seconds at this side's figures (with or without the parts)."""
        epoch = real.samples / self.sps
        if val and self.val_s is not None and self.val_samples > 0:
            epoch += self.val_s * real.val_samples / self.val_samples
        return ((self.first_s or 0.0) if first else 0.0) + real.epochs * epoch


def _side(name: str, runs: Sequence[VerifyRun]) -> _Side:
    mine = [r for r in runs if r.config == name]
    rates = [rate for r in mine for rate in steady_rates(r)]
    vals = [v for r in mine for v in r.val_s]
    firsts = [f for f in map(first_extra_s, mine) if f is not None]
    why = ""
    if not rates:
        ended = [r for r in mine if r.status != "ok" and r.reason]
        why = (
            f"the {name}'s run {ended[-1].status}: {ended[-1].reason}"
            if ended
            else f"the {name}'s runs finished no epoch after their first"
        )
    return _Side(
        name=name,
        rates=rates,
        val_s=median(vals) if vals else None,
        val_samples=max((r.val_samples for r in mine), default=0),
        first_s=median(firsts) if firsts else None,
        why_none=why,
    )


def check_target(
    target: str,
    label: str,
    claim: Claim,
    runs: Sequence[VerifyRun],
    real: RealRun,
    command: str = "",
) -> TargetCheck:
    """The target's verdict from its runs (both configurations, every round)."""
    base, rec = _side(BASELINE, runs), _side(RECOMMENDATION, runs)
    made = TargetCheck(
        target=target,
        label=label,
        claimed_factor=claim.factor,
        claimed_low=claim.low,
        claimed_high=claim.high,
        command=command,
        runs=len(runs),
    )
    if not base.rates or not rec.rates:
        why = base.why_none or rec.why_none
        return replace(made, reason=f"nothing to compare: {why}")
    factor = rec.sps / base.sps
    low = quantile(rec.rates, 0.25) / quantile(base.rates, 0.75)
    high = quantile(rec.rates, 0.75) / quantile(base.rates, 0.25)
    whole = base.run_s(real) / rec.run_s(real)
    made = replace(
        made,
        real_factor=factor,
        real_low=low,
        real_high=high,
        real_sps=rec.sps,
        baseline_sps=base.sps,
        whole_factor=whole,
    )
    bounds = claim.bounds()
    if bounds is None:
        said = claim.none_why or "the session claimed no speedup for it"
        return replace(made, reason=f"no claim: {said}")
    moved = _moved(claim, bounds, base, rec, real, (low, high), whole)
    real_words = factor_text(factor, low, high)
    claim_words = factor_text(claim.factor or factor, claim.low, claim.high)
    if not moved:
        reason = f"within the claim: {real_words} against {claim_words}"
        return replace(made, within_claim=True, reason=reason)
    judged = factor if moved[0].part in ("io", "rate") else whole
    side = "below" if judged < bounds[0] else "above"
    reason = f"{side} the claim: {real_words} against {claim_words}: {moved[0].text}"
    return replace(made, within_claim=False, outside=side, reason=reason, moved=tuple(moved))


def _moved(
    claim: Claim,
    bounds: tuple[float, float],
    base: _Side,
    rec: _Side,
    real: RealRun,
    real_range: tuple[float, float],
    whole: float,
) -> list[Moved]:
    """The parts that moved the real speedup out of the claim's range, the steady rate
    first (either way), then the part that takes the whole run below it; empty when it
    holds."""
    lo, hi = bounds
    found: list[Moved] = []
    if real_range[1] < lo or real_range[0] > hi:
        found.append(_rate_moved(claim, base, rec, real))
    if whole >= lo:  # validation and first steps dilute a gain: only a loss is a miss
        return found
    steady = base.run_s(real, val=False, first=False) / rec.run_s(real, val=False, first=False)
    with_val = base.run_s(real, first=False) / rec.run_s(real, first=False)
    with_first = base.run_s(real, val=False) / rec.run_s(real, val=False)
    parts = []
    if rec.val_s is not None and base.val_s is not None:
        parts.append(
            (
                abs(math.log(with_val / steady)),
                Moved(
                    part="validation",
                    text=f"validation: {rec.val_s:.2f} s an epoch for the recommendation, "
                    f"{base.val_s:.2f} s for the baseline, takes the whole run of "
                    f"{real.epochs} epochs to {with_val:.2f}x",
                ),
            )
        )
    if rec.first_s is not None and base.first_s is not None:
        parts.append(
            (
                abs(math.log(with_first / steady)),
                Moved(
                    part="first_steps",
                    text=f"first steps: the recommendation's first epoch took {rec.first_s:.1f} s "
                    f"beyond its steady pace (the baseline's {base.first_s:.1f} s), which takes "
                    f"the whole run of {real.epochs} epochs to {with_first:.2f}x",
                ),
            )
        )
    parts.sort(key=lambda part: -part[0])
    found += [moved for _size, moved in parts[:1]]
    return found


def _rate_moved(claim: Claim, base: _Side, rec: _Side, real: RealRun) -> Moved:
    """The steady rate's part: the configuration that ran furthest from its probe's rate,
    IO where the runs read a larger box than the probes."""
    larger = (
        real.box is not None
        and real.probe_box is not None
        and (real.box[0] > real.probe_box[0] or real.box[1] > real.probe_box[1])
    )
    part = "io" if larger else "rate"
    head = "the steady rate:"
    if larger and real.box is not None and real.probe_box is not None:
        head = f"IO on the larger box: on {real.box[0]}^3 (the probes read {real.probe_box[0]}^3)"
    ratios = []
    for side, probe in ((rec, claim.rec_sps), (base, claim.base_sps)):
        if probe:
            ratios.append((side.name, side.sps / probe, side.sps, probe))
    if not ratios:
        return Moved(part=part, text=f"{head} the probes' rates are not known")
    ratios.sort(key=lambda r: -abs(math.log(r[1])))
    name, ratio, sps, probe = ratios[0]
    text = (
        f"{head} the {name} ran at {ratio:.2f}x its probe's rate "
        f"({sps_text(sps)} against {sps_text(probe)} samples/s)"
    )
    if len(ratios) > 1:
        text += f", the {ratios[1][0]} at {ratios[1][1]:.2f}x"
    if abs(math.log(ratio)) < math.log(1 + MOVED):
        text += " (both within 10% of their probes: the runs' own noise)"
    return Moved(part=part, text=text)
