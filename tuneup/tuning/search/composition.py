"""An adopted configuration, measured whole: does FULL follow from IO and SYNTHETIC?

A stage judges its knob on the phase the knob moves (IO for the loader,
SYNTHETIC for the model's arithmetic). Whether that gain reaches the real loop
(FULL) depends on how loading and compute overlap: FULL is bounded by
min(IO, SYNTHETIC), and the tutorial's logs show it close to that bound when
the two are far apart (0.985 at 5.7x, 0.975 with DALI) and 19-29% below it
when they are close or the loader is bursty (0.71 with 16 workers, 0.81 with
DALI + AMP). Two checks follow from that bound.

Before: a knob that moves one phase cannot move FULL while the other phase is
the wall, far below both its figures (`beyond_reach`: the other phase under
both the incumbent's and the candidate's by more than BOUND_RATIO, the
verdicts' data-bound/compute-bound line). Such a candidate is not adopted,
and the stage says what bounds FULL (a loader twice as fast for a model that
takes a tenth of its batches is no faster).

After: the configuration a stage adopts is measured once more with every
phase (IO carried where its data path was measured), and its FULL is checked
against min(IO, SYNTHETIC). What share of that bound FULL reaches is the
machine's own (a GPU node's loader workers run beside the trainer on cores of
their own: 0.99 on the first H200 run; on a 2-core machine loading and compute
take turns on the same cores: 0.6), so the share is held against the
incumbent's, measured the same way (1 where none was):

* within the noise (`tolerance`: FULL's and the bound's pair noise, twice
  over, the session's needed gain, and never below 5%), FULL follows from IO
  and SYNTHETIC and the decision stands on its phase;
* beyond it, the stage is decided on FULL: the incumbent and the candidate in
  alternating FULL pairs, by the same paired rule. The candidate is adopted
  only if FULL shows its gain, and the output says the stage was decided on
  FULL and why.

A check that does not run ok (a loss the guard rejects, a crash) keeps the
incumbent.
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass
from typing import Any

from tuneup.probe.types import Candidate, ProbeResult
from tuneup.tuning.search.paired import NoiseTracker, PairedEvidence, Verdict
from tuneup.tuning.search.search_records import StagePlan
from tuneup.tuning.search.search_runner import SearchRunner, Series, comparable, failure_text

BOUND_RATIO = 1.25
"""One phase is the wall when the other is this many times it (tuning.verdicts.BOUND_RATIO):
closer than that, both shape FULL."""

COMPOSITION_FLOOR = 0.05
"""FULL within 5% of min(IO, SYNTHETIC) always counts as following from them: the
tutorial's good overlaps came to 1.5-3% under the bound, its failures to 19-29%."""


@dataclass(frozen=True)
class CheckOutcome:
    """What the adopted configuration's whole probe said.

    Attributes:
        upheld: the adoption stands (on its phase, or decided again on FULL).
        sentence: FULL against min(IO, SYNTHETIC), and what followed, in words.
        evidence: the FULL comparison, when the stage was decided on FULL.
        failure: a probe of the check that did not run ok.
    """

    upheld: bool
    sentence: str
    evidence: PairedEvidence | None = None
    failure: ProbeResult | None = None


def tolerance(*noises: NoiseTracker) -> float:
    """How far FULL's share of min(IO, SYNTHETIC) may move and still follow from them: the
    shares compared are ratios of measured figures (FULL's and the bound's, the adopted
    configuration's and the incumbent's), so all their noises count (twice their combined
    pair noise), never less than the needed gain or 5%."""
    combined = math.sqrt(sum(n.sigma**2 for n in noises))
    return max(COMPOSITION_FLOOR, math.expm1(2 * combined), *(n.needed for n in noises))


def bound_of(result: ProbeResult) -> float | None:
    """min(IO, SYNTHETIC) of a probe (its IO may be carried from its data path's)."""
    io, syn = result.io_sps, result.synthetic_sps
    if not io or not syn or io <= 0 or syn <= 0:
        return None
    return min(io, syn)


def beyond_reach(
    judged: str, incumbent: ProbeResult | None, before: float, after: float
) -> str | None:
    """Why a gain on `judged` cannot reach FULL now, or None when it may.

    Args:
        judged: the phase the stage judged ("io" or "synthetic"; FULL is always reached).
        incumbent: the incumbent's latest probe of every phase (its other phase).
        before, after: the judged phase's samples/s, incumbent's and candidate's.
    """
    if judged not in ("io", "synthetic") or incumbent is None:
        return None
    other = "synthetic" if judged == "io" else "io"
    wall = incumbent.synthetic_sps if other == "synthetic" else incumbent.io_sps
    if not wall or wall <= 0 or wall * BOUND_RATIO > min(before, after):
        return None
    return (
        f"{other.upper()} bounds FULL at {_sps(wall)} samples/s, far under {judged.upper()}'s "
        f"{_sps(before)} -> {_sps(after)}: the knob moves nothing there while "
        f"{'the model' if other == 'synthetic' else 'the loader'} is the wall"
    )


