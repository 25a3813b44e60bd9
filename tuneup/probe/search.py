"""The search: staged greedy over the preset's stages, or the full grid, over a `measure` callable.

Pure logic: it never runs anything itself. `measure(stage, candidate, values)`
runs one probe (a child process, or the sim trainer in tests) and returns its
ProbeResult, so the same code is tested in milliseconds and used for real.

Staged search (design.md, Search): the baseline first; then each stage's
candidates on top of the incumbent (the best configuration so far). A
candidate replaces the incumbent only if it ran `ok`, passed the loss guard
(guard.py: a NaN or clearly worse loss marks it `diverged`), and its FULL
median beats the incumbent's by more than the noise margin (stats.py);
otherwise the incumbent, the simpler configuration, stays. Close calls are
measured again before deciding (see `staged_search`). At the end, baseline
and recommendation run interleaved (A B A B ...) to confirm the speedup with
its spread.

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
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from tuneup.errors import UsageError
from tuneup.probe.guard import check_loss
from tuneup.probe.stats import Z_MARGIN, iqr_pct, median, noise_margin
from tuneup.probe.types import Candidate, ProbeResult, Status

Measure = Callable[[str, Candidate, dict[str, Any]], ProbeResult]
Already = Callable[[str, str], ProbeResult | None]

BASELINE = "baseline"
CONFIRM = "confirm"
GRID = "grid"
# Knobs that change the samples per step: the loss at step N is then not comparable.
BATCH_KNOBS = ("global_batch_size", "local_batch_size")


@dataclass
class StagePlan:
    """One stage as the search sees it: candidates on top of the incumbent, or why it is skipped."""

    name: str
    candidates: list[Candidate]
    skip_reason: str | None = None
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
    """

    stage: str
    winner: str | None
    gain_pct: float | None
    reason: str
    failed: list[str] = field(default_factory=list)  # "label: status (reason)" of variants
    references: list[ReferenceRun] = field(default_factory=list)
    incumbent: ProbeResult | None = None


@dataclass
class Confirmation:
    """Interleaved A/B runs of baseline and recommendation: per-pair FULL samples/s and ratios."""

    baseline_sps: list[float]
    best_sps: list[float]
    ratios: list[float]
    speedup: float | None  # median of the per-pair ratios
    low: float | None  # smallest per-pair ratio
    high: float | None  # largest per-pair ratio
    failed: int = 0  # pairs dropped because one of the two probes did not run ok


@dataclass
class SearchOutcome:
    """Everything a search found, in the order it happened."""

    baseline: ProbeResult
    best_values: dict[str, Any]
    best: ProbeResult
    probes: list[ProbeResult]
    stage_decisions: list[StageDecision]
    margin: float
    confirmation: Confirmation | None
    base_values: dict[str, Any] = field(default_factory=dict)
    path: list[str] = field(default_factory=list)  # labels adopted, in stage order
    search: str = "staged"

    @property
    def measured(self) -> int:
        """Probes actually run or reused (skipped stages excluded)."""
        return sum(1 for p in self.probes if p.status is not Status.SKIPPED)


class BaselineFailed(UsageError):
    """The base configuration itself did not run: nothing can be compared against it."""

    def __init__(self, result: ProbeResult) -> None:
        detail = f": {result.reason}" if result.reason else ""
        super().__init__(
            f"the baseline probe ended '{result.status.value}'{detail}; "
            "fix the base config (preset or --set) and run again"
        )
        self.result = result


