"""A stage judged on the phase its knob moves, and its adoption checked whole on FULL."""

from __future__ import annotations

import pytest

from tuneup.probe.types import Candidate, ProbeResult, Status
from tuneup.tuning.search.composition import beyond_reach, overlap, tolerance
from tuneup.tuning.search.paired import NoiseTracker
from tuneup.tuning.search.search_records import StagePlan
from tuneup.tuning.search.staged import staged_search

TIGHT = (-0.002, -0.001, 0.0, 0.001, 0.002)


class Phases:
    """A measure with IO, SYNTHETIC and FULL of their own: values["io"] and values["syn"]
    samples/s; FULL reaches values["share"] of min(IO, SYNTHETIC). It answers the phases
    a candidate asks for (its judged phase alone, or every phase when whole)."""

    def __init__(self) -> None:
        self.calls: list[tuple[str, str, str, bool]] = []

    def __call__(self, stage: str, cand: Candidate, values: dict) -> ProbeResult:
        self.calls.append((stage, cand.label, cand.judged, cand.whole))
        io, syn = float(values["io"]), float(values["syn"])
        full = values["share"] * min(io, syn)
        asked = {"io", "synthetic", "full"} if cand.whole else {cand.judged}
        rates = {"io": io, "synthetic": syn, "full": full}
        trials = {p: [rates[p] * (1 + d) for d in TIGHT] for p in asked}
        return ProbeResult(
            stage,
            dict(cand.values),
            dict(values),
            Status.OK,
            io_sps=io if "io" in asked else None,
            io_sps_trials=trials.get("io", []),
            synthetic_sps=syn if "synthetic" in asked else None,
            synthetic_sps_trials=trials.get("synthetic", []),
            full_sps=full if "full" in asked else None,
            full_sps_trials=trials.get("full", []),
            losses=[0.12, 0.1, 0.09],
        )

    def of_stage(self, stage: str) -> list[tuple[str, str, bool]]:
        return [(label, judged, whole) for s, label, judged, whole in self.calls if s == stage]


START = {"io": 1000.0, "syn": 200.0, "share": 0.95}  # compute-bound, FULL close to its bound


def test_a_compute_knob_is_judged_on_synthetic_and_measured_whole_once_when_adopted():
    measure = Phases()
    amp = StagePlan("amp", [Candidate("amp=on", {"syn": 300.0})], judged="synthetic")
    outcome = staged_search(dict(START), [amp], measure, confirm_pairs=2)

    calls = measure.of_stage("amp")
    assert outcome.best_values["syn"] == 300.0
    # the candidate's pairs ran SYNTHETIC alone; one whole probe checked the adoption
    assert [c for c in calls if c[2]] == [("amp=on", "full", True)]
    assert all(judged == "synthetic" for _, judged, whole in calls if not whole)
    decision = outcome.stage_decisions[0]
    assert decision.phase == "synthetic"
    assert decision.composition is not None and "FULL follows from them" in decision.composition


def test_a_gain_full_does_not_follow_is_decided_on_full_and_refused_when_full_shows_none():
    measure = Phases()
    # the knob lifts SYNTHETIC by 50% but wrecks the overlap: FULL is no faster
    knob = StagePlan(
        "knob", [Candidate("knob=on", {"syn": 300.0, "share": 0.6})], judged="synthetic"
    )
    outcome = staged_search(dict(START), [knob], measure, confirm_pairs=2)

    decision = outcome.stage_decisions[0]
    assert decision.winner is None and outcome.best_values == START
    assert decision.phase == "full"
    assert "decided on FULL" in decision.reason and "FULL did not show it" in decision.reason
    # the incumbent was measured on FULL alongside the candidate
    assert ("incumbent", "full", False) in measure.of_stage("knob")


def test_a_loader_knob_is_not_adopted_while_the_model_is_the_wall():
    measure = Phases()
    workers = StagePlan("workers", [Candidate("workers=8", {"io": 2000.0})], judged="io")
    # baseline is compute-bound: IO 1000, SYNTHETIC 200
    outcome = staged_search(dict(START), [workers], measure, confirm_pairs=2)

    decision = outcome.stage_decisions[0]
    assert decision.winner is None
    assert "SYNTHETIC bounds FULL at 200 samples/s" in decision.reason
    assert not any(whole for _, _, whole in measure.of_stage("workers"))  # no check was run


def test_beyond_reach_needs_the_other_phase_well_under_both_figures():
    whole = ProbeResult("b", {}, {}, Status.OK, io_sps=1000.0, synthetic_sps=200.0, full_sps=190.0)
    assert beyond_reach("io", whole, 1000.0, 2000.0) is not None
    assert beyond_reach("io", whole, 240.0, 400.0) is None  # 200 x 1.25 > 240: both shape FULL
    assert beyond_reach("synthetic", whole, 200.0, 260.0) is None  # the loader is far above
    assert beyond_reach("full", whole, 1.0, 2.0) is None and beyond_reach("io", None, 1, 2) is None


def test_overlap_and_its_tolerance():
    whole = ProbeResult("b", {}, {}, Status.OK, io_sps=400.0, synthetic_sps=200.0, full_sps=150.0)
    assert overlap(whole) == pytest.approx(0.75)
    above = ProbeResult("b", {}, {}, Status.OK, io_sps=400.0, synthetic_sps=200.0, full_sps=210.0)
    assert overlap(above) == 1.0 and overlap(None) == 1.0
    quiet = NoiseTracker()
    assert tolerance(quiet) == pytest.approx(max(0.05, quiet.needed))
    noisy = NoiseTracker(repeats=[0.1, -0.1, 0.12, -0.08, 0.1, -0.1])
    assert tolerance(noisy, noisy) > 0.2
