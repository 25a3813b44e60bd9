"""The ladder's time left, as a session says it: a guess at first, this machine's costs as
soon as probes finish, the pairs its own decisions took, and right against the real clock."""

from __future__ import annotations

import json
import os
import statistics
import time
from pathlib import Path
from typing import Any

import pytest

from tests.test_probe_real import _preset as tiny_preset
from tuneup.hardware.types import MachineInfo
from tuneup.preset.load import load_preset, parse_preset
from tuneup.probe.estimate import ProbeCosts, measured_costs
from tuneup.probe.types import Candidate, ProbeResult, Status
from tuneup.trainers.backends import WorkerBackend
from tuneup.tuning.assembly import SessionRequest, assemble_resume
from tuneup.tuning.journal import ResultsDir
from tuneup.tuning.ladder_record import LadderRecord
from tuneup.tuning.search_records import StagePlan
from tuneup.tuning.session import ProbeSession, SilentReporter
from tuneup.tuning.time_left import LadderClock

FRESH_S, SERVED_S = 3.0, 0.5


class Sharing:
    """Shaped like the U-Net worker's backend: a probe that starts a process takes 3 s,
    one in a shared process 0.5 s; FULL samples/s is values["speed"], a little noise."""

    def __init__(self) -> None:
        self.pair: int | None = None
        self.n = 0

    def __call__(self, stage: str, cand: Candidate, values: dict[str, Any]) -> ProbeResult:
        fresh = stage == "baseline" or (stage == "confirm" and cand.pair != self.pair)
        self.pair = cand.pair
        self.n += 1
        speed = values["speed"] * (1 + 0.01 * ((self.n * 7) % 5 - 2))
        return ProbeResult(
            stage,
            dict(cand.values),
            dict(values),
            Status.OK,
            full_sps=speed,
            full_sps_trials=[speed * 0.99, speed, speed * 1.01],
            losses=[1.0, 0.9],
            wall_s=FRESH_S if fresh else SERVED_S,
            served_before=0 if fresh else 1,
        )


class Said(SilentReporter):
    """Keeps each time_left the session says (at the start, then after each probe), with
    the probes done when it said it."""

    def __init__(self) -> None:
        self.said: list[tuple[int, float, bool, float]] = []  # done, seconds, measured, when

    def time_left(self, seconds: float, measured: bool) -> None:
        self.said.append((len(self.said), seconds, measured, time.monotonic()))


def sharing_session(tmp_path: Path, reporter: Said, record: LadderRecord) -> ProbeSession:
    preset = load_preset("cpu-smoke")
    plans = [
        StagePlan(name, [Candidate(f"{name} {s}", {"speed": s}) for s in speeds])
        for name, speeds in (("a", (130.0, 80.0)), ("b", (101.0,)), ("c", (60.0, 99.0)))
    ]
    return ProbeSession(
        preset=preset,
        trainer="unet",
        backend=Sharing(),
        results=ResultsDir(tmp_path / "run"),
        machine=MachineInfo(cpus_usable=2),
        base_values={"speed": 100.0},
        plans=plans,
        reporter=reporter,
        record=record,
    )


def test_the_time_left_is_a_guess_until_the_first_probe_then_this_machines(tmp_path):
    said = Said()
    session = sharing_session(tmp_path, said, LadderRecord(tmp_path / "cache"))
    session.start(resume=False)
    outcome = session.run()

    (done0, _, measured0, _), (done1, _, measured1, _) = said.said[:2]
    assert (done0, measured0) == (0, False)
    assert (done1, measured1) == (1, True)
    # Priced at what probes cost here, and counted with the pairs this ladder's decisions
    # took (fewer than the prior here), the estimate closes in stage by stage ...
    walls = [p.wall_s for p in outcome.probes]
    stages = [p.stage for p in outcome.probes]
    error: dict[str, list[float]] = {}
    for done, seconds, _, _ in said.said[3:]:
        real = sum(walls[done:])
        if real:
            error.setdefault(stages[done - 1], []).append(abs(seconds - real) / real)
    means = [statistics.mean(error[stage]) for stage in ("a", "b", "c")]
    assert means == sorted(means, reverse=True) and means[-1] < 0.35
    # ... and in the confirmation it is off by less than one fresh probe.
    for done, seconds, _, _ in said.said:
        if done and stages[done - 1] == "confirm":
            assert abs(seconds - sum(walls[done:])) <= FRESH_S
    assert said.said[-1][1] == 0.0


