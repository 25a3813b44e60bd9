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

A probe measured while something else loaded the machine in bursts (its
`contention` note) is measured again, up to `CONTENDED_RETRIES` times, before
it counts; a steady load's probes count as they are, and their verdicts say
"measured under load". What a busy machine may spoil is bounded per stage and
per ladder (load.py): past it the stage, or every stage left, stops unmeasured
with the line that names the load.

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

This module is the staged search; beside it: one stage (stage.py) and its
screen (screen.py), the records the search takes and gives
(search_records.py), the probes it runs and compares (search_runner.py), the
confirmation (confirm.py) and the grid (grid.py).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import Any

from tuneup.errors import UsageError
from tuneup.probe.confine import confined_of, left_out_line, sets_threads
from tuneup.probe.targets import Target
from tuneup.probe.types import PHASES, USER_SKIP, ProbeResult, probe_key
from tuneup.tuning.search.confirm import confirm
from tuneup.tuning.search.load import LoadBound, MachineBusy
from tuneup.tuning.search.paired import FLOOR, PhaseNoise
from tuneup.tuning.search.search_records import (
    BASELINE,
    CONFINED,
    CONFIRM,
    LOAD,
    Already,
    Confirmation,
    Measure,
    SearchOutcome,
    SearchProgress,
    StageCut,
    StageDecision,
    StagePlan,
)
from tuneup.tuning.search.search_runner import SearchRunner, Series
from tuneup.tuning.search.stage_search import run_stage
from tuneup.tuning.search.targets import tune_targets

MAX_PAIRS = 5  # the most pairs one stage's comparison takes before it is unresolved


def staged_search(
    base_values: dict[str, Any],
    stages: list[StagePlan],
    measure: Measure,
    *,
    confirm_pairs: int = 2,
    baseline_repeats: int = 2,
    already: Already | None = None,
    max_pairs: int = MAX_PAIRS,
    floor: float = FLOOR,
    max_confirm_attempts: int = 3,
    guard: bool = True,
    progress: SearchProgress | None = None,
    before_stage: Callable[[StagePlan], str | None] | None = None,
    load: LoadBound | None = None,
    targets: tuple[Target, ...] = (),
) -> SearchOutcome:
    """Greedy search, one stage at a time, each on top of the best configuration so far.

    Each stage: the incumbent (unless the last probe was it), each candidate once,
    then the most promising (two at most, while one could still reach the needed
    gain) against the incumbent in alternating pairs until paired.judge decides.
    Then the confirmation (module docstring) decides what is recommended.

    Args:
        base_values: the full knob values of the baseline.
        stages: the stage plan, in the preset's order.
        measure: runs one probe: (stage, candidate, knob values) -> ProbeResult; a StageCut
            it raises (time ran short) ends that stage, which keeps its incumbent.
        confirm_pairs: the confirmation's fewest A/B pairs (0: the pick unconfirmed).
        baseline_repeats: baseline probes (their trials start the noise estimate).
        already: for resuming: the journaled result of (stage, label), or None to
            measure it; asked once per planned probe in order, so a repeated (stage,
            label) (baseline repeats, the incumbent's re-measures, a candidate's pairs)
            gets its next entry each time. Confirmation pairs always run afresh.
        max_pairs: the most pairs one stage's comparison may take.
        floor: the smallest gain ever adopted.
        max_confirm_attempts: paths the confirmation tries before keeping the baseline.
        guard: apply the loss guard (guard.py); False where `measure` does (ProbeSession).
        progress: kept up to date as the search goes (partial_outcome reads it).
        before_stage: before each stage: a reason to leave it out (time), or None.
        load: what a busy machine may spoil (load.py; default: its probe bounds alone).
        targets: the other programs the answer is for (probe.targets): each that cannot
            run the recommendation is tuned and confirmed an answer of its own (targets.py).

    Raises:
        BaselineFailed: the baseline did not run ok, so no variant can be judged.
    """
    if baseline_repeats < 1:
        raise UsageError(f"baseline_repeats must be at least 1, got {baseline_repeats}")
    noise = PhaseNoise(floor=floor)
    runner = SearchRunner(measure, already, noise, guard, load)
    progress = progress if progress is not None else SearchProgress()
    baseline = _measure_baseline(runner, progress, base_values, baseline_repeats)
    _climb(stages, runner, max_pairs, progress, before_stage)
    search_gain = _search_gain(runner, baseline, progress.values)
    confirmation, best_values, best, path = _decided(
        runner, progress, base_values, baseline, confirm_pairs, max_confirm_attempts
    )
    answers = tune_targets(
        targets, runner, stages, base_values, best_values, max_pairs, confirm_pairs, before_stage
    )
    progress.stage = None
    return SearchOutcome(
        baseline=baseline,
        best_values=best_values,
        best=best,
        probes=runner.probes,
        stage_decisions=progress.decisions,
        margin=noise.full.resolvable(max_pairs),
        confirmation=confirmation,
        base_values=dict(base_values),
        path=path,
        search="staged",
        noise=noise,
        search_gain=search_gain,
        drift=noise.full.moved(probe_key(base_values)),
        left_out=list(progress.left_out),
        targets=answers,
    )


