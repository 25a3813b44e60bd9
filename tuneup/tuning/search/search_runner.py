"""Running the search's probes: measured or resumed, guarded, recorded, compared in pairs.

`SearchRunner` runs probes through `measure` (or takes them from `already`),
marks the ones whose loss went wrong as diverged (guard.py), tells the noise
of each phase every comparable figure, and compares two configurations in
alternating pairs on one phase (paired.judge). A `Series` is every comparable
probe of one configuration, read on one phase.

Probes are told apart by their knob values and their ranks (`types.probe_key`).
"""

from __future__ import annotations

import dataclasses
import itertools
import math
from dataclasses import dataclass, field
from typing import Any

from tuneup.probe.conditions import unlike
from tuneup.probe.stats import iqr_pct, median
from tuneup.probe.types import PHASES, Candidate, ProbeResult, Status, probe_key
from tuneup.tuning.search.guard import loss_verdict
from tuneup.tuning.search.load import LoadBound, MachineBusy
from tuneup.tuning.search.paired import EXTEND, WILD, PairedEvidence, PhaseNoise, Verdict, judge
from tuneup.tuning.search.search_records import (
    BASELINE,
    INCUMBENT,
    Already,
    BaselineFailed,
    Measure,
    StageCut,
    StagePlan,
)

FAILED_AGAIN = "it did not run ok when measured again"
CONTENDED_RETRIES = 2  # re-measures of a probe that ran under contention


