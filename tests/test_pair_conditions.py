"""A pair shares its conditions, or it is not a pair: a side replayed from the journal never
pairs with one measured in this run, and a side under a steady load never with a quiet
one; a stage whose pairs' sides ran unalike does not adopt, and says why. (A resumed
`command` session adopted a 7.45x "win" that way: its incumbent replayed under a steady
load at 131-136 samples/s, its candidate quiet at 974-1204, its medians a 4% loss.)"""

from __future__ import annotations

import dataclasses
from typing import Any

from tuneup.probe.conditions import unlike
from tuneup.probe.describe import versus_baseline
from tuneup.probe.types import Candidate, Contention, ProbeResult, Status
from tuneup.tuning.results.stage_rows import stage_rows
from tuneup.tuning.search.search_records import StagePlan
from tuneup.tuning.search.staged import staged_search

TIGHT = (-0.002, -0.001, 0.0, 0.001, 0.002)
LOADED = Contention(
    other_cpus=1.0, usable_cpus=2, note="others used 1.0 of 2 CPUs", under_load=True
)


def probe(stage: str, cand: Candidate, values: dict[str, Any], rate: float) -> ProbeResult:
    return ProbeResult(
        stage,
        dict(cand.values),
        dict(values),
        Status.OK,
        full_sps=rate,
        full_sps_trials=[rate * (1 + d) for d in TIGHT],
        losses=[0.12, 0.1, 0.09],
    )


class Resumed:
    """The mnist case: the incumbent's probes come back from the journal, measured under a
    steady load at a seventh of their quiet speed; the candidate is measured now, quiet,
    4% slower than the incumbent would be quiet."""

    def __call__(self, stage: str, cand: Candidate, values: dict[str, Any]) -> ProbeResult:
        batch = values["global_batch_size"]
        if batch == 64:  # the incumbent: replayed, loaded
            result = probe(stage, cand, values, 133.0)
            return dataclasses.replace(result, contention=LOADED, replayed=True)
        return probe(stage, cand, values, 1019.0)


def test_a_replayed_loaded_incumbent_and_a_quiet_candidate_never_pair():
    loaded = dataclasses.replace(
        probe("s", Candidate("a", {}), {}, 133.0), contention=LOADED, replayed=True
    )
    quiet = probe("s", Candidate("b", {}), {}, 1019.0)
    assert unlike(loaded, quiet) == (
        "1.0 CPUs of others' steady load on one side, 0.0 on the other (replayed from the "
        "journal against one measured in this run)"
    )
    fresh_loaded = dataclasses.replace(loaded, replayed=False)
    assert unlike(fresh_loaded, quiet) == (
        "1.0 CPUs of others' steady load on one side, 0.0 on the other"
    )
    assert unlike(quiet, dataclasses.replace(quiet, full_sps=900.0)) is None
    # a replayed side whose load matches pairs with one measured now (a resume's own)
    assert unlike(dataclasses.replace(quiet, replayed=True), quiet) is None
    # and no "vs baseline" is taken against a baseline that ran under another load
    baseline = dataclasses.replace(fresh_loaded, stage="baseline")
    assert versus_baseline(quiet, baseline) == ""


def test_the_stage_does_not_adopt_and_says_why():
    plan = StagePlan(
        "batch_size",
        [Candidate("batch x2", {"global_batch_size": 128})],
        judged="full",
    )
    outcome = staged_search(
        {"global_batch_size": 64}, [plan], Resumed(), confirm_pairs=0, baseline_repeats=2
    )
    (decision,) = outcome.stage_decisions
    assert decision.winner is None and outcome.best_values == {"global_batch_size": 64}
    assert decision.unresolved
    assert "replayed from the journal" in decision.reason
    assert "645" not in decision.reason and "7.4" not in decision.reason  # no such factor
    row = next(r for r in stage_rows(outcome) if r.stage == "batch_size")
    assert row.result.startswith("unresolved")
