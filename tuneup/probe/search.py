"""The search: staged greedy over the preset's stages, or the full grid, over a `measure` callable.

Pure logic: it never runs anything itself. `measure(stage, candidate, values)`
runs one probe (a child process, or the sim trainer in tests) and returns its
ProbeResult, so the same code is tested in milliseconds and used for real.

Staged search (design.md, Search): the baseline first (repeated, so the
session knows its noise); then each stage's candidates on top of the
incumbent (the best configuration so far). Every adopt/reject decision is
paired (paired.py): the incumbent is measured right before a stage's
candidates, each candidate once (the screen), and the most promising one is
then measured against the incumbent in alternating pairs (A B, B A, ...)
until the paired rule adopts it, rejects it, or runs out of pairs. A
candidate must have run `ok`, passed the loss guard (guard.py: a NaN or
clearly worse loss at equal samples seen marks it `diverged`), and cleared
the session's needed gain (the floor, or the instability repeats showed)
with confidence; otherwise the incumbent, the simpler configuration, stays.

A probe measured while something else loaded the machine (its `contention`
note) is measured again, up to `CONTENDED_RETRIES` times, before it counts.

At the end the **confirmation decides**: baseline and the search's pick run
in alternating pairs, judged by the same rule with at least `confirm_pairs`
pairs. When the pick is not upheld, the adopted changes are dropped from the
last one backwards (each shorter path was itself an incumbent, so it runs)
and confirmed in turn; the recommendation is the longest upheld path, or the
baseline. Everything downstream (headline, "after" verdict, summary.json,
exports) reads the confirmed values and figures.

Reference candidates (Candidate.reference: the DDP stage's compute-only
`noddp` run and its single-rank run) are measured once, with their stage's
other candidates, and kept on the StageDecision for the figures they give
(verdicts.py: communication overhead, scaling efficiency); they are never
adopted, never re-measured, never guarded against the baseline's loss, and a
stage whose real candidates all failed says so whatever its references did.
The grid search skips them: they are not configurations to combine, and it
exists to check the staged search's choice.

Probes are told apart by their knob values and their ranks: a candidate's
`ranks` (None: the session's own) is part of every dedup key, so a 1-rank
reference is never mistaken for the incumbent it shares its values with.
"""

from __future__ import annotations

import dataclasses
import itertools
import json
import math
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from tuneup.errors import ExitCode, UsageError
from tuneup.probe.guard import loss_verdict
from tuneup.probe.paired import EXTEND, FLOOR, WILD, NoiseTracker, PairedEvidence, Verdict, judge
from tuneup.probe.stats import iqr_pct, median, noise_margin
from tuneup.probe.types import Candidate, ProbeResult, Status

Measure = Callable[[str, Candidate, dict[str, Any]], ProbeResult]
Already = Callable[[str, str], ProbeResult | None]

BASELINE = "baseline"
CONFIRM = "confirm"
GRID = "grid"
INCUMBENT = "incumbent"
MAX_PAIRS = 5  # the most pairs one stage's comparison takes
PURSUED = 2  # candidates of one stage compared in pairs at most
CONTENDED_RETRIES = 2  # re-measures of a probe that ran under contention
SUSPECT = 0.25  # a best screen this much slower than the incumbent is measured once more
TIE_CAP = 0.10  # screens this close to the best may tie, whatever the noise (and the needed gain)


@dataclass
class StagePlan:
    """One stage as the search sees it: candidates on top of the incumbent, or why it is skipped."""

    name: str
    candidates: list[Candidate]
    skip_reason: str | None = None
    # "label: why" of candidates left out before any probe (e.g. no compiler for torch.compile).
    not_tried: list[str] = field(default_factory=list)
    # Re-propose on the incumbent when the stage's turn comes (a stage's candidates
    # may depend on what earlier stages adopted, e.g. CUDA graphs after fp16 won).
    refresh: Callable[[dict[str, Any]], StagePlan] | None = None


@dataclass(frozen=True)
class ReferenceRun:
    """A reference candidate and its probe: measured for comparison, never adopted."""

    candidate: Candidate
    result: ProbeResult


