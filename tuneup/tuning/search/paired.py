"""Paired decisions: is B faster than A, judged on A/B probes measured side by side?

Pure statistics, no probes. Everything is on the log scale: a pair (a, b)
of samples/s of the phase that judges the comparison gives d = ln(b / a), so
a 10% gain and a 10% loss weigh alike and ratios multiply.

Why pairs: the machine's speed moves (another job starts, a node warms up,
a neighbour on the hypervisor gets busy). Two probes run back to back see
nearly the same machine, so their ratio carries the configuration's effect;
two probes minutes apart carry the drift as well. The order alternates
(A B, B A, A B, ...) so a slow drift within the pairs cancels out.

The session's noise (`NoiseTracker`, one per phase: a loader's IO may vary by
20% where the model's SYNTHETIC repeats to 0.01%) comes from configurations
measured again: the baseline's repeats, the incumbent re-measured at each
stage and in each pair, the candidate's own repeats. Two consecutive
measurements of one configuration differ only by the machine, so their log
ratios r give the noise of one pair, sigma = 1.4826 x median |r| (a normal's
standard deviation from its median absolute value: robust to the one step
change a session may contain; `sigma` says how), and the *instability*, the
typical difference between repeats, median |e^r - 1|. Before any repeat, the
trials' own spread stands in (trials within one probe vary less than probes
do, so it is a floor).

The rule (`judge`), with n pairs, est = the Hodges-Lehmann estimate of d
(the median of the pairwise means (d_i + d_j) / 2, i <= j: nearly as
efficient as the mean, and one wild pair moves it little; the plain median
below four pairs, where one wild pair is too many for it, and wherever a pair
lies more than WILD off the rest: two wild pairs in five break the
Hodges-Lehmann estimate, not the median), s = max(sigma,
1.4826 x MAD of d), se = 1.047 s / sqrt(n) (the estimate's standard error
for normal noise) and a needed gain g = max(floor, instability):

* **adopt** when n >= min_pairs (or one pair shows more than DECISIVE, 4x, even at
  its lower bound: no hidden burst explains that; never one pair whose noise nothing
  measured, a zero-width interval), est - z se > ln(1 + floor) (z = 2.4, Pocock's
  group-sequential boundary for up to 5 looks: about a 2.5% chance over all
  looks for a configuration with no effect), est > ln(1 + g)
  (nothing smaller than the instability the session saw), and at least three
  pairs in four favour b (one pair hit by a burst cannot carry the rest);
* **reject** when est + z_futile se < ln(1 + g): the needed gain is ruled out,
  even z_futile standard errors more would not reach it;
* **unresolved** at max_pairs when neither: the interval still holds both the
  needed gain and less, so the knob is reported with its estimate and
  interval as *unresolved at this machine's noise*, never silently dropped. A
  promising comparison (its estimate already above the needed gain) goes on,
  up to EXTEND x max_pairs, so a real gain near the bound is decided by more
  pairs rather than by which side of it the noise fell;
* otherwise measure **more** pairs.

How many pairs that takes is the noise's business: where trials repeat to
0.01% (a GPU's SYNTHETIC) the first pair decides (`min_pairs` 1 once the
session has seen enough repeats to know the noise quiet, `NoiseTracker.quiet`);
on a 3%-noisy machine a close call runs to max_pairs and says so.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from enum import Enum
from typing import Any

from tuneup.config import TrainConfig
from tuneup.probe.stats import MEDIAN_EFFICIENCY, median, relative_spread
from tuneup.probe.types import PHASES

# Standard errors the gain's lower bound must clear the floor by. A comparison looks
# again after every pair, usually up to 5 or 6 times, so a single look's 2 would let a
# knob with no effect through several times as often: 2.4 is Pocock's boundary for 5 looks
# at a one-sided 2.5% (Pocock 1977), the group-sequential analogue of z = 1.96 for one
# look. Only a comparison whose estimate already clears the needed gain looks more often.
Z_ADOPT = 2.4
# Standard errors of optimism before a comparison is given up as ruled out: a real gain
# two needed gains away is ruled out by chance in under one comparison in fifty over all
# its looks (bench/repeatability.py's noisy scenario: a 5% knob on a 3%-noisy machine is
# found or left unresolved in 19 runs of 20 or more).
Z_FUTILE = 1.6
NORMAL_MAD = 1.4826  # a normal's standard deviation over its median absolute deviation
HL_EFFICIENCY = 1.047  # the Hodges-Lehmann estimate's standard error, in sigma / sqrt(n)
UNSTABLE = 0.08  # repeats that typically differ by more than this: say the machine is unstable
FLOOR = 0.02  # the smallest gain ever adopted
ONE_PAIR_REPEATS = 2  # repeats a phase's noise needs before one pair may decide
# A gain of 4x or more, at its lower bound, is decided by one pair whatever the noise:
# contention nothing reported (another job on the CPUs or the GPU) halves a probe's speed at
# worst, and no burst passes for that (the GPU-resident loader's 25x over CPU workers).
DECISIVE = 4.0
EXTEND = 3  # a promising comparison (estimate above the needed gain) may take 3 x max_pairs
WILD = 0.25  # a repeat this far off (and far outside the typical ones) was hit by a burst


class Verdict(str, Enum):
    """What a comparison decided so far."""

    ADOPT = "adopt"
    REJECT = "reject"
    UNRESOLVED = "unresolved"
    MORE = "more"


@dataclass(frozen=True)
class PairedEvidence:
    """A comparison's pairs and what they say.

    Attributes:
        ratios: b / a of each pair, in the order measured.
        verdict: adopt, reject, unresolved (at the most pairs), or measure more.
        speedup: the estimated ratio (Hodges-Lehmann, on the log scale).
        low, high: the median ratio's confidence bounds (est -+ z se, as ratios).
        needed: the gain the comparison had to clear (1 + max(floor, instability)).
        why: one sentence with the numbers.
    """

    ratios: tuple[float, ...]
    verdict: Verdict
    speedup: float | None
    low: float | None
    high: float | None
    needed: float
    why: str

    @property
    def pairs(self) -> int:
        return len(self.ratios)


def judge(
    pairs: Sequence[tuple[float, float]],
    *,
    sigma: float,
    needed: float,
    floor: float = FLOOR,
    min_pairs: int = 2,
    max_pairs: int = 4,
    z: float = Z_ADOPT,
    min_reject: int = 1,
    decisive: bool = True,
) -> PairedEvidence:
    """Decide on (a, b) pairs of samples/s: adopt b, reject it, or ask for more pairs.

    Args:
        pairs: (incumbent, candidate) FULL samples/s, measured side by side.
        sigma: the session's noise of one pair's log ratio (NoiseTracker.sigma).
        needed: the smallest relative gain worth adopting (NoiseTracker.needed).
        floor: the gain the lower confidence bound must clear.
        min_pairs: never adopt on fewer pairs (at least 1: one probe alone never decides).
        max_pairs: unresolved once this many pairs have neither shown nor ruled out the gain.
        z: standard errors of the adoption bound.
        min_reject: never give up on fewer pairs (the confirmation, which decides,
            waits for min_pairs either way).
        decisive: one pair beyond DECISIVE may adopt before min_pairs (False: the
            confirmation, which decides, waits for min_pairs whatever the gain).
    """
    if min_pairs < 1:
        raise ValueError(f"min_pairs must be at least 1, got {min_pairs}")
    need = max(needed, floor)
    ratios = tuple(b / a for a, b in pairs if a > 0 and b > 0)
    if not ratios:
        return PairedEvidence((), Verdict.MORE, None, None, None, 1 + need, "no pair yet")
    logs = [math.log(r) for r in ratios]
    n = len(logs)
    # Below four pairs one wild pair is more than the Hodges-Lehmann estimate can
    # absorb (it breaks down past 29% outliers), and so are two in five: the plain median
    # (which holds to 50%) wherever a pair lies wildly off the rest.
    centre = median(logs)
    wild = any(abs(x - centre) > math.log1p(WILD) for x in logs)
    robust = n < 4 or wild
    est = centre if robust else hodges_lehmann(logs)
    spread = NORMAL_MAD * median([abs(x - centre) for x in logs]) if n >= 2 else 0.0
    s = max(sigma, spread)
    se = (MEDIAN_EFFICIENCY if robust else HL_EFFICIENCY) * s / math.sqrt(n)
    agree = sum(1 for x in logs if x > 0) >= math.ceil(0.75 * n)
    low, high = math.exp(est - z * se), math.exp(est + z * se)
    speedup = math.exp(est)
    # One pair whose noise nothing measured (no repeat, no trials' spread: a zero-width
    # interval, as a forged journal line gives) decides nothing.
    known = se > 0 or n >= 2
    likely = f"likely {low:.2f}-{high:.2f}x" if known else "its noise not measured yet"
    numbers = (
        f"{speedup:.3f}x over {n} pair{'s' if n != 1 else ''} "
        f"({likely}), needed above {1 + need:.3f}x"
    )
    # Fewer pairs than min_pairs may decide a gain no hidden burst explains: beyond
    # DECISIVE even at its lower bound.
    enough = known and (n >= min_pairs or (decisive and est - z * se > math.log(DECISIVE)))
    if agree and enough and est - z * se > math.log1p(floor) and est > math.log1p(need):
        verdict, why = Verdict.ADOPT, f"faster: {numbers}"
    elif known and n >= min_reject and est + Z_FUTILE * se < math.log1p(need):
        verdict, why = Verdict.REJECT, f"not faster: {numbers}"
    elif n >= max_pairs and (n >= EXTEND * max_pairs or est <= math.log1p(need)):
        verdict, why = Verdict.UNRESOLVED, f"unresolved at this machine's noise: {numbers}"
    else:
        verdict, why = Verdict.MORE, f"undecided: {numbers}"
    return PairedEvidence(ratios, verdict, speedup, low, high, 1 + need, why)


def hodges_lehmann(xs: Sequence[float]) -> float:
    """The median of all pairwise means (x_i + x_j) / 2, i <= j: a robust centre."""
    if not xs:
        raise ValueError("hodges_lehmann of an empty sequence")
    return median([(a + b) / 2 for i, a in enumerate(xs) for b in xs[i:]])


@dataclass
class NoiseTracker:
    """The session's measured noise: repeats of one configuration, and the trials' spread.

    Feed it every comparable measurement with `seen(key, sps)` in the order
    they ran; consecutive measurements of the same key make a repeat.
    """

    floor: float = FLOOR
    trial_sigma: float = 0.0
    repeats: list[float] = field(default_factory=list)  # log ratios of consecutive repeats
    first: dict[str, float] = field(default_factory=dict)
    last: dict[str, float] = field(default_factory=dict)  # the chains of repeats
    latest: dict[str, float] = field(default_factory=dict)  # for drift: never restarted

    def set_trials(self, probes: Sequence[Sequence[float]]) -> None:
        """The trials' own noise: the difference of two probes' medians of their trials.

        Each probe's spread is its own (the median over `probes`), so two
        probes at different speeds do not pass for noisy trials.
        """
        spreads, per_probe = [], []
        for trials in probes:
            finite = [t for t in trials if math.isfinite(t) and t > 0]
            if len(finite) >= 2:
                spreads.append(relative_spread(finite))
                per_probe.append(len(finite))
        if not spreads:
            return
        self.trial_sigma = MEDIAN_EFFICIENCY * median(spreads) * math.sqrt(2.0 / median(per_probe))

    def seen(self, key: str, sps: float) -> None:
        """One more measurement of the configuration `key`."""
        if not (sps > 0 and math.isfinite(sps)):
            return
        if key in self.last:
            self.repeats.append(math.log(sps / self.last[key]))
        self.first.setdefault(key, sps)
        self.last[key] = sps
        self.latest[key] = sps

    def shifted(self) -> None:
        """The machine changed speed just now (two anchors disagreed): start the repeats afresh.

        The latest repeat (the anchor that showed the shift) and any later
        measurement compared with one from before the shift would count the
        machine's jump as noise, so the jump's repeat is dropped and every
        configuration's chain restarts from its next measurement.
        """
        if self.repeats:
            self.repeats.pop()
        self.last.clear()

    def moved(self, key: str) -> float | None:
        """How far `key`'s latest measurement is from its first (drift), as a ratio - 1."""
        if key not in self.first:
            return None
        return self.latest[key] / self.first[key] - 1.0

    @property
    def sigma(self) -> float:
        """Noise of one pair's log ratio: from the repeats, never below the trials' own.

        The root mean square of the repeats within three robust deviations
        (1.4826 x median |r|) of zero: nearly as efficient as the plain
        standard deviation, while a step change of the machine's speed is left
        out. Few repeats give a rough figure, so it is raised by its own
        standard error (1 / sqrt(2n)) until there are more.
        """
        if not self.repeats:
            return self.trial_sigma
        robust = NORMAL_MAD * median([abs(r) for r in self.repeats])
        kept = [r for r in self.repeats if abs(r) <= 3 * robust] or self.repeats
        rms = math.sqrt(sum(r * r for r in kept) / len(kept))
        return max(self.trial_sigma, rms * (1 + 1 / math.sqrt(2 * len(kept))))

    @property
    def quiet(self) -> bool:
        """Whether this noise is known, steady and far under the floor (a GPU's SYNTHETIC):
        one pair then decides, and a lone candidate needs no second anchor. Before
        ONE_PAIR_REPEATS repeats nothing is known quiet, and a single repeat off by WILD
        (a burst nothing reported) is enough to say it is not."""
        if len(self.repeats) < ONE_PAIR_REPEATS or self.unstable:
            return False
        if any(abs(r) > math.log1p(WILD) for r in self.repeats):
            return False
        return self.sigma <= self.floor / 2

    @property
    def probe_sigma(self) -> float | None:
        """The noise of one pair as its repeats alone say (robust, as `sigma`, without the
        trials' floor); None before ONE_PAIR_REPEATS repeats."""
        if len(self.repeats) < ONE_PAIR_REPEATS:
            return None
        return NORMAL_MAD * median([abs(r) for r in self.repeats])

    @property
    def instability(self) -> float | None:
        """How much repeats of one configuration typically differ (None before any repeat)."""
        if not self.repeats:
            return None
        return median([abs(math.expm1(r)) for r in self.repeats])

    @property
    def needed(self) -> float:
        """The smallest gain worth adopting: the floor, or the instability when larger."""
        return max(self.floor, self.instability or 0.0)

    @property
    def wild(self) -> int:
        """Repeats far outside the typical ones (bursts of load nothing reported)."""
        if len(self.repeats) < 4:
            return 0
        robust = NORMAL_MAD * median([abs(r) for r in self.repeats])
        return sum(1 for r in self.repeats if abs(r) > max(3 * robust, math.log1p(WILD)))

    @property
    def bursty(self) -> bool:
        """Whether unexplained bursts hit one repeat in ten or more: one probe is then no guide."""
        return self.wild >= 2 and self.wild >= 0.1 * len(self.repeats)

    def resolvable(self, pairs: int) -> float:
        """The smallest gain `pairs` pairs could establish here: the session's noise margin."""
        se = HL_EFFICIENCY * self.sigma / math.sqrt(max(pairs, 1))
        return max(self.needed, math.expm1(math.log1p(self.floor) + Z_ADOPT * se))

    @property
    def unstable(self) -> bool:
        return (self.instability or 0.0) >= UNSTABLE or self.bursty

    def note(self) -> str | None:
        """One line for the top of the screen when the machine is unstable; None when it is not."""
        if (self.instability or 0.0) >= UNSTABLE:
            return (
                f"machine unstable: repeats of the same config differ by "
                f"{100 * (self.instability or 0.0):.0f}%; gains below that are not reported"
            )
        if self.bursty:
            return (
                f"machine unstable: {self.wild} of {len(self.repeats)} repeats of the same "
                f"config differed by more than {100 * WILD:.0f}% (load bursts tuneup did not "
                "see); every candidate is measured in pairs"
            )
        return None

    def to_dict(self) -> dict[str, object]:
        return {
            "instability_pct": None if self.instability is None else 100 * self.instability,
            "repeats": len(self.repeats),
            "pair_noise_pct": 100 * math.expm1(self.sigma),
            "needed_pct": 100 * self.needed,
            "resolvable_pct": 100 * self.resolvable(5),
            "unstable": self.unstable,
            "wild_repeats": self.wild,
            "note": self.note(),
        }


