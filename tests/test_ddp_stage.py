"""The ddp stage: its variants and reference runs, the figures they give, resume, reporting."""

from __future__ import annotations

import io
import json
from pathlib import Path
from typing import Any

import pytest
from tuneup_plugins.sim import SimTrainer
from tuneup_plugins.stages import DDP

from tuneup.commands.progress import PlainReporter, result_line
from tuneup.hardware.types import MachineInfo
from tuneup.preset.load import load_preset
from tuneup.probe.stats import median
from tuneup.probe.types import Candidate, ProbeResult, Status
from tuneup.trainers.adapters import load_trainer
from tuneup.tuning.results.ddp_verdicts import communication_overhead
from tuneup.tuning.results.journal import ResultsDir
from tuneup.tuning.results.summary_document import summary_dict
from tuneup.tuning.results.verdicts import stage_summary
from tuneup.tuning.search import paired
from tuneup.tuning.search.grid import grid_search
from tuneup.tuning.search.search_records import StagePlan
from tuneup.tuning.search.staged import staged_search
from tuneup.tuning.session.probe_session import ProbeSession
from tuneup.tuning.session.session_terms import Layout
from tuneup.tuning.session.stage_plans import stage_plans

NODE = MachineInfo(cuda=True, gpu_count=4, cpus_usable=128, world_size=4, dali=True)
# The tutorial's multi-GPU run: 4 GPUs, local batch 16; inmem so compute shows.
BASE = {"local_batch_size": 16, "num_data_workers": 8, "data_loader_config": "inmem"}
LAUNCH = {"nproc": 4, "nodes": 1, "world_size": 4, "launcher": "torchrun"}


def labels(candidates: Any) -> list[str]:
    return [c.label for c in candidates]


# --- the stage ---------------------------------------------------------------------------


def test_ddp_is_skipped_on_one_rank_and_says_how_to_get_more():
    one = MachineInfo(cuda=True, gpu_count=4, cpus_usable=32)  # 4 GPUs, but a 1-rank session
    plan = DDP.propose(one, {})
    assert plan.skipped and plan.candidates == ()
    assert "--nproc 2 or more" in plan.reason


def test_ddp_proposes_its_variants_and_two_references_on_two_ranks():
    two = MachineInfo(cuda=True, gpu_count=2, cpus_usable=32, world_size=2)
    plan = DDP.propose(two, {"global_batch_size": 64})
    assert not plan.skipped and plan.rejected == ()
    assert labels(plan.candidates) == [
        "bucket 10 MB",  # 25 MB, PyTorch's default, is the incumbent's
        "bucket 50 MB",
        "bucket 100 MB",
        "bucket 200 MB",
        "broadcast_buffers off",
        "gradient_as_bucket_view on",
        "noddp",
        "1 rank",
    ]
    refs = {c.label: c for c in plan.candidates if c.reference}
    assert set(refs) == {"noddp", "1 rank"}
    assert refs["noddp"].values == {"noddp": True} and refs["noddp"].ranks is None
    # weak scaling: one GPU with the same per-rank batch (64 over 2 ranks)
    assert refs["1 rank"].ranks == 1 and refs["1 rank"].values == {"local_batch_size": 32}
    assert not any(c.reference for c in plan.candidates if c.label.startswith("bucket"))


def test_one_rank_reference_survives_an_incumbent_with_the_same_local_batch():
    plan = DDP.propose(NODE, {"local_batch_size": 16, "bucket_cap_mb": 100})
    one = next(c for c in plan.candidates if c.label == "1 rank")
    assert one.values == {"local_batch_size": 16} and one.ranks == 1
    assert "bucket 100 MB" not in labels(plan.candidates)


def test_ddp_is_skipped_when_the_incumbent_has_no_gradient_exchange():
    plan = DDP.propose(NODE, {"noddp": True})
    assert plan.skipped and "noddp" in plan.reason


# --- the search with references ----------------------------------------------------------