@dataclass
class StageDecision:
    """What one stage decided: the adopted label (None: incumbent kept), its gain and why.

    `references` holds the stage's reference runs and `incumbent` the probe they
    compare with (the incumbent the stage started from, pooled over its re-measures).
    `evidence` is the paired comparison that decided (None: no candidate got that far).
    """

    stage: str
    winner: str | None
    gain_pct: float | None
    reason: str
    failed: list[str] = field(default_factory=list)  # "label: status (reason)" of variants
    references: list[ReferenceRun] = field(default_factory=list)
    incumbent: ProbeResult | None = None
    evidence: PairedEvidence | None = None
    not_tried: list[str] = field(default_factory=list)  # "label: why", from the plan


@dataclass(frozen=True)
class ConfirmAttempt:
    """One path confirmed against the baseline in interleaved pairs, and what the pairs said."""

    path: tuple[str, ...]
    values: dict[str, Any]
    evidence: PairedEvidence
    baseline_sps: tuple[float, ...]
    best_sps: tuple[float, ...]
    failed: int = 0

    @property
    def upheld(self) -> bool:
        return self.evidence.verdict is Verdict.ADOPT


@dataclass
class Confirmation:
    """Interleaved A/B runs of baseline and recommendation: per-pair FULL samples/s and ratios.

    `attempts` are every path tried, the search's pick first; the figures
    above them are the upheld attempt's (or, when none was upheld, the
    search's pick's, so the screen can say by how much it failed).
    """

    baseline_sps: list[float]
    best_sps: list[float]
    ratios: list[float]
    speedup: float | None  # median of the per-pair ratios
    low: float | None  # smallest per-pair ratio
    high: float | None  # largest per-pair ratio
    failed: int = 0  # pairs dropped because one of the two probes did not run ok
    attempts: list[ConfirmAttempt] = field(default_factory=list)
    search_path: list[str] = field(default_factory=list)  # what the search adopted
    path: list[str] = field(default_factory=list)  # what the confirmation upheld

    @property
    def upheld(self) -> ConfirmAttempt | None:
        return next((a for a in self.attempts if a.upheld), None)

    @property
    def status(self) -> str:
        """ "confirmed" (the search's pick), "partly confirmed" or "not confirmed"."""
        if not self.path:
            return "not confirmed"
        return "confirmed" if self.path == self.search_path else "partly confirmed"


@dataclass
class SearchOutcome:
    """Everything a search found, in the order it happened.

    `best_values`, `best` and `path` are the recommendation: what the
    confirmation upheld (the search's own pick is `confirmation.search_path`).
    """

    baseline: ProbeResult
    best_values: dict[str, Any]
    best: ProbeResult
    probes: list[ProbeResult]
    stage_decisions: list[StageDecision]
    margin: float  # the smallest gain the session could have adopted (paired.resolvable)
    confirmation: Confirmation | None
    base_values: dict[str, Any] = field(default_factory=dict)
    path: list[str] = field(default_factory=list)  # labels recommended, in stage order
    search: str = "staged"
    noise: NoiseTracker | None = None
    search_gain: float | None = None  # the search's pick over the baseline, from its own probes
    drift: float | None = None  # the baseline's last probe over its first, minus 1

    @property
    def measured(self) -> int:
        """Probes actually run or reused (skipped stages excluded)."""
        return sum(1 for p in self.probes if p.status is not Status.SKIPPED)


class BaselineFailed(UsageError):
    """The base configuration itself did not run: nothing can be compared against it."""

    def __init__(self, result: ProbeResult) -> None:
        detail = f": {result.reason}" if result.reason else ""
        if result.transient or result.status is Status.TIMEOUT:
            # Not the config's fault as far as anyone can tell: not "bad input" either.
            self.exit_code = ExitCode.PROBE_FAILED
            fix = "check the node (`tuneup doctor`) and run again"
        else:
            fix = (
                "fix the base config in the preset's train section (`tuneup presets show "
                "NAME` prints it; save your own copy and pass it with --preset) and run again"
            )
        super().__init__(f"the baseline probe ended '{result.status.value}'{detail}; {fix}")
        self.result = result


