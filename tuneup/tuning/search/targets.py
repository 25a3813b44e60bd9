"""An answer of its own for each target that cannot run the recommendation (probe.targets).

Once the confirmation has decided the recommendation, each other target the trainer
declares (the tutorial's train.py) is asked which recommended knobs it cannot run. Where
it can run them all, its answer is the recommendation. Where it cannot, those knobs (and
the knobs that go with them: a loader's workers) go back to the baseline's values, each
ladder stage that sets one of them runs again on top of that, proposing only what the
target can run (journaled as STAGE@TARGET, judged as the ladder's stages are), and the
result is confirmed against the baseline in interleaved FULL pairs (CONFIRM@TARGET):
the target's own measured factor. A target whose best does not hold up against the
baseline gets the baseline, as the recommendation would. Pure: its probes run through
the search's runner.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import Any

from tuneup.probe.stats import median
from tuneup.probe.targets import Target, target_stage
from tuneup.probe.types import Candidate
from tuneup.tuning.search.confirm import confirm_one
from tuneup.tuning.search.load import MachineBusy
from tuneup.tuning.search.search_records import (
    CONFIRM,
    StageCut,
    StageDecision,
    StagePlan,
    TargetOutcome,
)
from tuneup.tuning.search.search_runner import SearchRunner, Series
from tuneup.tuning.search.stage_search import run_stage


def tune_targets(
    targets: tuple[Target, ...],
    runner: SearchRunner,
    stages: list[StagePlan],
    base_values: dict[str, Any],
    recommended: dict[str, Any],
    max_pairs: int,
    confirm_pairs: int,
    before_stage: Callable[[StagePlan], str | None] | None = None,
) -> list[TargetOutcome]:
    """Each of `targets`' answer to `recommended` (the module docstring)."""
    return [
        _tune_one(
            target, runner, stages, base_values, recommended, max_pairs, confirm_pairs, before_stage
        )
        for target in targets
    ]


def expected_target_plans(
    targets: tuple[Target, ...], stages: list[StagePlan]
) -> list[tuple[Target, list[StagePlan]]]:
    """The stages each target is expected to run again, before the ladder has run: where a
    loader stage (judged on IO) proposes a loader it cannot run, the stages that set the
    knobs it would have tuned again, but the loader stage itself, whose own screens choose
    for it (it runs no probe); each as its plan stands now (the clock prices them). Only a
    loader is counted on: the GPU-resident one wins wherever it is proposed and fits
    (13,200 samples/s of IO against 310 on the H200); a knob of a few percent (CUDA graphs)
    may not, and a target it would reset is priced once its stages run."""
    expected = []
    for target in targets:
        reset: set[str] = set()
        screened: set[str] = set()
        for plan in stages:
            if plan.skip_reason is not None or plan.judged != "io":
                continue
            for cand in plan.candidates:
                cannot = target.reset_knobs(cand.values)
                if cannot:
                    screened.add(plan.name)
                reset |= set(cannot)
        if not reset:
            continue
        mine = [
            _for_target(plan, target, {}, reset) for plan in stages if plan.name not in screened
        ]
        expected.append((target, [m for m in mine if m is not None and m.candidates]))
    return expected


def _tune_one(
    target: Target,
    runner: SearchRunner,
    stages: list[StagePlan],
    base_values: dict[str, Any],
    recommended: dict[str, Any],
    max_pairs: int,
    confirm_pairs: int,
    before_stage: Callable[[StagePlan], str | None] | None,
) -> TargetOutcome:
    reset = target.reset_knobs(recommended)
    if not reset:
        return TargetOutcome(target, dict(recommended), same=True)
    cannot = target.unrunnable(recommended)
    values = {**recommended, **{k: base_values[k] for k in reset if k in base_values}}
    outcome = TargetOutcome(target, values, left_out=cannot)
    incumbent = Series([])
    path: list[str] = []
    for plan in stages:
        if plan.refresh is not None:
            plan = plan.refresh(values)
        mine = _for_target(plan, target, values, set(reset))
        if mine is None:
            continue
        screened = _from_screens(plan, mine, target, runner, values, set(reset))
        if screened is not None:  # the ladder's own screens of a loader choose it
            chosen, decision = screened
            outcome.decisions.append(decision)
            if chosen:
                values = {**values, **chosen}
                path.append(decision.winner or "")
            continue
        why = before_stage(plan) if before_stage is not None else None
        if why is not None:  # the time budget: the stage's knobs stay where they are
            outcome.decisions.append(StageDecision(mine.name, None, None, f"skipped: {why}"))
            continue
        try:
            decision, winner = run_stage(mine, values, incumbent, runner, max_pairs)
        except (StageCut, MachineBusy) as stop:
            outcome.decisions.append(StageDecision(mine.name, None, None, f"stopped: {stop}"))
            continue
        outcome.decisions.append(decision)
        if winner is not None:
            cand, incumbent = winner
            values = {**values, **cand.values}
            path.append(cand.label)
    outcome.values = values
    return _confirmed(outcome, runner, base_values, path, confirm_pairs)


