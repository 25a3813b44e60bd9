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

This module is the staged search; beside it: one stage (stage.py) and its
screen (screen.py), the records the search takes and gives
(search_records.py), the probes it runs and compares (search_runner.py), the
confirmation (confirm.py) and the grid (grid.py).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from tuneup.errors import UsageError
from tuneup.probe.types import probe_key
from tuneup.tuning.confirm import confirm
from tuneup.tuning.paired import FLOOR, NoiseTracker
from tuneup.tuning.search_records import Already, Measure, SearchOutcome, StageDecision, StagePlan
from tuneup.tuning.search_runner import SearchRunner, Series
from tuneup.tuning.stage import run_stage

MAX_PAIRS = 5  # the most pairs one stage's comparison takes


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
    guard: bool = True,
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
        guard: apply the loss guard (guard.py) to every probe; False when `measure`
            applies it itself, as ProbeSession does before journaling.

    Raises:
        BaselineFailed: the baseline did not run ok, so no variant can be judged.
    """
    if baseline_repeats < 1:
        raise UsageError(f"baseline_repeats must be at least 1, got {baseline_repeats}")
    noise = NoiseTracker(floor=floor)
    runner = SearchRunner(measure, already, noise, guard)
    baseline = runner.baseline(base_values, baseline_repeats)
    noise.set_trials([r.full_sps_trials for r in runner.baseline_runs])

    climb = _climb(base_values, stages, runner, max_pairs)
    path = climb.path
    search_gain = _search_gain(climb.decisions)
    best_values, best, confirmation = climb.values, climb.incumbent.summary(), None
    if confirm_pairs > 0 and climb.steps:
        confirmation, best_values, best = confirm(
            runner, base_values, climb.steps, confirm_pairs, max_confirm_attempts
        )
        path = list(confirmation.path)
        if not path:
            best = baseline
    return SearchOutcome(
        baseline=baseline,
        best_values=best_values,
        best=best,
        probes=runner.probes,
        stage_decisions=climb.decisions,
        margin=noise.resolvable(max_pairs),
        confirmation=confirmation,
        base_values=dict(base_values),
        path=path,
        search="staged",
        noise=noise,
        search_gain=search_gain,
        drift=noise.moved(probe_key(base_values)),
    )


@dataclass(frozen=True)
class _Climb:
    """Where the stages left the search: the incumbent, the path to it, every stage's decision."""

    values: dict[str, Any]
    incumbent: Series
    path: list[str]
    steps: list[tuple[str, dict[str, Any]]]  # (label, values after adopting it)
    decisions: list[StageDecision]


def _climb(
    base_values: dict[str, Any], stages: list[StagePlan], runner: SearchRunner, max_pairs: int
) -> _Climb:
    """Each stage in turn on top of the incumbent, adopting what its pairs uphold."""
    values = dict(base_values)
    incumbent = Series(runner.baseline_runs)
    path: list[str] = []
    steps: list[tuple[str, dict[str, Any]]] = []
    decisions: list[StageDecision] = []
    for plan in stages:
        if plan.refresh is not None:
            plan = plan.refresh(values)
        if plan.skip_reason is not None:
            runner.skip(plan, values)
            decisions.append(StageDecision(plan.name, None, None, f"skipped: {plan.skip_reason}"))
            continue
        decision, winner = run_stage(plan, values, incumbent, runner, max_pairs)
        decisions.append(decision)
        if winner is not None:
            cand, incumbent = winner
            values = {**values, **cand.values}
            path.append(cand.label)
            steps.append((cand.label, dict(values)))
    return _Climb(values, incumbent, path, steps, decisions)


def _search_gain(decisions: list[StageDecision]) -> float | None:
    """The search's own estimate of its pick's gain: the product of the adopted stages' gains."""
    gains = [d.gain_pct for d in decisions if d.winner is not None and d.gain_pct is not None]
    if not gains:
        return None
    total = 1.0
    for gain in gains:
        total *= 1 + gain / 100
    return total - 1