def staged_search(
    base_values: dict[str, Any],
    stages: list[StagePlan],
    measure: Measure,
    *,
    confirm_pairs: int = 3,
    baseline_repeats: int = 2,
    already: Already | None = None,
    max_pairs: int = MAX_PAIRS,
    floor: float = FLOOR,
    max_confirm_attempts: int = 3,
) -> SearchOutcome:
    """Greedy search, one stage at a time, each on top of the best configuration so far.

    Each stage: the incumbent (unless the last probe already was it), each
    candidate once, then the most promising candidates (at most two, best
    screen first, only while one could still reach the needed gain) against
    the incumbent in alternating pairs until paired.judge decides. Then the
    confirmation (module docstring) decides what is recommended.

    Args:
        base_values: the full knob values of the baseline.
        stages: the stage plan, in the preset's order.
        measure: runs one probe: (stage name, candidate, full knob values) -> ProbeResult.
        confirm_pairs: the confirmation's fewest A/B pairs (it may run twice as many);
            0 skips it and recommends the search's pick unconfirmed.
        baseline_repeats: baseline probes: their pooled trials and their
            repeat start the session's noise estimate.
        already: for resuming: returns the journaled result of (stage, label), or None
            to measure it. It is asked once per planned probe in order, so a repeated
            (stage, label) (baseline repeats, the incumbent's re-measures, which run as
            label "incumbent", a candidate's pairs) should get its next entry each time.
            Confirmation pairs always run afresh (they must be interleaved in one go).
        max_pairs: the most pairs one stage's comparison may take.
        floor: the smallest gain ever adopted.
        max_confirm_attempts: paths the confirmation tries before keeping the baseline.

    Raises:
        BaselineFailed: the baseline did not run ok, so no variant can be judged.
    """
    if baseline_repeats < 1:
        raise UsageError(f"baseline_repeats must be at least 1, got {baseline_repeats}")
    noise = NoiseTracker(floor=floor)
    runner = _Runner(measure, already, noise)
    baseline = runner.baseline(base_values, baseline_repeats)
    noise.set_trials([r.full_sps_trials for r in runner.baseline_runs])

    values = dict(base_values)
    incumbent = _Series(runner.baseline_runs)
    path: list[str] = []
    steps: list[tuple[str, dict[str, Any]]] = []  # (label, values after adopting it)
    decisions: list[StageDecision] = []
    for plan in stages:
        if plan.refresh is not None:
            plan = plan.refresh(values)
        if plan.skip_reason is not None:
            runner.skip(plan, values)
            decisions.append(StageDecision(plan.name, None, None, f"skipped: {plan.skip_reason}"))
            continue
        decision, winner = _run_stage(plan, values, incumbent, runner, max_pairs)
        decisions.append(decision)
        if winner is not None:
            cand, incumbent = winner
            values = {**values, **cand.values}
            path.append(cand.label)
            steps.append((cand.label, dict(values)))

    search_gain = _search_gain(decisions)
    best_values, best, confirmation = values, incumbent.summary(), None
    if confirm_pairs > 0 and steps:
        confirmation, best_values, best = runner.confirm(
            base_values, steps, confirm_pairs, max_confirm_attempts
        )
        path = list(confirmation.path)
        if not path:
            best = baseline
    return SearchOutcome(
        baseline=baseline,
        best_values=best_values,
        best=best,
        probes=runner.probes,
        stage_decisions=decisions,
        margin=noise.resolvable(max_pairs),
        confirmation=confirmation,
        base_values=dict(base_values),
        path=path,
        search="staged",
        noise=noise,
        search_gain=search_gain,
        drift=noise.moved(_key(base_values)),
    )