def fake(speeds: dict[str, float | None]) -> Any:
    """A measure: FULL by candidate label (None: oom), SYNTHETIC twice that, quiet trials."""
    calls: list[tuple[str, str, int | None]] = []

    def measure(stage: str, cand: Candidate, values: dict[str, Any]) -> ProbeResult:
        calls.append((stage, cand.label, cand.ranks))
        speed = speeds.get(cand.label, 100.0)
        if speed is None:
            return ProbeResult(stage, dict(cand.values), dict(values), Status.OOM, "too big")
        trials = [speed * (1 + d) for d in (-0.002, -0.001, 0.0, 0.001, 0.002)]
        return ProbeResult(
            stage,
            dict(cand.values),
            dict(values),
            Status.OK,
            synthetic_sps=2 * speed,
            full_sps=speed,
            full_sps_trials=trials,
            losses=[0.12, 0.1],
            ranks=cand.ranks or 4,
        )

    measure.calls = calls  # type: ignore[attr-defined]
    return measure


def ddp_plan(*cands: Candidate) -> StagePlan:
    return StagePlan(
        "ddp",
        [
            *cands,
            Candidate("noddp", {"noddp": True}, reference=True),
            Candidate("1 rank", {}, ranks=1, reference=True),
        ],
    )


def test_a_faster_reference_is_measured_once_and_never_adopted():
    measure = fake({"noddp": 200.0, "bucket 100 MB": 101.0})
    plan = ddp_plan(Candidate("bucket 100 MB", {"bucket_cap_mb": 100}))
    outcome = staged_search({}, [plan], measure, confirm_pairs=0)
    assert outcome.best_values == {} and outcome.path == []
    assert [c for c in measure.calls if c[0] == "ddp"] == [
        ("ddp", "bucket 100 MB", None),
        ("ddp", "noddp", None),
        ("ddp", "1 rank", 1),  # same knob values as the incumbent, other ranks: measured
        ("ddp", "incumbent", None),  # the screen closes on the incumbent; no pair is run
    ]
    (decision,) = outcome.stage_decisions
    assert {r.candidate.label for r in decision.references} == {"noddp", "1 rank"}
    assert "noddp" not in decision.reason


def test_failed_real_candidates_are_reported_even_when_references_ran():
    measure = fake({"bucket 100 MB": None, "1 rank": None})
    plan = ddp_plan(Candidate("bucket 100 MB", {"bucket_cap_mb": 100}))
    (decision,) = staged_search({}, [plan], measure, confirm_pairs=0).stage_decisions
    assert decision.reason == "no candidate ran ok"
    assert decision.failed == ["bucket 100 MB: oom (too big)", "1 rank (reference): oom (too big)"]
    # and a failed reference alone does not make the stage fail
    (ok,) = staged_search({}, [ddp_plan()], fake({"noddp": None}), confirm_pairs=0).stage_decisions
    assert ok.winner is None and "no candidate ran ok" not in ok.reason


def test_grid_search_skips_reference_candidates():
    measure = fake({"noddp": 500.0, "bucket 100 MB": 120.0})
    plan = ddp_plan(Candidate("bucket 100 MB", {"bucket_cap_mb": 100}))
    outcome = grid_search({}, [plan], measure)
    assert [label for _, label, _ in measure.calls] == ["baseline", "bucket 100 MB"]
    assert outcome.best_values == {"bucket_cap_mb": 100}


def test_overhead_falls_back_to_full_and_says_so():
    with_ddp = ProbeResult("ddp", {}, {}, Status.OK, synthetic_sps=90.0, full_sps=80.0)
    without = ProbeResult("ddp", {}, {}, Status.OK, synthetic_sps=100.0, full_sps=100.0)
    assert communication_overhead(with_ddp, without) == pytest.approx((10.0, "synthetic", 90, 100))
    no_synthetic = ProbeResult("ddp", {}, {}, Status.OK, full_sps=100.0)
    pct, phase, _, _ = communication_overhead(with_ddp, no_synthetic)
    assert phase == "full" and pct == pytest.approx(20.0)
    crashed = ProbeResult("ddp", {}, {}, Status.CRASH, "nccl")
    assert communication_overhead(with_ddp, crashed) is None


# --- a 4-rank ladder on the sim trainer, journaled ---------------------------------------


def session(tmp_path: Path, backend: Any, **kwargs: Any) -> ProbeSession:
    return ProbeSession(
        preset=load_preset("generic-cuda"),
        adapter=load_trainer("sim"),
        backend=backend,
        results=ResultsDir(tmp_path),
        machine=NODE,
        base_values=dict(BASE),
        plans=stage_plans(("amp", "ddp"), NODE, BASE),
        layout=Layout(launch=LAUNCH),
        **kwargs,
    )