class SearchRunner:
    """Runs probes through `measure` (or takes them from `already`), guards and records them.

    Every comparable measurement is told to its phases' noise; one that ran
    under contention is measured again first (CONTENDED_RETRIES times at most),
    and every contended probe counts against the load's bound (load.py), which
    stops the stage, or the ladder, when a busy machine has spoiled too many.
    """

    def __init__(
        self,
        measure: Measure,
        already: Already | None,
        noise: PhaseNoise,
        guard: bool = True,
        load: LoadBound | None = None,
    ) -> None:
        self.measure = measure
        self.already = already
        self.noise = noise
        self.guard = guard  # False: `measure` applies the loss guard itself (ProbeSession)
        self.load = load or LoadBound()
        self.probes: list[ProbeResult] = []
        self.reference: ProbeResult | None = None
        self.reference_values: dict[str, Any] = {}
        self.baseline_runs: list[ProbeResult] = []
        self.last_key: str | None = None  # the configuration of the latest probe
        self.pairs = 0  # A/B pairs started (Candidate.pair numbers them)
        # each key's first ok probe with its loss: a lookup, not a scan of every probe per
        # probe (a grid of 5184 probes spent 68 s of 73 s in that scan)
        self._with_losses: dict[str, ProbeResult] = {}

    def run(
        self, stage: str, cand: Candidate, values: dict[str, Any], *, resume: bool = True
    ) -> ProbeResult:
        if cand.loss and not cand.reference and self.losses_of(values) is not None:
            cand = dataclasses.replace(cand, loss=False)  # its curve is known: same seed
        if cand.trial_noise is None:
            cand = dataclasses.replace(cand, trial_noise=self.trial_noise(cand, values))
        result = self._once(stage, cand, values, resume=resume)
        for attempt in range(CONTENDED_RETRIES + 1):
            if not (result.ok and result.contended):
                break
            self.load.lost(stage, result)  # MachineBusy when it was one too many
            if attempt == CONTENDED_RETRIES or self.load.baseline_done():
                break
            try:
                result = self._once(stage, cand, values, resume=resume)
            except StageCut:  # no time to measure it again: it stays as it ran, contended
                break
        if result.ok and result.contended:
            self.noise.contended += 1  # it stayed contended: it counts, and says so
        elif result.ok and result.under_load:
            self.load.under_load(stage, result)  # kept; its time counts against the bound
        self.last_key = probe_key(values, cand.ranks)
        if not cand.reference and result.ok and not result.contended:
            rates = {p: r for p in PHASES if (r := result.rate(p)) is not None}
            trials = {p: result.trials_of(p) for p in rates}
            self.noise.seen(self.last_key, rates, values, trials)
        return result

    def trial_noise(self, cand: Candidate, values: dict[str, Any]) -> float | None:
        """How closely a probe's trials need agree: half the noise its phase's probes show
        from one to the next (a pair's noise over sqrt 2), where that is known; None: the
        budget's alone."""
        probe_sigma = self.noise.of(cand.judged, values).probe_sigma
        return None if probe_sigma is None else probe_sigma / (2 * math.sqrt(2))

    def losses_of(self, values: dict[str, Any]) -> ProbeResult | None:
        """The first ok probe of `values` that recorded its fixed-seed loss (None: none yet)."""
        return self._with_losses.get(probe_key(values))

    def latest_whole(self, values: dict[str, Any]) -> ProbeResult | None:
        """The latest ok probe of `values` that measured every phase it could (its IO may be
        carried): the source of a configuration's IO and SYNTHETIC figures."""
        key = probe_key(values)
        for result in reversed(self.probes):
            if comparable(result) and probe_key(result.config) == key and result.synthetic_sps:
                return result
        return None

    def _once(
        self, stage: str, cand: Candidate, values: dict[str, Any], *, resume: bool
    ) -> ProbeResult:
        result = self.already(stage, cand.label) if (self.already and resume) else None
        if result is None:
            result = self.measure(stage, cand, values)
        if self.guard and not cand.reference:  # a reference changes the arithmetic (noddp)
            result = self._guard(result, values)
        self.probes.append(result)
        if result.ok and result.losses:
            self._with_losses.setdefault(probe_key(result.config), result)
        return result

    def baseline(self, values: dict[str, Any], repeats: int) -> ProbeResult:
        """The baseline, `repeats` times (and up to twice more where they disagree); a repeat
        the time budget cuts (StageCut, once one ran ok) ends it with the repeats it has."""
        runs: list[ProbeResult] = []
        try:
            for repeat in range(repeats):
                # the first is profiled: where the baseline's step time goes (worker/profile.py)
                asked = Candidate(BASELINE, {}, profile=repeat == 0)
                result = self.run(BASELINE, asked, values)
                if not ran(result):  # a contended baseline still counts: it is all there is
                    raise BaselineFailed(result)  # measure() tried it again where it could
                runs.append(result)
            # Repeats far apart (one of them hit by something nothing reported): measure
            # again, twice at most, so the median and the noise do not rest on a wild one.
            while len(runs) < repeats + 2 and len(runs) > 1 and _disagree(runs):
                runs.append(self.run(BASELINE, Candidate(BASELINE, {}), values))
        except StageCut:
            if not runs:
                raise
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
        rule: dict[str, Any],
        phase: str = "full",
        pairs: list[tuple[float, float]] | None = None,
        max_failed: int | None = None,
        resume: bool = True,
        cut_decides: bool = False,
    ) -> Comparison:
        """Alternating A/B pairs (A B, B A, ...) of `phase` until paired.judge decides; a
        pair whose sides ran unalike (probe/conditions.py) is no evidence: another is run.

        Args:
            phase: the phase the pairs compare (`base` and `cand` are judged on it).
            pairs: pairs already measured (a stage's screen next to an anchor).
            base_series, cand_series: where each side's comparable probes are kept.
            rule: judge's min_pairs, max_pairs and min_reject.
            max_failed: pairs that may fail (not ok, or contended) before it gives up; None:
                a failed candidate ends it (the answer), a failed incumbent costs a pair.
            cut_decides: a StageCut (time ran short, or load.MachineBusy) ends the
                comparison unresolved with the pairs it has, `Comparison.cut` saying why
                (the confirmation's answer); otherwise it ends the stage.
        """
        noise = self.noise.of(phase, base_values)

        def decide(measured: list[tuple[float, float]]) -> PairedEvidence:
            return judge(
                measured, sigma=noise.sigma, needed=noise.needed, floor=noise.floor, **rule
            )

        found = Comparison(list(pairs or []), decide(list(pairs or [])))
        for _ in range(2 * EXTEND * rule["max_pairs"]):  # failed pairs count: the loop ends
            if found.evidence.verdict is not Verdict.MORE:
                break
            first = len(found.pairs) % 2 == 1
            try:
                a, b = self.pair(
                    stage,
                    base_values,
                    cand,
                    cand_values,
                    candidate_first=first,
                    base=base,
                    resume=resume,
                )
            except StageCut as cut:
                if not cut_decides:
                    raise
                return _cut(found, cut)
            if max_failed is None and not ran(b, phase):
                found.failure = b
                found.evidence = dataclasses.replace(
                    found.evidence, verdict=Verdict.REJECT, why=FAILED_AGAIN
                )
                return found
            cand_series.add(b)
            base_series.add(a)
            both, differ = comparable(a, phase) and comparable(b, phase), unlike(a, b)
            if both and differ is None:
                found.pairs.append((a.rate(phase), b.rate(phase)))  # type: ignore[arg-type]
            elif both and differ is not None:  # not evidence: another pair is measured
                found.unlike.append(differ)
                if len(found.unlike) >= rule["max_pairs"]:
                    break  # conditions that keep differing: unresolved, not probed on
            else:
                found.failed += 1
                if max_failed is not None and found.failed > max_failed:
                    break
            found.evidence = decide(found.pairs)
        if found.evidence.verdict is Verdict.MORE:
            found.evidence = _undecided(found)
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
    """Every comparable probe of one configuration, in the order measured (whatever phases
    each measured); `latest` reads one phase."""

    results: list[ProbeResult]

    def add(self, result: ProbeResult) -> None:
        if result.ok and not result.contended:
            self.results.append(result)

    @property
    def latest(self) -> float | None:
        return self.latest_of("full")

    def latest_of(self, phase: str) -> float | None:
        """The latest probe's samples/s of `phase`, when the latest probe measured it."""
        return self.results[-1].rate(phase) if self.results else None

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
    cut: str = ""  # why the time budget cut it short (compare's cut_decides)
    unlike: list[str] = field(default_factory=list)  # pairs not taken: why their sides differ