def grid_search(
    base_values: dict[str, Any],
    stages: list[StagePlan],
    measure: Measure,
    *,
    already: Already | None = None,
) -> SearchOutcome:
    """Every combination of the stages' candidates (each stage may also keep the base value).

    Identical configurations are measured once; the best `ok` one by FULL wins
    outright (the grid checks the staged search; it applies no margin).
    Reference candidates are skipped (see the module docstring).
    """
    runner = _Runner(measure, already, NoiseTracker())
    baseline = runner.baseline(base_values, 1)
    active = []
    for plan in stages:
        if plan.skip_reason is not None:
            runner.skip(plan, base_values)
        else:
            active.append(plan)
    best, best_values, best_choice = baseline, dict(base_values), [None] * len(active)
    seen = {_key(base_values)}
    options = [[None, *(c for c in plan.candidates if not c.reference)] for plan in active]
    for choice in itertools.product(*options):
        picked = [c for c in choice if c is not None]
        variant: dict[str, Any] = {}
        ranks = None
        for cand in picked:
            variant.update(cand.values)
            ranks = cand.ranks if cand.ranks is not None else ranks
        merged = {**base_values, **variant}
        if _key(merged, ranks) in seen:
            continue
        seen.add(_key(merged, ranks))
        label = "+".join(c.label for c in picked)
        result = runner.run(GRID, Candidate(label, variant, ranks=ranks), merged)
        if _comparable(result) and result.full_sps > best.full_sps:  # type: ignore[operator]
            best, best_values, best_choice = result, merged, list(choice)

    decisions = []
    for plan in stages:
        if plan.skip_reason is not None:
            decisions.append(StageDecision(plan.name, None, None, f"skipped: {plan.skip_reason}"))
            continue
        cand = best_choice[active.index(plan)]
        if cand is None:
            decisions.append(StageDecision(plan.name, None, None, "the best grid point keeps it"))
        else:
            decisions.append(
                StageDecision(plan.name, cand.label, None, f"the best grid point uses {cand.label}")
            )
    return SearchOutcome(
        baseline=baseline,
        best_values=best_values,
        best=best,
        probes=runner.probes,
        stage_decisions=decisions,
        margin=noise_margin(baseline.full_sps_trials),
        confirmation=None,
        base_values=dict(base_values),
        path=[c.label for c in best_choice if c is not None],
        search="grid",
    )


