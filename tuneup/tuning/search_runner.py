"""Running the search's probes: measured or resumed, guarded, recorded, compared in pairs.

`SearchRunner` runs probes through `measure` (or takes them from `already`),
marks the ones whose loss went wrong as diverged (guard.py), tells the noise
tracker every comparable figure, and compares two configurations in
alternating pairs (paired.judge). A `Series` is every comparable probe of one
configuration.

Probes are told apart by their knob values and their ranks (`types.probe_key`).
"""

from __future__ import annotations

import dataclasses
import itertools
from dataclasses import dataclass
from typing import Any

from tuneup.probe.stats import iqr_pct, median
from tuneup.probe.types import Candidate, ProbeResult, Status, probe_key
from tuneup.tuning.guard import loss_verdict
from tuneup.tuning.paired import EXTEND, WILD, NoiseTracker, PairedEvidence, Verdict, judge
from tuneup.tuning.search_records import (
    BASELINE,
    INCUMBENT,
    Already,
    BaselineFailed,
    Measure,
    StagePlan,
)

CONTENDED_RETRIES = 2  # re-measures of a probe that ran under contention


class SearchRunner:
    """Runs probes through `measure` (or takes them from `already`), guards and records them.

    Every comparable measurement is told to the noise tracker; one that ran
    under contention is measured again first (CONTENDED_RETRIES times at most).
    """

    def __init__(
        self, measure: Measure, already: Already | None, noise: NoiseTracker, guard: bool = True
    ) -> None:
        self.measure = measure
        self.already = already
        self.noise = noise
        self.guard = guard  # False: `measure` applies the loss guard itself (ProbeSession)
        self.probes: list[ProbeResult] = []
        self.reference: ProbeResult | None = None
        self.reference_values: dict[str, Any] = {}
        self.baseline_runs: list[ProbeResult] = []
        self.last_key: str | None = None  # the configuration of the latest probe
        self.pairs = 0  # A/B pairs started (Candidate.pair numbers them)

    def run(
        self, stage: str, cand: Candidate, values: dict[str, Any], *, resume: bool = True
    ) -> ProbeResult:
        for attempt in range(CONTENDED_RETRIES + 1):
            result = self._once(stage, cand, values, resume=resume)
            if not (result.ok and result.contended) or attempt == CONTENDED_RETRIES:
                break
        if result.ok and result.contended:
            self.noise.contended += 1  # it stayed contended: it counts, and says so
        self.last_key = probe_key(values, cand.ranks)
        if comparable(result) and not cand.reference:
            self.noise.seen(self.last_key, result.full_sps)  # type: ignore[arg-type]
        return result

    def _once(
        self, stage: str, cand: Candidate, values: dict[str, Any], *, resume: bool
    ) -> ProbeResult:
        result = self.already(stage, cand.label) if (self.already and resume) else None
        if result is None:
            result = self.measure(stage, cand, values)
        if self.guard and not cand.reference:  # a reference changes the arithmetic (noddp)
            result = self._guard(result, values)
        self.probes.append(result)
        return result

    def baseline(self, values: dict[str, Any], repeats: int) -> ProbeResult:
        runs = []
        for _ in range(repeats):
            result = self.run(BASELINE, Candidate(BASELINE, {}), values)
            if not ran(result):  # a contended baseline still counts: it is all there is
                raise BaselineFailed(result)  # measure() already tried it again where it could
            runs.append(result)
        # Repeats far apart (one of them hit by something nothing reported): measure
        # again, twice at most, so the median and the noise do not rest on a wild one.
        while len(runs) < repeats + 2 and len(runs) > 1 and _disagree(runs):
            runs.append(self.run(BASELINE, Candidate(BASELINE, {}), values))
        self.baseline_runs = [r for r in runs if ran(r)]
        first = Series(self.baseline_runs).summary()
        self.reference, self.reference_values = first, dict(values)
        return first

    def skip(self, plan: StagePlan, values: dict[str, Any]) -> None:
        self.probes.append(
            ProbeResult(plan.name, {}, dict(values), Status.SKIPPED, plan.skip_reason or "")
        )

    def pair(
        self,
        stage: str,
        values: dict[str, Any],
        cand: Candidate,
        cand_values: dict[str, Any],
        *,
        candidate_first: bool,
        base: Candidate | None = None,
        resume: bool = True,
    ) -> tuple[ProbeResult, ProbeResult]:
        """One A/B pair, in the order asked: (incumbent's probe, candidate's probe)."""
        self.pairs += 1
        base = dataclasses.replace(base or Candidate(INCUMBENT, {}), pair=self.pairs)
        cand = dataclasses.replace(cand, pair=self.pairs)
        if candidate_first:
            b = self.run(stage, cand, cand_values, resume=resume)
            a = self.run(stage, base, values, resume=resume)
        else:
            a = self.run(stage, base, values, resume=resume)
            b = self.run(stage, cand, cand_values, resume=resume)
        return a, b

    def compare(
        self,
        stage: str,
        base: Candidate,
        base_values: dict[str, Any],
        cand: Candidate,
        cand_values: dict[str, Any],
        *,
        base_series: Series,
        cand_series: Series,
        rule: dict[str, int],
        pairs: list[tuple[float, float]] | None = None,
        max_failed: int | None = None,
        resume: bool = True,
    ) -> Comparison:
        """Alternating A/B pairs (A B, B A, ...) until paired.judge adopts or rejects.

        Args:
            pairs: pairs already measured (a stage's screen next to an anchor).
            base_series, cand_series: where each side's comparable probes are kept.
            rule: judge's min_pairs, max_pairs and min_reject.
            max_failed: pairs that may fail (a probe not ok, or contended) before the
                comparison gives up; None: the candidate failing ends it at once, as a
                stage's does (its failure is the answer), and a failed incumbent costs a pair.
        """
        noise = self.noise

        def decide(measured: list[tuple[float, float]]) -> PairedEvidence:
            return judge(
                measured, sigma=noise.sigma, needed=noise.needed, floor=noise.floor, **rule
            )

        found = Comparison(list(pairs or []), decide(list(pairs or [])))
        for _ in range(2 * EXTEND * rule["max_pairs"]):  # failed pairs count: the loop ends
            if found.evidence.verdict is not Verdict.MORE:
                break
            first = len(found.pairs) % 2 == 1
            a, b = self.pair(
                stage,
                base_values,
                cand,
                cand_values,
                candidate_first=first,
                base=base,
                resume=resume,
            )
            if max_failed is None and not ran(b):
                found.failure = b
                found.evidence = dataclasses.replace(
                    found.evidence,
                    verdict=Verdict.REJECT,
                    why="it did not run ok when measured again",
                )
                return found
            cand_series.add(b)
            base_series.add(a)
            if comparable(a) and comparable(b):
                found.pairs.append((a.full_sps, b.full_sps))  # type: ignore[arg-type]
            else:
                found.failed += 1
                if max_failed is not None and found.failed > max_failed:
                    break
            found.evidence = decide(found.pairs)
        if found.evidence.verdict is Verdict.MORE:  # too many pairs failed
            found.evidence = dataclasses.replace(
                found.evidence,
                verdict=Verdict.REJECT,
                why=f"{found.failed} pair(s) did not run ok",
            )
        return found

    def _guard(self, result: ProbeResult, values: dict[str, Any]) -> ProbeResult:
        """Mark an ok probe whose loss went wrong as diverged (guard.py says when).

        Another batch size is compared at equal samples seen, not at equal steps.
        """
        if result.status is not Status.OK:
            return result
        reference = self.reference.losses if self.reference is not None else None
        reason = loss_verdict(result.losses, values, reference, self.reference_values)
        if reason is None:
            return result
        return dataclasses.replace(result, status=Status.DIVERGED, reason=reason)


