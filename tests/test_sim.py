"""The sim trainer: a response surface shaped like the tutorial's, answering like a probe."""

from __future__ import annotations

import math

import pytest
from tuneup_plugins.sim import SimTrainer, sim_stage_plans

from tuneup.hardware.types import MachineInfo
from tuneup.probe.stats import median, relative_spread
from tuneup.probe.types import Candidate, Status
from tuneup.tuning.search.guard import check_loss

TUNED = {
    "data_loader_config": "dali-lowmem",
    "amp_mode": "bf16",
    "optimizer_impl": "fused",
    "jit": "compile",
    "channels_last": True,
    "global_batch_size": 128,
}


def sps(values, **kwargs):
    return SimTrainer(**kwargs).expected_sps(values)


def probe(sim, values, label="x"):
    return sim.measure("stage", Candidate(label, values), values)


def test_gpu_baseline_and_tuned_resemble_the_tutorial():
    base = sps({})
    assert base["io"] == pytest.approx(89.2, rel=0.1)
    assert base["synthetic"] == pytest.approx(376.5, rel=0.1)
    assert base["full"] == pytest.approx(90.0, rel=0.1)
    assert sps({"num_data_workers": 8})["full"] == pytest.approx(252.0, rel=0.2)
    assert sps(TUNED)["full"] > 500


def test_workers_rise_then_fall_like_the_tutorial():
    io = [sps({"num_data_workers": w})["io"] for w in (2, 4, 8, 16)]
    assert io[0] < io[1] < io[2]
    assert io[3] < io[2]
    # Fewer cores: the loader saturates earlier.
    assert sps({"num_data_workers": 8}, cores=8)["io"] < io[2]


def test_full_never_exceeds_io_or_synthetic():
    for values in ({}, {"num_data_workers": 0}, {"num_data_workers": 8}, TUNED, {"tf32": False}):
        rates = sps(values)
        assert rates["full"] <= min(rates["io"], rates["synthetic"])


def test_amp_matters_more_once_data_is_no_longer_the_bottleneck():
    def amp_gain(values):
        return sps({**values, "amp_mode": "bf16"})["full"] / sps(values)["full"]

    data_bound = amp_gain({})
    compute_bound = amp_gain({"data_loader_config": "dali-lowmem"})
    assert data_bound < 1.05 < 1.2 < compute_bound


def test_on_a_cpu_gpu_knobs_matter_little_or_are_unsupported():
    cpu = {"device": "cpu"}
    assert sps({**cpu, "tf32": False})["synthetic"] == sps(cpu)["synthetic"]
    assert sps({**cpu, "amp_mode": "bf16"})["synthetic"] < 1.1 * sps(cpu)["synthetic"]
    sim = SimTrainer()
    assert probe(sim, {**cpu, "cuda_graphs": True}).status is Status.UNSUPPORTED
    assert probe(SimTrainer(cuda=False), {"device": "cuda"}).status is Status.UNSUPPORTED


def test_interactions_and_limits_answer_like_a_probe():
    sim = SimTrainer(gpu_memory_gb=40)
    fp16_graphs = probe(sim, {"amp_mode": "fp16", "cuda_graphs": True})
    assert fp16_graphs.status is Status.UNSUPPORTED and "GradScaler" in fp16_graphs.reason
    oom = probe(sim, {"global_batch_size": 256})
    assert oom.status is Status.OOM and oom.full_sps is None
    assert probe(SimTrainer(gpu_memory_gb=141), {"global_batch_size": 256}).ok


def test_trials_are_seeded_noisy_and_fresh_on_each_repeat():
    first = probe(SimTrainer(seed=7), {}).full_sps_trials
    assert probe(SimTrainer(seed=7), {}).full_sps_trials == first
    assert probe(SimTrainer(seed=8), {}).full_sps_trials != first
    sim = SimTrainer(seed=7)
    assert probe(sim, {}).full_sps_trials == first
    assert probe(sim, {}).full_sps_trials != first  # a repeat draws fresh noise

    pooled = [t for _ in range(40) for t in probe(sim, {}).full_sps_trials]
    assert relative_spread(pooled) == pytest.approx(0.03, rel=0.25)
    assert median(pooled) == pytest.approx(sps({})["full"], rel=0.01)


def test_result_carries_what_the_journal_needs():
    result = probe(SimTrainer(trials=7, noise=0.2), {"jit": "compile"})
    assert result.ok and len(result.full_sps_trials) == 7  # trials that disagree: the most
    quiet = probe(SimTrainer(trials=7, noise=0.0), {"jit": "compile"})
    assert len(quiet.full_sps_trials) == 2  # trials that agree: the fewest
    assert quiet.plan["phases"] == ["full", "io", "synthetic"] and quiet.plan["max_trials"] == 7
    assert result.io_sps and result.synthetic_sps and result.full_sps and result.iqr_pct >= 0
    assert result.one_time_s["compile"] > 0 and result.warmup_s > result.one_time_s["compile"]
    assert len(result.losses) == 20 and result.loss_end < result.loss_start
    assert result.wall_s > result.warmup_s


def test_amp_perturbs_the_loss_slightly_and_a_huge_lr_wrecks_it():
    sim = SimTrainer()
    base = sim.losses({})
    amp = sim.losses({"amp_mode": "fp16"})
    assert amp != base
    assert check_loss(amp, base) is None
    wrecked = sim.losses({"lr_schedule": {"start_lr": 0.05}})
    assert any(math.isnan(x) for x in wrecked) or wrecked[-1] > 10 * wrecked[0]
    assert check_loss(wrecked, base) is not None