class _Runner:
    """Runs probes through `measure` (or takes them from `already`), guards and records them.

    Every comparable measurement is told to the noise tracker; one that ran
    under contention is measured again first (CONTENDED_RETRIES times at most).
    """

    def __init__(self, measure: Measure, already: Already | None, noise: NoiseTracker) -> None:
        self.measure = measure
        self.already = already
        self.noise = noise
        self.probes: list[ProbeResult] = []
        self.reference: ProbeResult | None = None
        self.reference_values: dict[str, Any] = {}
        self.baseline_runs: list[ProbeResult] = []
        self.last_key: str | None = None  # the configuration of the latest probe

    def run(
        self, stage: str, cand: Candidate, values: dict[str, Any], *, resume: bool = True
    ) -> ProbeResult:
        for attempt in range(CONTENDED_RETRIES + 1):
            result = self._once(stage, cand, values, resume=resume)
            if not (result.ok and result.contended) or attempt == CONTENDED_RETRIES:
                break
        if result.ok and result.contended:
            self.noise.contended += 1  # it stayed contended: it counts, and says so
        self.last_key = _key(values, cand.ranks)
        if _comparable(result) and not cand.reference:
            self.noise.seen(self.last_key, result.full_sps)  # type: ignore[arg-type]
        return result

    def _once(
        self, stage: str, cand: Candidate, values: dict[str, Any], *, resume: bool
    ) -> ProbeResult:
        result = self.already(stage, cand.label) if (self.already and resume) else None
        if result is None:
            result = self.measure(stage, cand, values)
        if not cand.reference:  # a reference changes the arithmetic on purpose (noddp)
            result = self._guard(result, values)
        self.probes.append(result)
        return result

    def baseline(self, values: dict[str, Any], repeats: int) -> ProbeResult:
        runs = []
        for _ in range(repeats):
            result = self.run(BASELINE, Candidate(BASELINE, {}), values)
            if not _ran(result):  # a contended baseline still counts: it is all there is
                raise BaselineFailed(result)  # measure() already tried it again where it could
            runs.append(result)
        # Repeats far apart (one of them hit by something nothing reported): measure
        # again, twice at most, so the median and the noise do not rest on a wild one.
        while len(runs) < repeats + 2 and len(runs) > 1 and _disagree(runs):
            runs.append(self.run(BASELINE, Candidate(BASELINE, {}), values))
        self.baseline_runs = [r for r in runs if _ran(r)]
        first = _Series(self.baseline_runs).summary()
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
        base = base or Candidate(INCUMBENT, {})
        if candidate_first:
            b = self.run(stage, cand, cand_values, resume=resume)
            a = self.run(stage, base, values, resume=resume)
        else:
            a = self.run(stage, base, values, resume=resume)
            b = self.run(stage, cand, cand_values, resume=resume)
        return a, b

    def confirm(
        self,
        base_values: dict[str, Any],
        steps: list[tuple[str, dict[str, Any]]],
        pairs: int,
        attempts: int,
    ) -> tuple[Confirmation, dict[str, Any], ProbeResult]:
        """Confirm the search's path, then shorter ones; the upheld values and their probe."""
        tried: list[ConfirmAttempt] = []
        upheld_series: _Series | None = None
        for drop in range(min(len(steps), max(attempts, 1))):
            kept = steps[: len(steps) - drop]
            labels = tuple(label for label, _ in kept)
            values = kept[-1][1]
            attempt, series = self._confirm_one(base_values, labels, values, pairs)
            tried.append(attempt)
            if attempt.upheld:
                upheld_series = series
                break
        search_path = [label for label, _ in steps]
        shown = next((a for a in tried if a.upheld), tried[0])
        ratios = list(shown.evidence.ratios)
        confirmation = Confirmation(
            baseline_sps=list(shown.baseline_sps),
            best_sps=list(shown.best_sps),
            ratios=ratios,
            speedup=shown.evidence.speedup,
            low=min(ratios) if ratios else None,
            high=max(ratios) if ratios else None,
            failed=shown.failed,
            attempts=tried,
            search_path=search_path,
            path=list(shown.path) if shown.upheld else [],
        )
        if upheld_series is None:
            return confirmation, dict(base_values), self.reference  # type: ignore[return-value]
        return confirmation, dict(shown.values), upheld_series.summary()

    def _confirm_one(
        self,
        base_values: dict[str, Any],
        labels: tuple[str, ...],
        values: dict[str, Any],
        pairs: int,
    ) -> tuple[ConfirmAttempt, _Series]:
        variant = {k: v for k, v in values.items() if base_values.get(k, _NOTHING) != v}
        at_least = max(2, pairs)
        best = _Series([])
        found = self.compare(
            CONFIRM,
            Candidate(BASELINE, {}),
            base_values,
            Candidate("recommended", variant),
            values,
            base_series=_Series([]),
            cand_series=best,
            rule={"min_pairs": at_least, "max_pairs": 2 * at_least, "min_reject": at_least},
            max_failed=pairs,
            resume=False,
        )
        attempt = ConfirmAttempt(
            path=labels,
            values=dict(values),
            evidence=found.evidence,
            baseline_sps=tuple(a for a, _ in found.pairs),
            best_sps=tuple(b for _, b in found.pairs),
            failed=found.failed,
        )
        return attempt, best

    def compare(
        self,
        stage: str,
        base: Candidate,
        base_values: dict[str, Any],
        cand: Candidate,
        cand_values: dict[str, Any],
        *,
        base_series: _Series,
        cand_series: _Series,
        rule: dict[str, int],
        pairs: list[tuple[float, float]] | None = None,
        max_failed: int | None = None,
        resume: bool = True,
    ) -> _Comparison:
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

        found = _Comparison(list(pairs or []), decide(list(pairs or [])))
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
            if max_failed is None and not _ran(b):
                found.failure = b
                found.evidence = dataclasses.replace(
                    found.evidence,
                    verdict=Verdict.REJECT,
                    why="it did not run ok when measured again",
                )
                return found
            cand_series.add(b)
            base_series.add(a)
            if _comparable(a) and _comparable(b):
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


_NOTHING = object()