def _for_target(
    plan: StagePlan, target: Target, values: dict[str, Any], reset: set[str]
) -> StagePlan | None:
    """The stage as the target runs it again (named STAGE@TARGET, only candidates it can
    run), when it sets one of the knobs reset for it; None when it sets none."""
    if plan.skip_reason is not None or not plan.candidates:
        return None
    if not any(set(c.values) & reset for c in plan.candidates if not c.reference):
        return None
    kept: list[Candidate] = []
    not_tried = list(plan.not_tried)
    for cand in plan.candidates:
        why = target.unrunnable({**values, **cand.values})
        if cand.reference or not why:
            kept.append(cand)
        else:
            not_tried.append(f"{cand.label}: {'; '.join(why.values())}")
    reason = None if kept else f"{target.label} runs none of its candidates"
    return dataclasses.replace(
        plan,
        name=target_stage(plan.name, target.name),
        candidates=kept,
        skip_reason=reason,
        not_tried=not_tried,
        refresh=None,
    )


def _from_screens(
    plan: StagePlan,
    mine: StagePlan,
    target: Target,
    runner: SearchRunner,
    values: dict[str, Any],
    reset: set[str],
) -> tuple[dict[str, Any], StageDecision] | None:
    """A stage judged on IO that the ladder ran already on the loader knobs the target now
    holds: its screens chose on IO, which measures the loader alone, whatever the model's
    knobs; the fastest the target runs is its choice, with no probe more (the knobs that
    go with it are tuned after it, and the whole is confirmed against the baseline). None
    when the ladder measured no such screen."""
    if mine.judged != "io":
        return None
    rates: dict[str, list[float]] = {}
    labels: dict[str, dict[str, Any]] = {}
    knobs = {k for c in plan.candidates for k in c.values}
    fixed = reset - knobs  # the loader knobs the stage does not set must be the target's
    for probe in runner.probes:
        rate = probe.rate("io")
        if probe.stage != plan.name or not probe.ok or rate is None:
            continue
        if any(probe.config.get(k) != values.get(k) for k in fixed):
            continue
        choice = {k: probe.config.get(k) for k in knobs if k in probe.config}
        if target.unrunnable({**values, **choice}):
            continue
        key = ", ".join(f"{k}={v}" for k, v in sorted(choice.items()))
        rates.setdefault(key, []).append(rate)
        labels[key] = choice
    if not rates:
        return None
    best = max(rates, key=lambda key: median(rates[key]))
    said = ", ".join(f"{key or 'the ladder incumbent'} {median(r):.0f}" for key, r in rates.items())
    chosen = {k: v for k, v in labels[best].items() if values.get(k) != v}
    named = next((c.label for c in plan.candidates if c.values == labels[best]), best)
    why = (
        f"the fastest {target.label} runs on {plan.name}'s screens ({said} samples/s IO; IO "
        "measures the loader alone)"
    )
    decision = StageDecision(
        target_stage(plan.name, target.name),
        named if chosen else None,
        None,
        f"{named} chosen: {why}" if chosen else f"the incumbent's stays: {why}",
        not_tried=mine.not_tried,
        phase="io",
    )
    return chosen, decision


def _confirmed(
    outcome: TargetOutcome,
    runner: SearchRunner,
    base_values: dict[str, Any],
    path: list[str],
    pairs: int,
) -> TargetOutcome:
    """The target's values against the baseline in pairs; the baseline where they do not
    hold up (or equal it)."""
    target = outcome.target
    if outcome.values == base_values or pairs <= 0:
        if outcome.values == base_values:
            outcome.note = f"nothing {target.label} runs beat the baseline here"
        return outcome
    stage = target_stage(CONFIRM, target.name)
    try:
        attempt, series, _cut = confirm_one(
            runner, base_values, tuple(path), outcome.values, pairs, stage=stage
        )
    except (StageCut, MachineBusy) as stop:
        outcome.note = f"its answer was not confirmed against the baseline: {stop}"
        return outcome
    outcome.attempt = attempt
    if attempt.upheld:
        outcome.best = series.summary()
    else:
        tried = " + ".join(path) or "its answer"
        outcome.note = (
            f"{tried} did not hold up against the baseline ({attempt.evidence.why}): "
            "it keeps the baseline"
        )
        outcome.values = dict(base_values)
    return outcome