@pytest.fixture(scope="module")
def ladder(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Any]:
    out = tmp_path_factory.mktemp("ddp") / "run"
    sim = SimTrainer(seed=5, noise=0.01, cores=128, world_size=4)
    run = session(out, sim.measure)
    run.start(resume=False)
    return out, run.run()


def test_the_ladder_never_recommends_a_reference(ladder):
    out, outcome = ladder
    journal = ResultsDir(out).results()
    noddp = next(p for p in journal if p.variant == {"noddp": True})
    one_rank = next(p for p in journal if p.stage == "ddp" and p.ranks == 1)
    assert noddp.ranks == 4 and noddp.ok and one_rank.ok
    # noddp is clearly faster than anything DDP can do, and still not adopted
    assert noddp.full_sps > 1.05 * outcome.best.full_sps
    assert outcome.best_values.get("noddp", False) is False
    assert outcome.best_values["local_batch_size"] == 16
    assert "noddp" not in outcome.path and "1 rank" not in outcome.path
    assert all(p.ranks == 4 for p in journal if p.stage == "confirm")


def test_summary_figures_match_the_journaled_probes(ladder):
    out, outcome = ladder
    summary = json.loads((out / "summary.json").read_text())
    ddp = summary["ddp"]
    journal = ResultsDir(out).results()
    noddp = next(p for p in journal if p.variant == {"noddp": True})
    one_rank = next(p for p in journal if p.stage == "ddp" and p.ranks == 1)
    # The incumbent the references ran against: noddp's config without noddp, on 4 ranks,
    # the median over every probe of it before the confirmation.
    incumbent = {k: v for k, v in noddp.config.items() if k != "noddp"}
    runs = [
        p
        for p in journal
        if p.config == incumbent and p.ranks == 4 and p.stage != "confirm" and p.ok
    ]
    full = median([p.full_sps for p in runs if p.full_sps])
    # the stage is judged on FULL: its own probes measure FULL alone, the rest all phases
    synthetic = median([p.synthetic_sps for p in runs if p.synthetic_sps])
    assert ddp["ranks"] == 4 and ddp["overhead_phase"] == "synthetic"
    assert ddp["overhead_pct"] == pytest.approx(100 * (1 - synthetic / noddp.synthetic_sps))
    assert ddp["efficiency_pct"] == pytest.approx(100 * full / (4 * one_rank.full_sps))
    # shaped like the tutorial: a few percent of communication within one node
    assert 3 < ddp["overhead_pct"] < 20 and 80 < ddp["efficiency_pct"] < 100
    assert ddp["settings"]["bucket_cap_mb"] == outcome.best_values.get("bucket_cap_mb", 25)
    assert summary["stragglers"] is None
    line = next(x for x in stage_summary(outcome) if x.startswith("ddp:"))
    assert f"{ddp['overhead_pct']:.1f}% of SYNTHETIC on 4 ranks" in line
    assert f"weak scaling efficiency {ddp['efficiency_pct']:.0f}%" in line


def test_session_json_records_the_launch(ladder):
    out, _ = ladder
    info = ResultsDir(out).session()
    assert info["launch"] == LAUNCH and info["job"] is None


