"""A stage's screen: each candidate once, between two probes of the incumbent (A B.. A).

Each screen is compared with the incumbent as it stood at that moment
(interpolated on the log scale between the two anchors), on the phase that
judges the stage, and a candidate next to an anchor already forms a pair with
it. Then the candidates are ordered by promise, and a hopeless one is known
before any pair is spent on it.
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass
from typing import Any

from tuneup.probe.conditions import unlike
from tuneup.probe.stats import MEDIAN_EFFICIENCY
from tuneup.probe.types import Candidate, ProbeResult
from tuneup.tuning.search.paired import FLOOR, Z_FUTILE, NoiseTracker
from tuneup.tuning.search.search_records import StagePlan
from tuneup.tuning.search.search_runner import SearchRunner, Series, comparable

TIE_CAP = 0.10  # screens this close to the best may tie, whatever the noise (and the needed gain)


@dataclass(frozen=True)
class Screen:
    """A candidate's first probe, what the incumbent stood at then, and the pairs it makes."""

    cand: Candidate
    result: ProbeResult
    incumbent_sps: float  # the incumbent at that moment: between the two anchors
    pairs: tuple[tuple[float, float], ...]  # with an anchor measured right before or after

    @property
    def gain(self) -> float:
        """ln(screen / incumbent then), on the phase the candidate is judged on."""
        return math.log((self.result.rate(self.cand.judged) or 0.0) / self.incumbent_sps)


def screen_again(
    plan: StagePlan,
    values: dict[str, Any],
    screen: Screen,
    incumbent: Series,
    runner: SearchRunner,
    phase: str,
) -> Screen | None:
    """The candidate measured once more right after the incumbent's latest probe."""
    anchor = incumbent.latest_of(phase)
    if anchor is None:
        return None
    cand = dataclasses.replace(screen.cand, stop_below_sps=None)  # a pair's probe runs whole
    result = runner.run(plan.name, cand, {**values, **cand.values})
    if not comparable(result, phase):
        return None
    paired = incumbent.results and unlike(incumbent.results[-1], result) is None
    return Screen(cand, result, anchor, ((anchor, result.rate(phase) or 0.0),) if paired else ())


def close_screen(
    asked: Candidate,
    plan: StagePlan,
    values: dict[str, Any],
    incumbent: Series,
    runner: SearchRunner,
    ok: list[tuple[Candidate, ProbeResult, int]],
    anchor: float,
    anchor_at: int,
) -> tuple[list[Screen], bool]:
    """Measure the closing anchor (`asked`: the incumbent, on the stage's phase); the screens,
    and whether the anchors disagree (a shift).

    The shift is judged against the noise before the closing anchor, whose own
    repeat would otherwise pass the shift off as noise.
    """
    phase = asked.judged
    sigma = runner.noise.of(phase, values).sigma
    closing = runner.run(plan.name, asked, values)
    incumbent.add(closing)
    closing_sps = closing.rate(phase) if comparable(closing, phase) else None
    closing_at = len(runner.probes) - 1
    screens = [
        _alike(
            _screen(c, r, at, (anchor, anchor_at), (closing_sps, closing_at)),
            runner.probes[anchor_at if at == anchor_at + 1 else closing_at],
        )
        for c, r, at in ok
    ]
    shifted = closing_sps is not None and abs(
        math.log(closing_sps / anchor)
    ) > 2 * sigma + math.log1p(FLOOR)
    return screens, shifted


def _alike(screen: Screen, anchor: ProbeResult) -> Screen:
    """The screen without its pair where the anchor it pairs with ran under unlike
    conditions (probe/conditions.py): the screen still ranks the candidate, pairs decide."""
    if not screen.pairs or unlike(anchor, screen.result) is None:
        return screen
    return dataclasses.replace(screen, pairs=())


def _screen(
    cand: Candidate,
    result: ProbeResult,
    at: int,
    opening: tuple[float, int],
    closing: tuple[float | None, int],
) -> Screen:
    """A screen against the incumbent interpolated between the anchors, and its adjacent pairs."""
    (a0, i0), (a1, i1) = opening, closing
    b = result.rate(cand.judged) or 0.0
    if a1 is None:
        return Screen(cand, result, a0, ((a0, b),) if at == i0 + 1 else ())
    weight = (at - i0) / (i1 - i0)
    expected = math.exp((1 - weight) * math.log(a0) + weight * math.log(a1))
    # One pair per candidate probe at most: two pairs sharing it would count its noise twice.
    if at == i0 + 1:
        return Screen(cand, result, expected, ((a0, b),))
    if at == i1 - 1:
        return Screen(cand, result, expected, ((a1, b),))
    return Screen(cand, result, expected, ())


def by_promise(screens: list[Screen], sigma: float, needed: float) -> list[Screen]:
    """Candidates in the order to pursue them: best screen first, but screens within two
    pairs' noise and the smallest gain the session can establish (10% at most) of the best
    count as a tie, won by the one the stage lists first: two equally good variants do not
    swap from run to run on a coin toss, and a difference too small to adopt is too small
    to prefer."""
    top = max(s.gain for s in screens)
    # Two pairs' noise and the resolvable gain, at most 10% (an early estimate can be wild).
    band = min(2 * sigma + math.log1p(needed), math.log1p(TIE_CAP))
    tied = [s for s in screens if s.gain >= top - band]
    rest = sorted((s for s in screens if s not in tied), key=lambda s: s.gain, reverse=True)
    return tied + rest


def hopeless(gain: float, noise: NoiseTracker) -> bool:
    """True when a screen's gain stays under the needed gain even with the optimism that
    rules a comparison out (paired.judge's Z_FUTILE standard errors of one pair)."""
    margin = Z_FUTILE * MEDIAN_EFFICIENCY * noise.sigma
    return math.log1p(max(gain, -0.99)) + margin < math.log1p(noise.needed)
