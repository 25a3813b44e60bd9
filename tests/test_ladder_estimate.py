"""The ladder's time left, as a session says it: a guess at first (or a recorded machine's),
this machine's costs as soon as probes finish, the pairs its own decisions took, and right
against the real clock."""

from __future__ import annotations

import dataclasses
import json
import os
import statistics
from pathlib import Path

import pytest
from tuneup_plugins.sim import SimCosts, SimTrainer

from tests.test_probe_real import _preset as tiny_preset
from tuneup.costs.estimate import Habits, ProbeCosts, probe_seconds
from tuneup.hardware.types import MachineInfo
from tuneup.preset.load import load_preset, parse_preset
from tuneup.probe.types import Candidate, ProbeResult, Status
from tuneup.trainers.adapters import load_trainer
from tuneup.trainers.backends import WorkerBackend
from tuneup.tuning.clock.ladder_record import LadderRecord
from tuneup.tuning.clock.measured import measured_costs, result_plan
from tuneup.tuning.clock.time_left import LadderClock
from tuneup.tuning.results.journal import ResultsDir
from tuneup.tuning.search.search_records import StagePlan
from tuneup.tuning.session.assembly import SessionRequest
from tuneup.tuning.session.control import SilentReporter
from tuneup.tuning.session.probe_session import ProbeSession
from tuneup.tuning.session.resume import assemble_resume


class Said(SilentReporter):
    """Keeps each time_left the session says (at the start, then after each probe)."""

    def __init__(self) -> None:
        self.said: list[tuple[int, float, str]] = []  # probes done, seconds, what it rests on

    def time_left(self, seconds: float, basis: str) -> None:
        self.said.append((len(self.said), seconds, basis))


class Timed(SimTrainer):
    """The sim trainer with a GPU's costs (a 30 s process start, 3 s set-up): its probes
    take the time the estimate's model gives them, and the session hears it."""

    def __init__(self) -> None:
        super().__init__(seed=3, noise=0.02, costs=SimCosts(spawn_s=30.0, setup_s=3.0))


def timed_session(tmp_path: Path, reporter: Said, record: LadderRecord) -> ProbeSession:
    preset = load_preset("generic-cuda")
    plans = [
        StagePlan(
            "workers",
            [Candidate(f"{w} workers", {"num_data_workers": w}) for w in (4, 8)],
            judged="io",
        ),
        StagePlan("amp", [Candidate("bf16", {"amp_mode": "bf16"})], judged="synthetic"),
        StagePlan("jit", [Candidate("script", {"jit": "script"})], judged="synthetic"),
    ]
    return ProbeSession(
        preset=preset,
        # priced as the U-Net's ladder: the sim alone says nothing of time
        adapter=load_trainer("unet"),
        backend=Timed(),
        results=ResultsDir(tmp_path / "run"),
        machine=MachineInfo(cuda=True, gpu_count=1, cpus_usable=16),
        base_values={"device": "cuda"},
        plans=plans,
        reporter=reporter,
        record=record,
    )


def test_the_time_left_is_a_guess_until_the_first_probe_then_this_machines(tmp_path):
    said = Said()
    session = timed_session(tmp_path, said, LadderRecord(tmp_path / "cache"))
    session.start(resume=False)
    outcome = session.run()

    (done0, _, basis0), (done1, _, basis1) = said.said[:2]
    assert (done0, basis0) == (0, "a guess from the trainer's step model")  # no costs recorded
    assert (done1, basis1) == (1, "measured here")
    walls = [p.wall_s for p in outcome.probes]
    total = sum(walls)
    # Priced at what probes cost here, and counted with the pairs this ladder's decisions
    # took, the estimate of the whole closes in as the ladder goes ...
    errors = [abs(sum(walls[:done]) + left - total) / total for done, left, _ in said.said[1:]]
    thirds = [statistics.mean(part) for part in (errors[:5], errors[5:10], errors[-5:])]
    assert thirds[-1] < 0.1 and thirds[-1] <= thirds[0]
    assert said.said[-1][1] == 0.0  # the ladder's end: nothing left