@dataclass
class _Series:
    """Every comparable probe of one configuration, in the order measured."""

    results: list[ProbeResult]

    def add(self, result: ProbeResult) -> None:
        if _comparable(result):
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


@dataclass(frozen=True)
class _Screen:
    """A candidate's first probe, what the incumbent stood at then, and the pairs it makes."""

    cand: Candidate
    result: ProbeResult
    incumbent_sps: float  # the incumbent at that moment: between the two anchors
    pairs: tuple[tuple[float, float], ...]  # with an anchor measured right before or after

    @property
    def gain(self) -> float:
        """ln(screen / incumbent then)."""
        return math.log((self.result.full_sps or 0.0) / self.incumbent_sps)


@dataclass
class _Comparison:
    """What `_Runner.compare` measured: the pairs, what they say, and what failed."""

    pairs: list[tuple[float, float]]
    evidence: PairedEvidence
    failed: int = 0
    failure: ProbeResult | None = None  # the candidate's probe that did not run


def _run_stage(
    plan: StagePlan,
    values: dict[str, Any],
    incumbent: _Series,
    runner: _Runner,
    max_pairs: int,
) -> tuple[StageDecision, tuple[Candidate, _Series] | None]:
    """Screen a stage's candidates between two incumbent probes (A B.. A); adopt on pairs only.

    The incumbent is measured before the candidates (unless the last probe
    was it) and again after them, so each screen is compared with the
    incumbent as it stood at that moment (interpolated on the log scale), and
    a candidate next to an anchor already forms a pair with it (one pair per
    probe: pairs never share a probe). When the two anchors disagree by more
    than two pairs' noise (and the floor) the machine changed speed during the
    screen: the screen runs once more, and if the anchors disagree again no
    candidate is given up on its screen alone.
    """
    noise = runner.noise
    if runner.last_key != _key(values) or incumbent.latest is None:
        incumbent.add(runner.run(plan.name, Candidate(INCUMBENT, {}), values))
    anchor, anchor_at = incumbent.latest, len(runner.probes) - 1
    measured: list[tuple[Candidate, ProbeResult, int]] = []
    references: list[ReferenceRun] = []
    seen = {_key(values)}
    for cand in plan.candidates:
        merged = {**values, **cand.values}
        key = _key(merged, cand.ranks)
        if key in seen:
            continue  # the incumbent (or an earlier candidate) already stands for it
        seen.add(key)
        result = runner.run(plan.name, cand, merged)
        if cand.reference:
            references.append(ReferenceRun(cand, result))
        else:
            measured.append((cand, result, len(runner.probes) - 1))
    failed = [_failure(c, r) for c, r, _ in measured if not _comparable(r)]
    failed += [_failure(r.candidate, r.result) for r in references if not _ran(r.result)]

    def decided(
        winner: str | None, gain: float | None, reason: str, evidence: PairedEvidence | None = None
    ) -> StageDecision:
        return StageDecision(
            plan.name,
            winner,
            gain,
            reason,
            failed,
            references,
            incumbent.summary(),
            evidence,
            list(plan.not_tried),
        )

    if not measured:
        if references:
            return decided(None, None, "reference runs only: nothing to adopt"), None
        return decided(None, None, "every candidate equals the current config"), None
    ok = [(c, r, at) for c, r, at in measured if _comparable(r)]
    if not ok or anchor is None:
        return decided(None, None, "no candidate ran ok"), None

    screens, shifted = _close_screen(plan, values, incumbent, runner, ok, anchor, anchor_at)
    if shifted and incumbent.latest is not None:
        # The machine changed speed during the screen: screen once more, from the new anchor.
        noise.shifted()
        noise.seen(_key(values), incumbent.latest)  # the new anchor starts the chain again
        anchor, anchor_at = incumbent.latest, len(runner.probes) - 1
        again = []
        for c, _, _ in ok:
            result = runner.run(plan.name, c, {**values, **c.values})
            if _comparable(result):
                again.append((c, result, len(runner.probes) - 1))
            else:
                failed.append(_failure(c, result))
        if again:
            screens, shifted = _close_screen(
                plan, values, incumbent, runner, again, anchor, anchor_at
            )
    screens = _by_promise(screens, noise.sigma, noise.resolvable(max_pairs))
    last: tuple[Candidate, PairedEvidence] | None = None
    for rank, screen in enumerate(screens[:PURSUED]):
        if not (shifted or noise.bursty) and _hopeless(screen.gain, noise):
            if rank > 0 or screen.gain > math.log1p(-SUSPECT):
                break  # best first: the rest are no closer
            # Even the best is far slower: a real loser, or a burst of load nothing
            # reported. One more probe, next to the closing anchor, tells them apart.
            screen = _screen_again(plan, values, screen, incumbent, runner)
            if screen is None or _hopeless(screen.gain, noise):
                break
        cand = screen.cand
        series = _Series([screen.result])
        found = runner.compare(
            plan.name,
            Candidate(INCUMBENT, {}),
            values,
            cand,
            {**values, **cand.values},
            base_series=incumbent,
            cand_series=series,
            rule={"min_pairs": 2, "max_pairs": max_pairs, "min_reject": 1},
            pairs=list(screen.pairs),
        )
        if found.failure is not None:
            failed.append(_failure(cand, found.failure))
        evidence = found.evidence
        last = (cand, evidence)
        if evidence.verdict is Verdict.ADOPT:
            gain_pct = 100 * ((evidence.speedup or 1.0) - 1.0)
            numbers = _numbers(incumbent, series, evidence)
            return (
                decided(cand.label, gain_pct, f"{cand.label} wins: {numbers}", evidence),
                (cand, series),
            )
    if last is None:
        best = screens[0]
        why = (
            f"no candidate is faster (best {best.cand.label}: {_sps(best.incumbent_sps)} -> "
            f"{_sps(best.result.full_sps or 0.0)} samples/s, {100 * math.expm1(best.gain):+.1f}%; "
            f"a gain must clear {100 * noise.needed:.1f}%)"
        )
        return decided(None, 100 * math.expm1(best.gain), why), None
    cand, evidence = last
    gain_pct = 100 * ((evidence.speedup or 1.0) - 1.0)
    if (evidence.speedup or 0.0) > 1.0:
        why = f"{cand.label} is faster but within the noise margin, kept the simpler config"
    else:
        why = f"no candidate is faster (best {cand.label})"
    return decided(None, gain_pct, f"{why}: {evidence.why}", evidence), None