def test_a_ladder_that_ran_here_gives_the_next_its_costs_before_any_probe(tmp_path):
    record = LadderRecord(tmp_path / "cache")
    first = sharing_session(tmp_path / "one", Said(), record)
    first.start(resume=False)
    first.run()
    kept = record.recall("unet", "cpu-smoke", "1 x 2 CPUs")
    assert kept is not None
    assert (kept.costs.fresh_s, kept.costs.served_s) == (FRESH_S, SERVED_S)

    said = Said()
    second = sharing_session(tmp_path / "two", said, record)
    second.start(resume=False)
    _, seconds, measured, _ = said.said[0]
    assert measured
    unrecorded = Said()
    sharing_session(tmp_path / "three", unrecorded, LadderRecord(tmp_path / "none")).start(
        resume=False
    )
    assert seconds < unrecorded.said[0][1]  # 3 s probes, not the 30 s guess


@pytest.mark.slow
def test_costs_measured_by_the_first_probes_price_the_rest_within_a_quarter(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The estimate's cost side against the real clock on the real worker: priced at what
    the first three probes (two fresh, one shared) cost, the rest of the ladder's probes,
    as many of each kind as really ran, take their real wall time within 25%."""
    from tuneup.trainer.datacache import ensure_synthetic_data

    monkeypatch.setenv("OMP_NUM_THREADS", "1")
    train, val, _ = ensure_synthetic_data(32, 16, 0, Path(os.environ["TUNEUP_CACHE_DIR"]))
    tiny = tiny_preset(tmp_path, [])
    budget = {**tiny["probe"]["budget"], "trial_steps": 20, "loss_steps": 4, "limit_s": 60}
    preset = parse_preset({**tiny, "probe": {"stages": [], "budget": budget}}, "test")
    base = {**preset.train, "train_path": str(train), "val_path": str(val)}
    plans = [
        StagePlan("optimizer", [Candidate("fused", {"optimizer_impl": "fused"})]),
        StagePlan("batch", [Candidate("x2", {"global_batch_size": 8})]),
    ]
    session = ProbeSession(
        preset=preset,
        trainer="unet",
        backend=WorkerBackend(tmp_path / "probes", preset.budget, 0),
        results=ResultsDir(tmp_path / "run"),
        machine=MachineInfo(cpus_usable=2),
        base_values=base,
        plans=plans,
        confirm_pairs=2,
    )
    session.start(resume=False)
    probes = session.run().probes

    first, rest = probes[:3], [p for p in probes[3:] if p.ok]
    assert [p.served_before > 0 for p in first] == [False, False, True]
    costs = measured_costs(first, ProbeCosts(1.0, 1.0))
    fresh = sum(1 for p in rest if p.served_before == 0)
    served = len(rest) - fresh
    predicted = fresh * costs.fresh_s + served * costs.served_s
    real = sum(p.wall_s for p in rest)
    assert served > fresh > 0
    assert abs(predicted - real) <= 0.25 * real, (predicted, real, costs)
    # And they were worth sharing: a shared probe costs a fraction of a fresh one.
    assert statistics.median(p.wall_s for p in rest if p.served_before) < 0.5 * costs.fresh_s


def test_a_ladder_of_several_ranks_prices_every_probe_as_a_fresh_one() -> None:
    plans = [StagePlan("a", [Candidate("x", {"speed": 1.0})])]
    costs = ProbeCosts(30.0, 5.0, measured=True)
    preset = load_preset("cpu-smoke")
    shared = LadderClock("unet", preset, plans).left(None, costs)
    alone = LadderClock("unet", preset, plans, shares_processes=False).left(None, costs)

    assert alone.served == 0 and alone.fresh == shared.fresh + shared.served
    assert alone.seconds(costs) > shared.seconds(costs)


def test_fresh_processes_is_asked_for_recorded_and_kept_on_resume(tmp_path: Path) -> None:
    from tests.test_session_life import tuneup_run

    out = tmp_path / "run"
    done = tuneup_run(
        "probe", "--trainer", "sim", "--stages", "amp", "--fresh-processes", "--out", str(out)
    )
    assert done.returncode == 0, done.stderr
    assert json.loads((out / "session.json").read_text())["fresh_processes"] is True

    resumed = assemble_resume(out, SessionRequest(), MachineInfo(cpus_usable=2))
    try:
        assert resumed.session.fresh_processes is True
        assert not resumed.session.clock.shares_processes
    finally:
        resumed.close()