def test_a_ladder_that_ran_here_gives_the_next_its_costs_before_any_probe(tmp_path):
    record = LadderRecord(tmp_path / "cache")
    first = timed_session(tmp_path / "one", Said(), record)
    first.start(resume=False)
    outcome = first.run()
    kept = record.recall("unet", "generic-cuda", "1 x 16 CPUs")
    assert kept is not None and kept.costs.recorded
    assert kept.costs.spawn_s == pytest.approx(30.0 + 5.0)  # its start and first steps
    assert kept.costs.setup_s == pytest.approx(3.0)

    said = Said()
    second = timed_session(tmp_path / "two", said, record)
    second.start(resume=False)
    _, seconds, basis = said.said[0]
    assert basis.startswith("from this machine's last ladder of ")
    real = sum(p.wall_s for p in outcome.probes)
    assert abs(seconds - real) <= 0.35 * real
    unrecorded = Said()
    timed_session(tmp_path / "three", unrecorded, LadderRecord(tmp_path / "none")).start(
        resume=False
    )
    assert abs(seconds - real) < abs(unrecorded.said[0][1] - real)  # closer than the guess


def test_a_preset_that_recorded_its_machines_costs_is_the_first_estimate(tmp_path):
    h200 = load_preset("h200")
    assert h200.costs is not None and "twin" in h200.costs["source"]
    clock = LadderClock(load_trainer("unet"), h200, [StagePlan("amp", [Candidate("bf16", {})])])
    costs = clock.costs()
    assert costs.recorded and not costs.measured  # said as a guess, from a recorded machine
    assert costs.spawn_s == h200.costs["spawn_s"]