def _screen_again(
    plan: StagePlan,
    values: dict[str, Any],
    screen: _Screen,
    incumbent: _Series,
    runner: _Runner,
) -> _Screen | None:
    """The candidate measured once more right after the incumbent's latest probe."""
    anchor = incumbent.latest
    if anchor is None:
        return None
    result = runner.run(plan.name, screen.cand, {**values, **screen.cand.values})
    if not _comparable(result):
        return None
    return _Screen(screen.cand, result, anchor, ((anchor, result.full_sps or 0.0),))


def _close_screen(
    plan: StagePlan,
    values: dict[str, Any],
    incumbent: _Series,
    runner: _Runner,
    ok: list[tuple[Candidate, ProbeResult, int]],
    anchor: float,
    anchor_at: int,
) -> tuple[list[_Screen], bool]:
    """Measure the closing anchor; the screens, and whether the anchors disagree (a shift).

    The shift is judged against the noise before the closing anchor, whose own
    repeat would otherwise pass the shift off as noise.
    """
    sigma = runner.noise.sigma
    closing = runner.run(plan.name, Candidate(INCUMBENT, {}), values)
    incumbent.add(closing)
    closing_sps = closing.full_sps if _comparable(closing) else None
    closing_at = len(runner.probes) - 1
    screens = [_screen(c, r, at, (anchor, anchor_at), (closing_sps, closing_at)) for c, r, at in ok]
    shifted = closing_sps is not None and abs(
        math.log(closing_sps / anchor)
    ) > 2 * sigma + math.log1p(FLOOR)
    return screens, shifted