def _decided(
    runner: SearchRunner,
    progress: SearchProgress,
    base_values: dict[str, Any],
    baseline: ProbeResult,
    confirm_pairs: int,
    attempts: int,
) -> tuple[Confirmation | None, dict[str, Any], ProbeResult, list[str]]:
    """What the confirmation upheld of the climb's path (the climb's own pick, unconfirmed,
    where none runs): its confirmation, values, figures and path."""
    best_values, best = progress.values, Series(progress.incumbent).summary()
    if confirm_pairs <= 0 or not progress.steps:
        return None, best_values, best, list(progress.path)
    progress.stage = CONFIRM
    confirmation, best_values, best = confirm(
        runner, base_values, progress.steps, confirm_pairs, attempts
    )
    path = list(confirmation.path)
    return confirmation, best_values, best if path else baseline, path


def _measure_baseline(
    runner: SearchRunner, progress: SearchProgress, base_values: dict[str, Any], repeats: int
) -> ProbeResult:
    """The baseline's repeats; their trials start every phase's noise (the runner's)."""
    noise = runner.noise
    progress.base_values, progress.values = dict(base_values), dict(base_values)
    progress.noise, progress.probes = noise, runner.probes
    progress.stage = BASELINE
    baseline = runner.baseline(base_values, repeats)
    for phase in PHASES:
        trials = [r.trials_of(phase) for r in runner.baseline_runs]
        noise.of(phase).set_trials(trials)
        noise.of(phase, base_values).set_trials(trials)
    progress.baseline, progress.incumbent = baseline, list(runner.baseline_runs)
    return baseline


def partial_outcome(
    progress: SearchProgress, why: str, stages: list[str], max_pairs: int = MAX_PAIRS
) -> SearchOutcome | None:
    """What a search stopped before its end found: the incumbent its stages' pairs upheld so
    far (not confirmed against the baseline), and the stages it did not finish. None when
    the baseline had not been measured: there is nothing to recommend.

    Args:
        progress: the stopped search's progress.
        why: why it stopped, in a few words ("stopped by SIGTERM").
        stages: every stage of the ladder, in order.
        max_pairs: as the search ran.
    """
    baseline = progress.baseline
    if baseline is None:
        return None
    decided = {d.stage for d in progress.decisions}
    not_run = [name for name in stages if name not in decided]
    noise = progress.noise
    incumbent = Series(progress.incumbent)
    best = incumbent.summary() if progress.incumbent else baseline
    return SearchOutcome(
        baseline=baseline,
        best_values=dict(progress.values),
        best=best,
        probes=list(progress.probes),
        stage_decisions=list(progress.decisions),
        margin=noise.full.resolvable(max_pairs) if noise is not None else 0.0,
        confirmation=None,
        base_values=dict(progress.base_values),
        path=list(progress.path),
        search="staged",
        noise=noise,
        drift=noise.full.moved(probe_key(progress.base_values)) if noise is not None else None,
        partial=why,
        not_run=not_run,
        left_out=list(progress.left_out),
    )