@pytest.mark.slow
def test_costs_measured_by_the_first_probes_price_the_rest_within_a_quarter(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The estimate's cost side against the real clock on the real worker: the model with
    what the first three probes measured (start-up, step times, trials) prices the rest of
    the ladder's probes, each by its own plan, within 25% of their real wall time."""
    from tuneup.unet.datacache import ensure_synthetic_data

    monkeypatch.setenv("OMP_NUM_THREADS", "1")
    train, val, _ = ensure_synthetic_data(
        32, 16, 0, Path(os.environ["TUNEUP_CACHE_DIR"]), npy=False
    )
    tiny = tiny_preset(tmp_path, [])
    budget = {**tiny["probe"]["budget"], "trial_s": 0.2, "loss_steps": 4, "limit_s": 60}
    preset = parse_preset({**tiny, "probe": {"stages": [], "budget": budget}}, "test")
    base = {**preset.train, "train_path": str(train), "val_path": str(val)}
    plans = [
        # bf16 loses by far on a CPU: decided in a pair, where fused Adam's few percent in
        # the noise ran to its last pair (44 s of CI)
        StagePlan("amp", [Candidate("bf16", {"amp_mode": "bf16"})], judged="synthetic"),
        StagePlan("batch", [Candidate("x2", {"global_batch_size": 8})]),
    ]
    session = ProbeSession(
        preset=preset,
        adapter=load_trainer("unet"),
        backend=WorkerBackend(tmp_path / "probes", preset.budget, 0),
        results=ResultsDir(tmp_path / "run"),
        machine=MachineInfo(cpus_usable=2),
        base_values=base,
        plans=plans,
    )
    session.start(resume=False)
    probes = session.run().probes

    first, rest = probes[:3], [p for p in probes[3:] if p.ok]
    assert [p.served_before > 0 for p in first] == [False, True, True]
    costs = measured_costs(
        [(p, p.served_before == 0) for p in first], preset.budget, session.clock.costs()
    )
    predicted = sum(
        probe_seconds(result_plan(p, preset.budget), costs, fresh=p.served_before == 0)
        for p in rest
    )
    real = sum(p.wall_s for p in rest)
    assert len(rest) >= 4
    assert abs(predicted - real) <= 0.25 * real, (predicted, real, costs)


def test_a_ladder_of_several_ranks_prices_every_probe_as_a_fresh_one() -> None:
    plans = [StagePlan("a", [Candidate("x", {"speed": 1.0})])]
    preset = load_preset("generic-cuda")
    shared = LadderClock(load_trainer("unet"), preset, plans)
    alone = LadderClock(load_trainer("unet"), preset, plans, shares_processes=False)
    kinds = alone.left(None, alone.costs()).counts
    assert all(kind.fresh for kind in kinds)
    assert alone.seconds_left(None)[0] > shared.seconds_left(None)[0]


def test_probes_of_fresh_processes_are_all_counted_whatever_their_kind() -> None:
    # a stage of three candidates, one of them a new conv key: counted as fresh probes,
    # its kinds must add up, not overwrite one another (0.5 probes were once left of 3.5)
    plans = [
        StagePlan(
            "amp",
            [Candidate(v, {"amp_mode": v}) for v in ("bf16", "fp16")]
            + [Candidate("fused", {"optimizer_impl": "fused"})],
            judged="synthetic",
        )
    ]
    preset = load_preset("generic-cuda")
    shared = LadderClock(load_trainer("unet"), preset, plans)
    alone = LadderClock(load_trainer("unet"), preset, plans, shares_processes=False)
    counted = sum(shared.left(None, shared.costs()).counts.values())
    assert sum(alone.left(None, alone.costs()).counts.values()) == pytest.approx(counted)


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
        assert resumed.session.terms.fresh_processes is True
        assert not resumed.session.clock.shares_processes
    finally:
        resumed.close()


def test_a_resume_says_nothing_of_time_while_it_replays_the_journal(tmp_path):
    first = timed_session(tmp_path, Said(), LadderRecord(tmp_path / "cache"))
    first.start(resume=False)
    first.run()
    said = Said()
    again = timed_session(tmp_path, said, LadderRecord(tmp_path / "cache"))
    again.start(resume=True)
    again.run()
    assert said.said == []  # every probe came from the journal: no "2 min left" then 0.6 s


def test_the_clock_prices_what_every_probe_of_a_compile_pays_and_a_per_rank_batch_search():
    # the worker resets dynamo between probes: a compiled configuration compiles again
    # (from the disk caches) in every probe; a rank's batch is a conv key of its own
    preset = load_preset("cpu-smoke")
    clock = LadderClock(load_trainer("unet"), preset, [StagePlan("jit", [])])
    config = {"global_batch_size": 8, "jit": "none"}
    base = ProbeResult("baseline", {}, config, Status.OK, full_sps=80.0, wall_s=5.0,
                       one_time_s={"spawn": 3.0, "first_steps": 1.0})  # fmt: skip
    compiled = dataclasses.replace(
        base, stage="jit", config={**config, "jit": "compile"}, served_before=1,
        one_time_s={"setup": 0.1, "first_steps": 6.0}, wall_s=8.0,
    )  # fmt: skip
    clock.heard("baseline", base)
    clock.heard("jit", compiled)
    probe = Candidate("again", {}, judged="full", whole=False, loss=False)
    plain = clock.probe_s(probe, config, preset.budget)
    first = clock.costs().first_s
    assert first == pytest.approx(6.0)
    again = clock.probe_s(probe, {**config, "jit": "compile"}, preset.budget)
    assert again == pytest.approx(plain + first)
    per_rank = clock.probe_s(probe, {**config, "local_batch_size": 16}, preset.budget)
    assert per_rank == pytest.approx(plain + first)
    fused = clock.probe_s(probe, {**config, "optimizer_impl": "fused"}, preset.budget)
    assert fused == pytest.approx(plain)
    # a script alone searches nothing and compiles nothing: priced as scripts were here
    scripted = dataclasses.replace(
        compiled, config={**config, "jit": "script"}, one_time_s={"setup": 0.1, "first_steps": 0.3}
    )
    clock.heard("jit", scripted)
    assert clock.costs().kernel_s == pytest.approx(0.3) and clock.costs().first_s == first
    script = clock.probe_s(probe, {**config, "jit": "script"}, preset.budget)
    assert script == pytest.approx(clock.probe_s(probe, config, preset.budget) + 0.3)


def test_a_machines_kept_costs_keep_how_first_steps_grow_with_the_batch(tmp_path: Path) -> None:
    # the next session on this machine reads the kept costs before the preset's: their
    # first step is at the baseline's batch, and must still grow with a larger one
    from tuneup.costs.estimate import first_seconds
    from tuneup.tuning.clock.ladder_record import LadderCosts

    record = LadderRecord(tmp_path)
    costs = ProbeCosts(
        spawn_s=40.0, setup_s=1.3, first_s=22.7, step_s={"full": 0.13}, trials={"full": 2.0},
        batch_exponent=1.03, loader_round=3, kernel_s=0.2,
    )  # fmt: skip
    record.remember("unet", "h200", "H200", LadderCosts(costs, Habits(0.1, 0.75)))
    back = record.recall("unet", "h200", "H200")
    assert back is not None
    assert back.costs.batch_exponent == pytest.approx(1.03)
    assert back.costs.loader_round == 3 and back.costs.kernel_s == pytest.approx(0.2)
    assert first_seconds(back.costs, 2.0) == pytest.approx(22.7 * 2**1.03)