def _screen(
    cand: Candidate,
    result: ProbeResult,
    at: int,
    opening: tuple[float, int],
    closing: tuple[float | None, int],
) -> _Screen:
    """A screen against the incumbent interpolated between the anchors, and its adjacent pairs."""
    (a0, i0), (a1, i1) = opening, closing
    b = result.full_sps or 0.0
    if a1 is None:
        return _Screen(cand, result, a0, ((a0, b),) if at == i0 + 1 else ())
    weight = (at - i0) / (i1 - i0)
    expected = math.exp((1 - weight) * math.log(a0) + weight * math.log(a1))
    # One pair per candidate probe at most: two pairs sharing it would count its noise twice.
    if at == i0 + 1:
        return _Screen(cand, result, expected, ((a0, b),))
    if at == i1 - 1:
        return _Screen(cand, result, expected, ((a1, b),))
    return _Screen(cand, result, expected, ())


def _by_promise(screens: list[_Screen], sigma: float, needed: float) -> list[_Screen]:
    """Candidates in the order to pursue them: best screen first, but screens within two
    pairs' noise (or the smallest gain the session can establish, when larger) of the best
    count as a tie, won by the one the stage lists first: two equally good variants do not
    swap from run to run on a coin toss, and a difference too small to adopt is too small
    to prefer."""
    top = max(s.gain for s in screens)
    # Two pairs' noise, at most 10% (an early estimate can be wild), or the resolvable gain.
    band = max(min(2 * sigma, math.log1p(TIE_CAP)), math.log1p(needed))
    tied = [s for s in screens if s.gain >= top - band]
    rest = sorted((s for s in screens if s not in tied), key=lambda s: s.gain, reverse=True)
    return tied + rest


def _hopeless(gain: float, noise: NoiseTracker) -> bool:
    """True when a screen's gain, even one pair's noise better, stays under the needed gain."""
    return math.log1p(max(gain, -0.99)) + noise.sigma < math.log1p(noise.needed)


def _numbers(incumbent: _Series, series: _Series, evidence: PairedEvidence) -> str:
    inc, cand = incumbent.summary().full_sps, series.summary().full_sps
    return (
        f"{_sps(inc or 0.0)} -> {_sps(cand or 0.0)} samples/s "
        f"({100 * ((evidence.speedup or 1.0) - 1):+.1f}% paired, {evidence.why})"
    )


def _search_gain(decisions: list[StageDecision]) -> float | None:
    """The search's own estimate of its pick's gain: the product of the adopted stages' gains."""
    gains = [d.gain_pct for d in decisions if d.winner is not None and d.gain_pct is not None]
    if not gains:
        return None
    total = 1.0
    for gain in gains:
        total *= 1 + gain / 100
    return total - 1


def _failure(cand: Candidate, result: ProbeResult) -> str:
    kind = " (reference)" if cand.reference else ""
    if _ran(result) and result.contention is not None:
        return f"{cand.label}{kind}: contended ({result.contention.note})"
    detail = f" ({result.reason})" if result.reason else ""
    return f"{cand.label}{kind}: {result.status.value}{detail}"


def _sps(value: float) -> str:
    """Samples/s as people read them: whole numbers, one decimal below 10."""
    return f"{value:.1f}" if value < 10 else f"{value:.0f}"


def _disagree(runs: list[ProbeResult]) -> bool:
    """Whether no two repeats of one configuration agree within WILD of each other."""
    speeds = sorted(r.full_sps for r in runs if _ran(r) and r.full_sps)
    return len(speeds) > 1 and all(b > (1 + WILD) * a for a, b in itertools.pairwise(speeds))


def _ran(result: ProbeResult) -> bool:
    """It ran ok and measured FULL (it may still have run under contention)."""
    return result.ok and result.full_sps is not None and result.full_sps > 0


def _comparable(result: ProbeResult) -> bool:
    """It ran ok, measured FULL, and nothing else loaded the machine while it did."""
    return _ran(result) and not result.contended


def _key(values: dict[str, Any], ranks: int | None = None) -> str:
    """One probe's identity: its knob values, and its ranks when it sets its own."""
    key = json.dumps(values, sort_keys=True, default=str)
    return key if ranks is None else f"{key}|ranks={ranks}"