def _disagree(runs: list[ProbeResult]) -> bool:
    """Whether no two repeats of one configuration agree within WILD of each other."""
    speeds = sorted(r.full_sps for r in runs if ran(r) and r.full_sps)
    return len(speeds) > 1 and all(b > (1 + WILD) * a for a, b in itertools.pairwise(speeds))


def ran(result: ProbeResult, phase: str = "full") -> bool:
    """It ran ok and measured `phase` (it may still have run under contention)."""
    return result.ok and result.rate(phase) is not None


def comparable(result: ProbeResult, phase: str = "full") -> bool:
    """It ran ok, measured `phase`, and nothing else loaded the machine while it did."""
    return ran(result, phase) and not result.contended


def failure_text(result: ProbeResult, phase: str = "full") -> str:
    """Why a probe that is not `comparable` counts for nothing, in words: "contended (...)";
    "measured no FULL figure" where it ended ok all the same (its trials timed at 0 s: an
    infinite rate is no figure); else its status and reason, "oom (...)"."""
    if ran(result, phase) and result.contention is not None:
        return f"contended ({result.contention.note})"
    if result.ok:
        return f"measured no {phase.upper()} figure"
    detail = f" ({result.reason})" if result.reason else ""
    return f"{result.status.value}{detail}"


def _undecided(found: Comparison) -> PairedEvidence:
    """A comparison that ran out of pairs: unresolved where pairs were measured but their
    sides ran under unlike conditions (a pair is evidence only where they are alike: the
    stage says why), rejected where too many failed."""
    if found.unlike and found.failed <= len(found.unlike):
        return dataclasses.replace(
            found.evidence,
            verdict=Verdict.UNRESOLVED,
            why=(
                f"left unresolved: {len(found.unlike)} pair(s) not taken as evidence "
                f"({found.unlike[-1]})"
            ),
        )
    return dataclasses.replace(
        found.evidence, verdict=Verdict.REJECT, why=f"{found.failed} pair(s) did not run ok"
    )


def _cut(found: Comparison, cut: StageCut) -> Comparison:
    """A comparison the time budget (or a busy machine) ended: unresolved, with why."""
    said = found.evidence.why.removeprefix("undecided: ")
    found.cut = str(cut)
    how = "stopped" if isinstance(cut, MachineBusy) else "cut short"
    found.evidence = dataclasses.replace(
        found.evidence, verdict=Verdict.UNRESOLVED, why=f"{how} ({cut}): {said}"
    )
    return found