def noise_group(phase: str, values: Mapping[str, Any] | None) -> str:
    """Whose noise a measurement shares: SYNTHETIC's is the model's, one for the session;
    IO's and FULL's are their loader's (a GPU-resident loader repeats to 0.01% where CPU
    workers vary by 5%, however many), so a comparison is judged by its own loader's."""
    if phase == "synthetic" or values is None:
        return phase
    loader = values.get("data_loader_config", TrainConfig.data_loader_config)
    return f"{phase}|{loader}"


@dataclass
class PhaseNoise:
    """The session's noise: per phase (pooled, for what the session reports), and per phase
    and data path (`noise_group`, for judging a comparison), and the probes that stayed
    contended.

    Every probe's measured phases are told to their trackers (`seen`): consecutive
    measurements of one configuration in one phase make its repeats, and each probe's
    trials add to its group's trial spread.
    """

    floor: float = FLOOR
    trackers: dict[str, NoiseTracker] = field(default_factory=dict)
    trials: dict[str, list[list[float]]] = field(default_factory=dict)
    contended: int = 0

    def of(self, phase: str, values: Mapping[str, Any] | None = None) -> NoiseTracker:
        """The tracker of `phase` pooled over the session, or of the data path of `values`."""
        group = noise_group(phase, values)
        if group not in self.trackers:
            self.trackers[group] = NoiseTracker(floor=self.floor)
        return self.trackers[group]

    def seen(
        self,
        key: str,
        rates: Mapping[str, float],
        values: Mapping[str, Any] | None = None,
        trials: Mapping[str, Sequence[float]] | None = None,
    ) -> None:
        """One more measurement of configuration `key` (knob `values`): its samples/s by
        phase, and its trials."""
        for phase, sps in rates.items():
            self.of(phase).seen(key, sps)
            if values is None:
                continue
            grouped = self.of(phase, values)
            if grouped is not self.of(phase):
                grouped.seen(key, sps)
            if trials and trials.get(phase):
                kept = self.trials.setdefault(noise_group(phase, values), [])
                kept.append(list(trials[phase]))
                grouped.set_trials(kept[-8:])

    def shifted(self, phase: str, values: Mapping[str, Any] | None = None) -> None:
        """The machine changed speed just now: the phase's chains start afresh."""
        self.of(phase).shifted()
        grouped = self.of(phase, values)
        if grouped is not self.of(phase):
            grouped.shifted()

    def min_pairs(self, phase: str, values: Mapping[str, Any] | None = None) -> int:
        """The fewest pairs a comparison on `phase` adopts on: one where its noise is known
        quiet (NoiseTracker.quiet), else two."""
        return 1 if self.of(phase, values).quiet else 2

    @property
    def full(self) -> NoiseTracker:
        return self.of("full")

    def to_dict(self) -> dict[str, object]:
        """FULL's figures (the session's headline noise), with each phase's beside them."""
        block = dict(self.full.to_dict())
        block["contended_probes"] = self.contended
        block["phases"] = {
            phase: {
                "pair_noise_pct": 100 * math.expm1(self.of(phase).sigma),
                "instability_pct": None
                if self.of(phase).instability is None
                else 100 * (self.of(phase).instability or 0.0),
                "repeats": len(self.of(phase).repeats),
            }
            for phase in PHASES
            if phase in self.trackers
        }
        return block