def staged_search(
    base_values: dict[str, Any],
    stages: list[StagePlan],
    measure: Measure,
    *,
    confirm_pairs: int = 3,
    baseline_repeats: int = 1,
    already: Already | None = None,
    max_remeasure: int = 4,
    floor: float = 0.02,
) -> SearchOutcome:
    """Greedy search, one stage at a time, each on top of the best configuration so far.

    Close calls are measured again, incumbent then candidate, up to
    `max_remeasure` times: when the best candidate has not cleared the margin
    but its gain plus two standard errors still reaches the floor, one noisy
    probe (of the candidate, or a lucky one of the incumbent) may be hiding
    a real few-percent gain. Pooling trials shrinks the margin towards its
    floor; a gain below the floor never wins. With low noise (1% per trial)
    close calls are rare; with 3% they cost a few probes per session. The
    repeated looks let a variant with no real effect through a little more
    often than z = 2 alone would (a few percent of the time); it costs no speed.

    Args:
        base_values: the full knob values of the baseline.
        stages: the stage plan, in the preset's order.
        measure: runs one probe: (stage name, candidate, full knob values) -> ProbeResult.
        confirm_pairs: A/B pairs of the final confirmation (0: none).
        baseline_repeats: baseline probes whose trials are pooled for the noise margin.
        already: for resuming: returns the journaled result of (stage, label), or None
            to measure it. It is asked once per planned probe in order, so a repeated
            (stage, label) (baseline repeats, re-measured close calls, whose incumbent
            runs as label "incumbent") should get its next entry each time.
            Confirmation pairs always run afresh (they must be interleaved in one go).
        max_remeasure: extra rounds for a close call in one stage.
        floor: the smallest noise margin (stats.noise_margin).

    Raises:
        BaselineFailed: the baseline did not run ok, so no variant can be judged.
    """
    if baseline_repeats < 1:
        raise UsageError(f"baseline_repeats must be at least 1, got {baseline_repeats}")
    runner = _Runner(measure, already)
    baseline = runner.baseline(base_values, baseline_repeats)
    trials = baseline.full_sps_trials
    noise = _Noise(trials, max(len(trials) // baseline_repeats, 1), floor)

    values, incumbent, path = dict(base_values), _Pool.of(baseline, baseline_repeats), []
    decisions: list[StageDecision] = []
    for plan in stages:
        if plan.refresh is not None:
            plan = plan.refresh(values)
        if plan.skip_reason is not None:
            runner.skip(plan, values)
            decisions.append(StageDecision(plan.name, None, None, f"skipped: {plan.skip_reason}"))
            continue
        decision, winner = _run_stage(plan, values, incumbent, runner, noise, max_remeasure)
        decisions.append(decision)
        if winner is not None:
            cand, incumbent = winner
            values = {**values, **cand.values}
            path.append(cand.label)

    confirmation = None
    if confirm_pairs > 0 and _key(values) != _key(base_values):
        confirmation = runner.confirm(base_values, values, confirm_pairs)
    return SearchOutcome(
        baseline=baseline,
        best_values=values,
        best=incumbent.summary(),
        probes=runner.probes,
        stage_decisions=decisions,
        margin=noise.margin(1, 1),
        confirmation=confirmation,
        base_values=dict(base_values),
        path=path,
        search="staged",
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
    runner = _Runner(measure, already)
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
    """Runs probes through `measure` (or takes them from `already`), guards and records them."""

    def __init__(self, measure: Measure, already: Already | None) -> None:
        self.measure = measure
        self.already = already
        self.probes: list[ProbeResult] = []
        self.reference: ProbeResult | None = None
        self.reference_values: dict[str, Any] = {}

    def run(
        self, stage: str, cand: Candidate, values: dict[str, Any], *, resume: bool = True
    ) -> ProbeResult:
        result = self.already(stage, cand.label) if (self.already and resume) else None
        if result is None:
            result = self.measure(stage, cand, values)
        if not cand.reference:  # a reference changes the arithmetic on purpose (noddp)
            result = self._guard(result, values)
        self.probes.append(result)
        return result

    def baseline(self, values: dict[str, Any], repeats: int) -> ProbeResult:
        runs = [self.run(BASELINE, Candidate(BASELINE, {}), values) for _ in range(repeats)]
        for result in runs:
            if not _comparable(result):
                raise BaselineFailed(result)
        first = runs[0]
        if repeats > 1:
            pooled = [t for r in runs for t in r.full_sps_trials]
            first = dataclasses.replace(
                first,
                full_sps=median(pooled) if pooled else median([r.full_sps for r in runs]),
                full_sps_trials=pooled,
                iqr_pct=iqr_pct(pooled),
            )
        self.reference, self.reference_values = first, dict(values)
        return first

    def skip(self, plan: StagePlan, values: dict[str, Any]) -> None:
        self.probes.append(
            ProbeResult(plan.name, {}, dict(values), Status.SKIPPED, plan.skip_reason or "")
        )

    def confirm(
        self, base_values: dict[str, Any], best_values: dict[str, Any], pairs: int
    ) -> Confirmation:
        variant = {k: v for k, v in best_values.items() if base_values.get(k, _NOTHING) != v}
        base_sps: list[float] = []
        best_sps: list[float] = []
        failed = 0
        for _ in range(pairs):
            a = self.run(CONFIRM, Candidate(BASELINE, {}), base_values, resume=False)
            b = self.run(CONFIRM, Candidate("recommended", variant), best_values, resume=False)
            if _comparable(a) and _comparable(b) and a.full_sps:
                base_sps.append(a.full_sps)
                best_sps.append(b.full_sps)  # type: ignore[arg-type]
            else:
                failed += 1
        ratios = [b / a for a, b in zip(base_sps, best_sps, strict=True)]
        return Confirmation(
            baseline_sps=base_sps,
            best_sps=best_sps,
            ratios=ratios,
            speedup=median(ratios) if ratios else None,
            low=min(ratios) if ratios else None,
            high=max(ratios) if ratios else None,
            failed=failed,
        )

    def _guard(self, result: ProbeResult, values: dict[str, Any]) -> ProbeResult:
        """Mark an ok probe whose loss went wrong as diverged (guard.py says when)."""
        if result.status is not Status.OK:
            return result
        reference = None
        if self.reference is not None and not _batch_changed(self.reference_values, values):
            reference = self.reference.losses
        reason = check_loss(result.losses, reference)
        if reason is None:
            return result
        return dataclasses.replace(result, status=Status.DIVERGED, reason=reason)


_NOTHING = object()


@dataclass
class _Noise:
    """The session's noise model: the baseline's trials and the margin's floor."""

    trials: list[float]
    per_probe: int
    floor: float

    def margin(self, a: int, b: int) -> float:
        """The margin for comparing a pool of `a` probes with one of `b`."""
        return noise_margin(self.trials, self.floor, per_probe=self.per_probe, pooled=(a, b))

    def hopeless(self, gain: float, a: int, incumbent: _Pool) -> bool:
        """True when even the gain's optimistic bound stays under the floor: stop measuring."""
        stderr = noise_margin(
            self.trials, 0.0, per_probe=self.per_probe, pooled=(a, incumbent.probes), z=1.0
        )
        return gain + Z_MARGIN * stderr < self.floor


@dataclass
class _Pool:
    """One configuration's FULL trials pooled over every probe of it."""

    result: ProbeResult
    trials: list[float]
    probes: int

    @classmethod
    def of(cls, result: ProbeResult, probes: int = 1) -> _Pool:
        return cls(result, list(result.full_sps_trials) or [result.full_sps or 0.0], probes)

    @property
    def sps(self) -> float:
        return median(self.trials)

    def add(self, result: ProbeResult) -> None:
        self.trials.extend(result.full_sps_trials or [result.full_sps or 0.0])
        self.probes += 1

    def summary(self) -> ProbeResult:
        if self.probes == 1:
            return self.result
        return dataclasses.replace(
            self.result,
            full_sps=self.sps,
            full_sps_trials=list(self.trials),
            iqr_pct=iqr_pct(self.trials),
        )


def _run_stage(
    plan: StagePlan,
    values: dict[str, Any],
    incumbent: _Pool,
    runner: _Runner,
    noise: _Noise,
    max_remeasure: int,
) -> tuple[StageDecision, tuple[Candidate, _Pool] | None]:
    """Measure a stage's candidates on the incumbent; adopt the best only past the margin."""
    tried: list[tuple[Candidate, ProbeResult]] = []
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
            tried.append((cand, result))
    failed = [_failure(c, r) for c, r in tried if not _comparable(r)]
    failed += [_failure(r.candidate, r.result) for r in references if not _comparable(r.result)]

    def decided(winner: str | None, gain: float | None, reason: str) -> StageDecision:
        return StageDecision(
            plan.name, winner, gain, reason, failed, references, incumbent.summary()
        )

    if not tried:
        if references:
            return decided(None, None, "reference runs only: nothing to adopt"), None
        return decided(None, None, "every candidate equals the current config"), None
    pools = {c.label: (c, _Pool.of(r)) for c, r in tried if _comparable(r)}
    if not pools:
        return decided(None, None, "no candidate ran ok"), None

    rounds = 0
    while True:
        cand, pool = max(pools.values(), key=lambda cp: cp[1].sps)
        gain = pool.sps / incumbent.sps - 1.0
        margin = noise.margin(pool.probes, incumbent.probes)
        numbers = (
            f"{_sps(incumbent.sps)} -> {_sps(pool.sps)} samples/s "
            f"({100 * gain:+.1f}%, margin {100 * margin:.1f}%"
            + (f", pooled over {pool.probes} and {incumbent.probes} probes)" if rounds else ")")
        )
        if gain > margin:
            return decided(cand.label, 100 * gain, f"{cand.label} wins: {numbers}"), (cand, pool)
        if rounds >= max_remeasure or noise.hopeless(gain, pool.probes, incumbent):
            break
        # A close call: measure both again, interleaved, and decide on the pooled trials.
        rounds += 1
        again = runner.run(plan.name, Candidate("incumbent", {}), values)
        if _comparable(again):
            incumbent.add(again)
        again = runner.run(plan.name, cand, {**values, **cand.values})
        if _comparable(again):
            pool.add(again)
        else:
            failed.append(_failure(cand, again))
            del pools[cand.label]
            if not pools:
                break
    if gain > 0:
        why = f"{cand.label} is faster but within the noise margin, kept the simpler config"
    else:
        why = f"no candidate is faster (best {cand.label})"
    return decided(None, 100 * gain, f"{why}: {numbers}"), None


def _failure(cand: Candidate, result: ProbeResult) -> str:
    detail = f" ({result.reason})" if result.reason else ""
    kind = " (reference)" if cand.reference else ""
    return f"{cand.label}{kind}: {result.status.value}{detail}"


def _sps(value: float) -> str:
    """Samples/s as people read them: whole numbers, one decimal below 10."""
    return f"{value:.1f}" if value < 10 else f"{value:.0f}"


def _comparable(result: ProbeResult) -> bool:
    return result.ok and result.full_sps is not None and result.full_sps > 0


def _batch_changed(a: dict[str, Any], b: dict[str, Any]) -> bool:
    return any(a.get(k) != b.get(k) for k in BATCH_KNOBS)


def _key(values: dict[str, Any], ranks: int | None = None) -> str:
    """One probe's identity: its knob values, and its ranks when it sets its own."""
    key = json.dumps(values, sort_keys=True, default=str)
    return key if ranks is None else f"{key}|ranks={ranks}"