@dataclass
class Series:
    """Every comparable probe of one configuration, in the order measured."""

    results: list[ProbeResult]

    def add(self, result: ProbeResult) -> None:
        if comparable(result):
            self.results.append(result)

    @property
    def latest(self) -> float | None:
        return self.results[-1].full_sps if self.results else None

    def summary(self) -> ProbeResult:
        """One result for the configuration: medians over its probes, trials pooled."""
        if len(self.results) == 1:
            return self.results[0]
        first = self.results[0]

        def mid(name: str) -> float | None:
            found = [getattr(r, name) for r in self.results if getattr(r, name) is not None]
            return median(found) if found else None

        pooled = [t for r in self.results for t in r.full_sps_trials]
        return dataclasses.replace(
            first,
            io_sps=mid("io_sps"),
            synthetic_sps=mid("synthetic_sps"),
            full_sps=mid("full_sps"),
            full_sps_trials=pooled,
            iqr_pct=iqr_pct(pooled) if pooled else first.iqr_pct,
        )


@dataclass
class Comparison:
    """What `SearchRunner.compare` measured: the pairs, what they say, and what failed."""

    pairs: list[tuple[float, float]]
    evidence: PairedEvidence
    failed: int = 0
    failure: ProbeResult | None = None  # the candidate's probe that did not run


def _disagree(runs: list[ProbeResult]) -> bool:
    """Whether no two repeats of one configuration agree within WILD of each other."""
    speeds = sorted(r.full_sps for r in runs if ran(r) and r.full_sps)
    return len(speeds) > 1 and all(b > (1 + WILD) * a for a, b in itertools.pairwise(speeds))


def ran(result: ProbeResult) -> bool:
    """It ran ok and measured FULL (it may still have run under contention)."""
    return result.ok and result.full_sps is not None and result.full_sps > 0


def comparable(result: ProbeResult) -> bool:
    """It ran ok, measured FULL, and nothing else loaded the machine while it did."""
    return ran(result) and not result.contended