def _climb(
    stages: list[StagePlan],
    runner: SearchRunner,
    max_pairs: int,
    progress: SearchProgress,
    before_stage: Callable[[StagePlan], str | None] | None,
) -> None:
    """Each stage in turn on top of the incumbent, adopting what its pairs uphold; `progress`
    holds the incumbent, the path to it and every stage's decision as they come."""
    incumbent = Series(progress.incumbent)
    for plan in stages:
        values = progress.values
        if plan.refresh is not None:
            plan = plan.refresh(values)
        progress.stage = plan.name
        progress.started.append(plan.name)
        reason = plan.skip_reason
        busy, cause = _load_skip(plan, runner) if reason is None else (None, LOAD)
        if busy is not None:
            runner.skip(dataclasses.replace(plan, skip_reason=busy), values)
            progress.decisions.append(
                StageDecision(plan.name, None, None, busy, unmeasured=busy, cause=cause)
            )
            continue
        if reason is None and before_stage is not None:
            reason = before_stage(plan)
            if reason is not None:
                progress.left_out.append(plan.name)
        if reason is not None:
            runner.skip(dataclasses.replace(plan, skip_reason=reason), values)
            progress.decisions.append(StageDecision(plan.name, None, None, f"skipped: {reason}"))
            continue
        start = len(runner.probes)
        try:
            decision, winner = run_stage(plan, values, incumbent, runner, max_pairs)
            dropped = sum(1 for p in runner.probes[start:] if p.user_skipped)
            if dropped:  # the user skipped the rest: no verdict, and no failure either
                decision, winner = _skipped_by_user(decision, runner.probes[start:]), None
        except MachineBusy as busy:
            progress.decisions.append(
                StageDecision(
                    plan.name, None, None, f"stopped: {busy}", unmeasured=str(busy), cause=LOAD
                )
            )
            continue
        except StageCut as cut:
            progress.left_out.append(plan.name)
            progress.decisions.append(
                StageDecision(plan.name, None, None, f"stopped before it decided: {cut}")
            )
            continue
        progress.decisions.append(decision)
        if winner is not None:
            cand, incumbent = winner
            progress.values = {**values, **cand.values}
            progress.incumbent = incumbent.results
            progress.path.append(cand.label)
            progress.steps.append((cand.label, dict(progress.values)))
    progress.stage = None


def _load_skip(plan: StagePlan, runner: SearchRunner) -> tuple[str | None, str]:
    """Why others' load leaves a stage unmeasured before its first probe, and the cause:
    the ladder stopped for it, or the probes run on the threads the load left and the
    stage would set the thread count (confine.py); None to run it."""
    if not plan.candidates:
        return None, LOAD
    if runner.load.ladder_spent:
        return "not run: the machine was too busy (the ladder stopped)", LOAD
    # this run's probes: a resume on a quiet node measures the stage a busy one left out
    threads = confined_of(p for p in runner.probes if not p.replayed)
    if threads is not None and sets_threads(plan.candidates):
        return left_out_line(threads), CONFINED
    return None, LOAD


def _skipped_by_user(decision: StageDecision, probes: list[ProbeResult]) -> StageDecision:
    """A stage the user skipped part-way: said as skipped, with what it measured before,
    never as failed (its dropped probes did not run)."""
    ran = sum(1 for p in probes if not p.user_skipped)
    return dataclasses.replace(
        decision,
        winner=None,
        gain_pct=None,
        reason=f"{USER_SKIP} after {ran} probe(s)",
        failed=[f for f in decision.failed if USER_SKIP not in f],
        evidence=None,
        unmeasured="",
    )


def _search_gain(
    runner: SearchRunner, baseline: ProbeResult, values: dict[str, Any]
) -> float | None:
    """The search's own estimate of its pick's gain on FULL: its latest probe of every phase
    (the check its last stage ran) over the baseline's, unpaired (the confirmation pairs)."""
    if values == runner.reference_values:
        return None
    pick = runner.latest_whole(values)
    if pick is None or not pick.full_sps or not baseline.full_sps:
        return None
    return pick.full_sps / baseline.full_sps - 1
