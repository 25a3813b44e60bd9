"""Verdicts: where the time goes, what each stage won, and summary.json."""

from __future__ import annotations

import json

from tuneup_plugins.sim import SimTrainer, sim_stage_plans

from tuneup.hardware.types import MachineInfo
from tuneup.probe.types import Candidate
from tuneup.tuning.results.summary_document import summary_dict
from tuneup.tuning.results.verdicts import bottleneck, headline, stage_summary
from tuneup.tuning.search.search_records import StagePlan
from tuneup.tuning.search.staged import staged_search

GPU = MachineInfo(cuda=True, gpu_count=1, cpus_usable=16, dali=True)


def test_tutorial_baseline_is_data_bound():
    kind, sentence = bottleneck(89.2, 376.5, 90.0)
    assert kind == "data-bound"
    assert sentence == (
        "data-bound: the loader delivers 89 samples/s while the model could take 376; "
        "FULL runs at 90"
    )


def test_fast_loader_slow_model_is_compute_bound():
    kind, sentence = bottleneck(779.3, 421.6, 396.1)
    assert kind == "compute-bound"
    assert "model takes 422" in sentence and "loader could deliver 779" in sentence
    assert sentence.endswith("FULL runs at 396")


def test_close_rates_are_balanced():
    kind, sentence = bottleneck(786.9, 661.6, 512.2)
    assert kind == "balanced"
    assert "787" in sentence and "662" in sentence and "512" in sentence


def test_missing_phases_are_unknown():
    assert bottleneck(None, 300.0, 250.0)[0] == "unknown"
    assert bottleneck(0.0, 0.0, None)[0] == "unknown"


def test_stage_lines_say_what_won_and_why_not():
    sim = SimTrainer(seed=2, cores=16)
    stages = [
        *sim_stage_plans(GPU),
        StagePlan("nccl", [Candidate("buckets=100", {"bucket_cap_mb": 100})], "needs 2+ GPUs"),
    ]
    outcome = staged_search({}, stages, sim.measure)
    lines = stage_summary(outcome)
    assert len(lines) == len(stages)
    by_stage = dict(line.split(": ", 1) for line in lines)
    # a stage judged on its phase says which, unless FULL decided it in the usual way
    assert "workers (decided on IO)" in by_stage or "workers (decided on FULL)" in by_stage
    by_stage = {name.split(" (decided")[0]: text for name, text in by_stage.items()}
    assert by_stage["workers"].startswith("workers=8 wins") and "+" in by_stage["workers"]
    assert by_stage["tf32"].startswith("no candidate is faster")
    assert by_stage["nccl"] == "skipped: needs 2+ GPUs"
    assert "batch=256: oom" in by_stage["batch_size"]  # the 40 GB GPU cannot hold it


def test_summary_holds_before_after_speedup_and_stages():
    sim = SimTrainer(seed=4, cores=16)
    outcome = staged_search({}, sim_stage_plans(GPU), sim.measure, confirm_pairs=3)
    summary = json.loads(json.dumps(summary_dict(outcome)))  # must survive JSON
    assert summary["bottleneck"]["before"]["kind"] == "data-bound"
    assert summary["bottleneck"]["after"]["kind"] != "data-bound"
    speedup = summary["speedup"]
    assert speedup["pairs"] == 3 and speedup["low"] <= speedup["value"] <= speedup["high"]
    assert speedup["pair_min"] <= speedup["value"] <= speedup["pair_max"]
    assert 5 < speedup["value"] < 9  # ~90 -> ~600 samples/s
    rec = summary["recommendation"]
    assert rec["path"] == outcome.path
    assert set(rec["changes"]) == {k for c in outcome.path for k in _values_of(c)}
    assert [s["stage"] for s in summary["stages"]] == [p.name for p in sim_stage_plans(GPU)]
    assert summary["probes"]["ok"] >= 10
    assert summary["ddp"] is None and summary["stragglers"] is None  # one GPU, no DDP stage
    line = headline(outcome)
    assert line.startswith("recommendation: workers=8 + loader=dali-lowmem")
    likely = f"likely {speedup['low']:.2f}-{speedup['high']:.2f}x over 3 interleaved pairs"
    assert f"{speedup['value']:.2f}x faster ({likely})" in line  # the one range, as the CLI says


def test_summary_of_a_search_that_kept_the_baseline():
    sim = SimTrainer(seed=1, cores=16)
    tf32_only = [p for p in sim_stage_plans(GPU) if p.name == "tf32"]
    outcome = staged_search({}, tf32_only, sim.measure)
    summary = summary_dict(outcome)
    assert summary["speedup"]["value"] == 1.0 and summary["recommendation"]["changes"] == {}
    assert "keep the baseline" in headline(outcome)


def _values_of(label):
    plans = sim_stage_plans(GPU)
    return next(c.values for p in plans for c in p.candidates if c.label == label)


def test_throttled_probes_are_flagged_as_noisy() -> None:
    from tuneup.probe.types import Candidate, ProbeResult, Status
    from tuneup.tuning.results.summary_document import summary_dict
    from tuneup.tuning.results.verdicts import stage_summary
    from tuneup.tuning.search.search_records import StagePlan
    from tuneup.tuning.search.staged import staged_search

    def measure(stage: str, candidate: Candidate, values: dict) -> ProbeResult:
        hot = values.get("amp_mode") == "bf16"
        return ProbeResult(
            stage,
            candidate.values,
            values,
            Status.OK,
            full_sps=100.0,
            full_sps_trials=[100.0] * 5,
            losses=[1.0, 0.5],
            throttled=hot,
        )

    plans = [StagePlan("amp", [Candidate("bf16", {"amp_mode": "bf16"})])]
    outcome = staged_search({"amp_mode": "none"}, plans, measure, confirm_pairs=0)
    (line,) = stage_summary(outcome)
    assert "throttled" in line and "noisy" in line
    assert summary_dict(outcome)["throttled_probes"] == [
        {"stage": "amp", "variant": {"amp_mode": "bf16"}}
    ]


def test_a_negative_communication_overhead_is_called_noise_not_a_cost() -> None:
    from tuneup.tuning.results.ddp_verdicts import ddp_sentence

    figures = {
        "ranks": 2,
        "overhead_pct": -19.6,
        "overhead_phase": "synthetic",
        "efficiency_pct": None,
        "figures": {"ddp_sps": 343.0, "noddp_sps": 287.0},
        "notes": [],
    }
    sentence = ddp_sentence(figures)
    assert "no measurable cost" in sentence and "noise" in sentence
    assert "costs -" not in sentence
    figures["overhead_pct"] = 8.5
    assert "costs 8.5% of SYNTHETIC on 2 ranks" in ddp_sentence(figures)


def test_an_unresolved_knob_is_named_once() -> None:
    from tuneup.tuning.results.verdicts import _named

    assert _named("channels_last", "channels_last") == "channels_last"
    assert _named("amp", "bf16") == "amp bf16"
