"""The grid search: every combination of the stages' candidates, to check the staged search.

Identical configurations are measured once and the best `ok` one by FULL wins
outright: no margin, no pairs, no confirmation. Reference candidates are
skipped (search.py's module docstring says why).
"""

from __future__ import annotations

import dataclasses
import itertools
from typing import Any

from tuneup.probe.confine import confined_of, left_out_line, sets_threads
from tuneup.probe.stats import noise_margin
from tuneup.probe.types import Candidate, probe_key
from tuneup.tuning.search.paired import PhaseNoise
from tuneup.tuning.search.search_records import (
    GRID,
    Already,
    Measure,
    SearchOutcome,
    StageDecision,
    StagePlan,
)
from tuneup.tuning.search.search_runner import SearchRunner, comparable


def grid_search(
    base_values: dict[str, Any],
    stages: list[StagePlan],
    measure: Measure,
    *,
    already: Already | None = None,
    guard: bool = True,
) -> SearchOutcome:
    """Every combination of the stages' candidates (each stage may also keep the base value).

    Identical configurations are measured once; the best `ok` one by FULL wins
    outright (the grid checks the staged search; it applies no margin).
    Reference candidates are skipped (see the module docstring). `guard` as
    for staged_search.
    """
    runner = SearchRunner(measure, already, PhaseNoise(), guard)
    baseline = runner.baseline(base_values, 1)
    # probes confined under others' load (probe/confine.py): a thread count is not tried
    threads = confined_of(p for p in runner.probes if not p.replayed)
    if threads is not None:
        stages = [
            dataclasses.replace(plan, skip_reason=left_out_line(threads))
            if plan.skip_reason is None and sets_threads(plan.candidates)
            else plan
            for plan in stages
        ]
    active: list[StagePlan] = []
    for plan in stages:
        if plan.skip_reason is not None:
            runner.skip(plan, base_values)
        else:
            active.append(plan)
    best_choice: list[Candidate | None] = [None] * len(active)
    best, best_values = baseline, dict(base_values)
    seen = {probe_key(base_values)}
    options = [[None, *(c for c in plan.candidates if not c.reference)] for plan in active]
    for choice in itertools.product(*options):
        picked = [c for c in choice if c is not None]
        variant: dict[str, Any] = {}
        ranks = None
        for cand in picked:
            variant.update(cand.values)
            ranks = cand.ranks if cand.ranks is not None else ranks
        merged = {**base_values, **variant}
        if probe_key(merged, ranks) in seen:
            continue
        seen.add(probe_key(merged, ranks))
        label = "+".join(c.label for c in picked)
        result = runner.run(GRID, Candidate(label, variant, ranks=ranks), merged)
        if comparable(result) and result.full_sps > best.full_sps:  # type: ignore[operator]
            best, best_values, best_choice = result, merged, list(choice)

    decisions: list[StageDecision] = []
    for plan in stages:
        if plan.skip_reason is not None:
            decisions.append(StageDecision(plan.name, None, None, f"skipped: {plan.skip_reason}"))
            continue
        chosen = best_choice[active.index(plan)]
        if chosen is None:
            decisions.append(StageDecision(plan.name, None, None, "the best grid point keeps it"))
        else:
            decisions.append(
                StageDecision(
                    plan.name, chosen.label, None, f"the best grid point uses {chosen.label}"
                )
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