def test_resume_reuses_the_journal_and_keeps_ranks_apart(ladder, tmp_path):
    out, outcome = ladder
    lines = (out / "journal.jsonl").read_text().splitlines()
    cut = next(i for i, x in enumerate(lines) if json.loads(x)["ranks"] == 1) + 1
    (tmp_path / "session.json").write_text((out / "session.json").read_text())
    (tmp_path / "journal.jsonl").write_text("\n".join(lines[:cut]) + "\n")

    asked: list[tuple[str, str, int | None]] = []
    sim = SimTrainer(seed=5, noise=0.01, cores=128, world_size=4)

    class Counting:
        """The sim, counting what it is asked; it sees the replayed probes too, so its
        noise draws stay in step with the first session's."""

        def __call__(self, stage: str, cand: Candidate, values: dict[str, Any]) -> ProbeResult:
            asked.append((stage, cand.label, cand.ranks))
            return sim.measure(stage, cand, values)

        def replayed(self, stage: str, cand: Candidate, values: dict[str, Any]) -> None:
            sim.replayed(stage, cand, values)

    counting = Counting()
    resumed = session(tmp_path, counting)
    resumed.start(resume=True)
    again = resumed.run()
    assert len(asked) == len(lines) - cut  # only what the journal lacked
    assert ("ddp", "1 rank", 1) not in asked
    assert len(ResultsDir(tmp_path).results()) == len(lines)
    assert again.probes[:cut] == ResultsDir(out).results()[:cut]

    everything = session(out, counting)
    everything.start(resume=True)
    asked.clear()
    assert everything.run().best_values == outcome.best_values and asked == []
    # The 1-rank reference shares its knob values with the incumbent (local batch 16
    # already): asked first for the incumbent on 4 ranks, a resume must not hand it out.
    one_rank = next(p for p in ResultsDir(out).results() if p.ranks == 1)
    other_order = session(out, counting)
    other_order.start(resume=True)
    ddp_incumbent = other_order.measure("ddp", Candidate("incumbent", {}), one_rank.config)
    assert ddp_incumbent.ranks == 4
    again_one = other_order.measure("ddp", Candidate("1 rank", {}, ranks=1), one_rank.config)
    assert again_one == one_rank


# --- stragglers and the reporter -----------------------------------------------------------


def test_a_straggler_is_flagged_in_lines_and_summary():
    sim = SimTrainer(seed=1, noise=0.0, cores=128, world_size=4, straggler=2)
    probe = sim.measure("ddp", Candidate("x", {}), BASE)
    assert probe.stragglers == [2] and probe.ranks == 4
    assert probe.rank_sps[2] < min(probe.rank_sps[r] for r in (0, 1, 3))
    assert probe.full_sps == pytest.approx(4 * probe.rank_sps[2])
    line = result_line(probe, None, ranks=4)
    assert "[4 ranks]" in line and "straggler: rank 2" in line
    alone = sim.measure("ddp", Candidate("1 rank", {}, ranks=1), BASE)
    assert "[1 rank]" in result_line(alone, None, ranks=4)
    assert "rank" not in result_line(alone, None)  # a single-GPU session says nothing

    outcome = staged_search(BASE, stage_plans(("ddp",), NODE, BASE), sim.measure, confirm_pairs=0)
    note = summary_dict(outcome)["stragglers"]
    assert note["note"].startswith("rank 2 ran slower")
    assert {"stage": "baseline", "variant": {}, "ranks": [2]} in note["probes"]
    assert not any(p["variant"].get("local_batch_size") for p in note["probes"])  # 1 rank: none
    assert "rank 2 straggled" in next(x for x in stage_summary(outcome) if x.startswith("ddp"))


def test_plain_reporter_says_how_the_probes_launch():
    stream = io.StringIO()
    info = {"preset": "p", "trainer": "unet", "search": "staged", "stages": ["ddp"]}
    job = {"source": "slurm", "job_id": "42", "num_nodes": 1, "cpus_usable": 128}
    PlainReporter(stream).session_start({**info, "launch": LAUNCH, "job": job}, 3)
    lines = stream.getvalue().splitlines()
    assert lines[1] == "tuneup probe: 4 ranks via torchrun (4 per node x 1 node), in SLURM job 42"
    # one local process, or a session that says nothing: no extra line
    one = {"nproc": 1, "nodes": 1, "world_size": 1, "launcher": "local"}
    for extra in ({"launch": one, "job": {"source": "local", "job_id": None}}, {}):
        quiet = io.StringIO()
        PlainReporter(quiet).session_start({**info, **extra}, 3)
        assert len(quiet.getvalue().splitlines()) == 1


# --- real processes: 2 CPU ranks over gloo under torchrun ----------------------------------

REAL_BUDGET = {
    "trial_s": 0.05,
    "min_trials": 3,
    "max_trials": 3,
    "warmup_cap_s": 0.5,
    "loss_steps": 4,
    "limit_s": 150,  # torchrun and two ranks importing torch take 20-30 s on 2 cores
}


def _launch_api() -> Any:
    """H1's LaunchPlan and a WorkerBackend that takes it, or None when not there yet."""
    import inspect

    from tuneup.trainers.backends import WorkerBackend

    try:
        from tuneup.cluster.launch import LaunchPlan
    except ImportError:
        return None
    if "launch" not in inspect.signature(WorkerBackend).parameters:
        return None
    return LaunchPlan


