"""The final table's rows say what kept each stage unmeasured, in its own words: a busy
machine, the ladder stopping before it, the time, the user, or its probes failing; a
newcomer's first run on a shared node must not read as a broken tool."""

from __future__ import annotations

import contextlib
import dataclasses
from typing import Any

from tuneup.probe.types import USER_SKIP, Candidate, Contention, ProbeResult, Status
from tuneup.tuning.results.stage_rows import stage_rows
from tuneup.tuning.results.verdicts import headline
from tuneup.tuning.search.load import LoadBound
from tuneup.tuning.search.search_records import SearchProgress, StagePlan
from tuneup.tuning.search.staged import partial_outcome, staged_search

TIGHT = (-0.002, -0.001, 0.0, 0.001, 0.002)


class Machine:
    """A measure of `values["speed"]`; stages named in `failing` fail, in `busy` run
    contended (others use a CPU in bursts)."""

    def __init__(self, failing: set[str] = frozenset(), busy: set[str] = frozenset()) -> None:
        self.failing, self.busy = failing, busy

    def __call__(self, stage: str, cand: Candidate, values: dict[str, Any]) -> ProbeResult:
        if stage in self.failing and cand.values:
            return ProbeResult(stage, dict(cand.values), dict(values), Status.CRASH, "boom")
        if stage == "user" and cand.values:  # `s` in the app: the rest of the stage dropped
            return ProbeResult(stage, dict(cand.values), dict(values), Status.SKIPPED, USER_SKIP)
        speed = float(values["speed"])
        trials = [speed * (1 + d) for d in TIGHT]
        result = ProbeResult(
            stage,
            dict(cand.values),
            dict(values),
            Status.OK,
            full_sps=speed,
            full_sps_trials=trials,
            losses=[0.12, 0.1, 0.09],
        )
        if stage in self.busy and cand.values:  # a burst of others' work in its window
            load = Contention(other_cpus=1.8, usable_cpus=2, note="others used 1.8 of 2 CPUs")
            result = dataclasses.replace(result, contention=load)
        return result


def stage(name: str, speed: float) -> StagePlan:
    return StagePlan(name, [Candidate(f"{name}=on", {"speed": speed})])


def rows_by_stage(outcome: Any) -> dict[str, str]:
    return {row.stage: row.result for row in stage_rows(outcome)}


def test_each_unmeasured_stage_names_its_own_cause() -> None:
    plans = [
        stage("failing", 130.0),
        StagePlan("timed_out", [Candidate("t=on", {"speed": 140.0})], "left out for your budget"),
        stage("user", 150.0),
    ]
    outcome = staged_search({"speed": 100.0}, plans, Machine(failing={"failing"}))
    rows = rows_by_stage(outcome)
    assert rows["failing"] == "not measured: its probes failed"
    assert rows["timed_out"] == "skipped: left out for your budget"
    assert rows["user"].startswith("skipped by the user")


def test_a_stage_a_busy_machine_stopped_says_load_not_failure() -> None:
    plans = [stage("busy", 130.0), stage("after", 140.0)]
    load = LoadBound(stage_probes=1, ladder_probes=1)
    outcome = staged_search({"speed": 100.0}, plans, Machine(busy={"busy"}), load=load)
    rows = rows_by_stage(outcome)
    assert rows["busy"] == "not measured: stopped by load"
    assert rows["after"] == "not measured: stopped by load"  # the ladder stopped for load


def test_stages_a_stopped_ladder_never_reached_say_so() -> None:
    progress = SearchProgress()
    plans = [stage("first", 130.0), stage("second", 140.0), stage("third", 150.0)]

    class StopAfterFirst(Machine):
        def __call__(self, stage_name: str, cand: Candidate, values: dict[str, Any]):
            if stage_name == "second":
                raise KeyboardInterrupt
            return super().__call__(stage_name, cand, values)

    with contextlib.suppress(KeyboardInterrupt):  # the stop, as a signal brings it
        staged_search({"speed": 100.0}, plans, StopAfterFirst(), progress=progress)
    outcome = partial_outcome(progress, "stopped by the user", [p.name for p in plans])
    assert outcome is not None
    rows = rows_by_stage(outcome)
    assert rows["first"].startswith("adopted")
    assert rows["second"] == rows["third"] == "not run: the ladder stopped"


def test_a_budget_a_load_ate_says_what_the_load_took() -> None:
    """--budget 1m on a busy node: the minute went on probes a load spoiled, and the line
    that leaves stages out says so, with the seconds, not the budget alone."""

    class BurstyBaseline(Machine):
        def __init__(self) -> None:
            super().__init__()
            self.baselines = 0

        def __call__(self, stage: str, cand: Candidate, values: dict[str, Any]):
            result = super().__call__(stage, cand, values)
            if stage == "baseline":
                self.baselines += 1
                if self.baselines in (1, 3):  # a burst in two of its repeats
                    load = Contention(other_cpus=1.8, usable_cpus=2, note="others used 1.8")
                    return dataclasses.replace(result, contention=load, wall_s=20.0)
            return result

    plans = [stage("first", 130.0), stage("second", 140.0)]
    outcome = staged_search(
        {"speed": 100.0},
        plans,
        BurstyBaseline(),
        before_stage=lambda plan: "your budget" if plan.name == "second" else None,
    )
    line = headline(outcome)
    assert "left out for your budget: second" in line
    assert "a busy machine took 40 s of it: 2 probe(s) spoiled" in line