def test_stage_plans_skip_gpu_stages_on_a_cpu_machine():
    gpu = {p.name: p for p in sim_stage_plans(MachineInfo(cuda=True, cpus_usable=16, dali=True))}
    cpu = {p.name: p for p in sim_stage_plans(MachineInfo(cuda=False, cpus_usable=8))}
    assert all(p.skip_reason is None for p in gpu.values())
    assert cpu["cuda_graphs"].skip_reason and cpu["tf32"].skip_reason
    assert "loader=dali-lowmem" in [c.label for c in gpu["loader"].candidates]
    assert "loader=dali-lowmem" not in [c.label for c in cpu["loader"].candidates]
    assert max(c.values["num_data_workers"] for c in cpu["workers"].candidates) <= 8


def test_ddp_knobs_on_four_gpus_are_shaped_like_the_tutorial():
    # 4 GPUs in one node, local batch 16 (the tutorial: 1272 -> 1315 -> 1316 samples/s).
    four = SimTrainer(world_size=4, cores=128)
    base = {"local_batch_size": 16, "num_data_workers": 8}

    def gain(values, phase="synthetic"):
        return four.expected_sps({**base, **values})[phase] / four.expected_sps(base)[phase] - 1

    assert gain({"broadcast_buffers": False}) == pytest.approx(0.03, abs=0.01)
    assert 0 < gain({"bucket_cap_mb": 100}) < 0.005
    assert gain({"bucket_cap_mb": 10}) < 0 and gain({"bucket_cap_mb": 200}) < 0
    assert 0 < gain({"gradient_as_bucket_view": True}) < 0.02
    # without gradient exchange a step is a few percent faster within one node
    assert 0.03 < gain({"noddp": True}) < 0.2
    # more ranks, more samples/s, though less than 4x one GPU at the same local batch
    one = four.expected_sps(base, ranks=1)["full"]
    assert 3.2 * one < four.expected_sps(base)["full"] < 4 * one


def test_one_rank_answers_as_before_ranks_existed():
    assert SimTrainer(world_size=1).expected_sps({"num_data_workers": 8}) == sps(
        {"num_data_workers": 8}
    )
    assert SimTrainer().communication_s({}) == 0.0
    assert SimTrainer(world_size=4).communication_s({"noddp": True}) == 0.0


def test_ranks_come_from_the_candidate_or_the_trainer():
    sim = SimTrainer(seed=2, world_size=4, cores=128)
    job = probe(sim, {"global_batch_size": 64})
    single = sim.measure("ddp", Candidate("1 rank", {}, ranks=1), {"local_batch_size": 16})
    assert job.ranks == 4 and len(job.rank_sps) == 4 and job.stragglers == []
    assert single.ranks == 1 and single.rank_sps == [single.full_sps]
    # the global batch is shared out: 64 over 4 ranks is the single rank's 16
    assert job.full_sps > 3 * single.full_sps
    too_small = probe(sim, {"global_batch_size": 2})
    assert too_small.status is Status.UNSUPPORTED and "4 ranks" in too_small.reason


def test_disturbances_move_whole_probes_as_documented():
    from tuneup_plugins.sim import Disturbance

    from tuneup.probe.types import Candidate

    def fulls(disturbance, n=6):
        sim = SimTrainer(seed=1, noise=0.0, cores=16, disturbance=disturbance)
        return [sim.measure("s", Candidate("a", {}), {}) for _ in range(n)]

    flat = [p.full_sps for p in fulls(Disturbance())]
    assert len(set(round(f, 6) for f in flat)) == 1
    step = [p.full_sps for p in fulls(Disturbance(step_at=3, step_factor=0.5))]
    assert step[:3] == pytest.approx(flat[:3]) and step[3:] == pytest.approx(
        [f / 2 for f in flat[3:]]
    )
    drift = [p.full_sps for p in fulls(Disturbance(drift_per_probe=-0.1))]
    assert drift[5] == pytest.approx(flat[5] * 0.9**5)
    bursts = fulls(Disturbance(burst_rate=1.0, burst_factor=0.5))
    assert all(p.contended and p.full_sps == pytest.approx(flat[0] / 2) for p in bursts)
    hidden = fulls(Disturbance(burst_rate=1.0, burst_detected=False))
    assert not any(p.contended for p in hidden)


def test_extra_knobs_have_exactly_their_effect():
    from tuneup.probe.types import Candidate

    sim = SimTrainer(seed=1, noise=0.0, cores=16, effects={"null": 0.0, "real": 0.1})
    base = sim.measure("s", Candidate("a", {}), {}).full_sps
    assert sim.measure("s", Candidate("n", {}), {"null": True}).full_sps == pytest.approx(base)
    assert sim.measure("s", Candidate("r", {}), {"real": True}).full_sps == pytest.approx(
        1.1 * base
    )


def test_a_replayed_probe_keeps_a_resumed_sim_in_step():
    from tuneup.probe.types import Candidate

    whole = SimTrainer(seed=4)
    first, second = (whole.measure("s", Candidate("a", {}), {}) for _ in range(2))
    resumed = SimTrainer(seed=4)
    resumed.replayed("s", Candidate("a", {}), {})  # the first came from the journal
    assert resumed.measure("s", Candidate("a", {}), {}).full_sps == second.full_sps
    assert first.full_sps != second.full_sps


def test_the_repeatability_bench_meets_its_targets_on_a_quiet_and_a_stepping_machine():
    import sys
    from pathlib import Path

    sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "bench"))
    try:
        from repeatability import one_scenario
    finally:
        sys.path.pop(0)
    for scenario in ("quiet", "step-up"):
        row = one_scenario(scenario, runs=10)
        assert row["false_adoption_runs"] == 0, row
        assert row["found_10pct"] == 10, row
        assert row["same_recommendation"] >= 9, row