def _binding(result: ProbeResult | None) -> str:
    """The phase that bounds a probe's FULL: the slower of IO and SYNTHETIC."""
    if result is None:
        return "full"
    io, syn = result.io_sps or math.inf, result.synthetic_sps or math.inf
    return "io" if io < syn else "synthetic"


def overlap(result: ProbeResult | None) -> float:
    """The share of min(IO, SYNTHETIC) a probe's FULL reached (1 where it is not known, and
    at most 1: FULL cannot beat its bound, a share above it is the bound's noise)."""
    bound = bound_of(result) if result is not None else None
    if result is None or bound is None or not result.full_sps:
        return 1.0
    return min(1.0, result.full_sps / bound)


def check_adoption(
    runner: SearchRunner,
    plan: StagePlan,
    values: dict[str, Any],
    cand: Candidate,
    series: Series,
    incumbent: Series,
    max_pairs: int,
) -> CheckOutcome:
    """Measure the adopted configuration whole and check FULL against min(IO, SYNTHETIC).

    Args:
        runner: the search's runner.
        plan: the stage.
        values: the incumbent's knob values.
        cand: the adopted candidate.
        series: the candidate's probes (the check joins them).
        incumbent: the incumbent's probes (a FULL decision's join them).
        max_pairs: a FULL decision's most pairs.
    """
    adopted = {**values, **cand.values}
    # profiled: where the adopted configuration's step time goes, beside the baseline's
    whole = dataclasses.replace(cand, judged="full", whole=True, stop_below_sps=None, profile=True)
    check = runner.run(plan.name, whole, adopted)
    if check.ok and check.contended:
        # Measured again and still contended: no figure to hold FULL against, and no
        # reason to doubt the stage's own pairs.
        return CheckOutcome(True, "its check of every phase ran under contention: not judged")
    if not comparable(check):
        how = failure_text(check) if check.ok else f"ended {failure_text(check)}"
        return CheckOutcome(False, f"its check of every phase did not hold: it {how}", None, check)
    series.add(check)
    full, bound = check.full_sps or 0.0, bound_of(check)
    if bound is None:
        return CheckOutcome(True, f"FULL {_sps(full)} (IO or SYNTHETIC not measured apart)")
    incumbent_whole = runner.latest_whole(values)
    ratio, expected = min(1.0, full / bound), overlap(incumbent_whole)
    said = f"FULL {_sps(full)} against min(IO, SYNTHETIC) {_sps(bound)} ({ratio:.2f}"
    said += f"; the incumbent's {expected:.2f})" if expected != 1.0 else ")"
    tol = tolerance(runner.noise.of("full", values), runner.noise.of(_binding(check), values))
    if plan.judged == "full" or abs(math.log(ratio / expected)) <= math.log1p(tol):
        return CheckOutcome(True, f"{said}: FULL follows from them")
    return _decide_on_full(
        runner,
        plan,
        values,
        cand,
        series,
        incumbent,
        max_pairs,
        check,
        f"{said}, beyond the noise ({100 * tol:.0f}%): decided on FULL",
    )


def _decide_on_full(
    runner: SearchRunner,
    plan: StagePlan,
    values: dict[str, Any],
    cand: Candidate,
    series: Series,
    incumbent: Series,
    max_pairs: int,
    check: ProbeResult,
    said: str,
) -> CheckOutcome:
    """The incumbent against the candidate in FULL pairs; the first pairs the check."""
    asked = Candidate("incumbent", {}, judged="full", whole=False)
    first = runner.run(plan.name, asked, values)
    incumbent.add(first)
    pairs = []
    if comparable(first) and comparable(check):
        pairs.append((first.full_sps or 0.0, check.full_sps or 0.0))
    found = runner.compare(
        plan.name,
        asked,
        values,
        dataclasses.replace(cand, judged="full", whole=False, stop_below_sps=None),
        {**values, **cand.values},
        base_series=incumbent,
        cand_series=series,
        rule={
            "min_pairs": runner.noise.min_pairs("full", values),
            "max_pairs": max_pairs,
            "min_reject": 1,
        },
        phase="full",
        pairs=pairs,
    )
    evidence = found.evidence
    if evidence.verdict is Verdict.ADOPT:
        return CheckOutcome(
            True, f"{said}: it holds there ({evidence.why})", evidence, found.failure
        )
    return CheckOutcome(
        False, f"{said}, and FULL did not show it ({evidence.why})", evidence, found.failure
    )


def _sps(value: float) -> str:
    return f"{value:.1f}" if value < 10 else f"{value:.0f}"