@pytest.mark.slow
def test_ddp_stage_on_two_cpu_ranks_over_gloo(tmp_path: Path, monkeypatch) -> None:
    launch_plan = _launch_api()
    if launch_plan is None:
        pytest.skip("tuneup.cluster.launch.LaunchPlan / WorkerBackend(launch=...) not built yet")
    from tuneup.probe.types import ProbeBudget
    from tuneup.trainers.backends import WorkerBackend
    from tuneup.unet.datacache import ensure_synthetic_data

    monkeypatch.setenv("TUNEUP_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.setenv("OMP_NUM_THREADS", "1")
    train, val, _ = ensure_synthetic_data(32, 16, 0, tmp_path / "cache", npy=False)
    base = {
        "device": "cpu",
        "levels": 3,
        "width": 4,
        "data_size": 8,
        "global_batch_size": 4,
        "base_batch_size": 4,
        "data_loader_config": "inmem",
        "num_data_workers": 0,
        "train_path": str(train),
        "val_path": str(val),
        "lr_schedule": {"scaling": "none", "start_lr": 2e-3, "end_lr": 0.0, "warmup_steps": 0},
    }
    machine = MachineInfo(cpus_usable=2, world_size=2)
    few = DDP.with_candidates(
        c for c in DDP.candidates if c.label in ("bucket 10 MB", "bucket 25 MB", "noddp", "1 rank")
    )
    proposal = few.propose(machine, base)
    assert labels(proposal.candidates) == ["bucket 10 MB", "noddp", "1 rank"]
    out = tmp_path / "run"
    run = ProbeSession(
        preset=load_preset("cpu-smoke"),
        adapter=load_trainer("unet"),
        backend=WorkerBackend(
            out / "probes", ProbeBudget(**REAL_BUDGET), seed=0, launch=launch_plan(nproc=2)
        ),
        results=ResultsDir(out),
        machine=machine,
        base_values=base,
        plans=[],
        layout=Layout(launch={"nproc": 2, "nodes": 1, "world_size": 2, "launcher": "torchrun"}),
    )
    run.start(resume=False)
    # No pairs beyond the screen's own: CPU timings are noisy and each 2-rank probe costs ~10 s.
    outcome = staged_search(
        base,
        [StagePlan("ddp", list(proposal.candidates))],
        run.measure,
        confirm_pairs=0,
        baseline_repeats=1,
        max_pairs=1,
    )

    results = ResultsDir(out).results()
    # baseline, the three candidates, the incumbent again; on a shared 2-core CPU the real
    # candidate may be screened again (the anchors disagreed, or its screen was far slower)
    # and paired up to EXTEND times, and a contended probe is measured again, but each
    # reference runs once and the stage stays within its bounds
    variants = [json.dumps(p.variant, sort_keys=True) for p in results]
    assert variants.count("{}") >= 2 and variants.count('{"noddp": true}') == 1
    assert variants.count('{"local_batch_size": 2}') == 1
    clean = [p for p in results if not p.contended]
    # 1 baseline + 3 screens + closing anchor, a re-screen with its anchor, one more screen,
    # and at most EXTEND * max_pairs pairs of which the screen is the first
    bound = 1 + 3 + 1 + 2 + 1 + 2 * (paired.EXTEND * 1 - 1)
    assert 5 <= len(clean) <= bound, variants
    journal = {(p.stage, json.dumps(p.variant, sort_keys=True)): p for p in results}
    for probe in journal.values():
        assert probe.status is Status.OK, (probe.variant, probe.reason)
    assert journal[("baseline", "{}")].ranks == 2
    assert len(journal[("baseline", "{}")].rank_sps) == 2
    assert journal[("ddp", '{"noddp": true}')].ranks == 2
    assert journal[("ddp", '{"local_batch_size": 2}')].ranks == 1
    assert "noddp" not in outcome.best_values and "local_batch_size" not in outcome.best_values
    ddp = summary_dict(outcome)["ddp"]
    assert ddp["ranks"] == 2 and ddp["overhead_phase"] == "synthetic"
    assert isinstance(ddp["overhead_pct"], float) and ddp["efficiency_pct"] > 0
