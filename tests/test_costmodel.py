"""The worker's cost model: what a probe pays beyond its timed steps, as the worker pays it."""

from __future__ import annotations

import dataclasses

import pytest
from tuneup_plugins.sim import SimTrainer

from tuneup.costs.estimate import ProbeCosts, probe_seconds
from tuneup.costs.one_time import Cost, FirstUse, ProcessHistory, WorkerCosts, conv_key
from tuneup.probe.plan import plan_probe
from tuneup.probe.types import Candidate, ProbeBudget, Status

BASE = {
    "amp_mode": "none",
    "tf32": True,
    "channels_last": False,
    "global_batch_size": 64,
    "box_size": [256, 128],
    "jit": "none",
    "cuda_graphs": False,
    "compile_mode": "default",
}


def fixed(value: float, name: str = "a figure") -> Cost:
    return Cost(value, value, value, name, True)


def h200_like() -> WorkerCosts:
    """Figures shaped like the first H200 run's: a 28 s fp32 first step, 56 s with TF32 off."""
    return WorkerCosts(
        spawn=fixed(8.0),
        setup=fixed(2.0),
        first_fresh={"baseline": fixed(28.0), "tf32 off": fixed(56.0), "amp bf16": fixed(13.0)},
        warm_first=fixed(1.0),
        conv_warm=Cost.assumed(1.0, low=0.8, source="trace", settle="gather"),
        conv_floor=Cost.assumed(2.0, low=0.0, high=12.0, source="floor", settle="gather"),
        compile_cold=fixed(60.0),
        compile_cached=Cost.assumed(5.0, low=2.0, high=15.0, source="cpu ratio", settle="gpu"),
        script=fixed(5.0),
        capture=fixed(2.0),
    )


def test_a_conv_key_new_to_a_warm_worker_pays_its_search_again_and_a_seen_one_does_not():
    costs, history = h200_like(), ProcessHistory()
    history.probe(BASE, fresh=True)
    tf32_off = {**BASE, "tf32": False}
    use = history.probe(tf32_off, fresh=False)
    assert use.conv and not use.fresh
    # the warm first step, and TF32 off's 56 s fresh first step above the 2 s floor
    assert costs.first_step(use, tf32_off, "likely") == pytest.approx(1.0 + 54.0)
    assert costs.first_step(use, tf32_off, "high") == pytest.approx(1.0 + 56.0)
    assert costs.first_step(use, tf32_off, "low") == pytest.approx(1.0 + (56.0 - 12.0) * 0.8)
    again = history.probe(tf32_off, fresh=False)
    assert not again.conv
    assert costs.first_step(again, tf32_off, "likely") == pytest.approx(1.0)
    # a new batch is a new key too, and its search runs at the larger batch
    bigger = {**BASE, "global_batch_size": 256}
    assert conv_key(bigger) != conv_key(BASE)
    big = history.probe(bigger, fresh=False)
    assert costs.first_step(big, bigger, "likely") == pytest.approx(1.0 + 26.0 * 2.0)


def test_a_fresh_process_forgets_its_keys_and_pays_its_row_whole():
    costs, history = h200_like(), ProcessHistory()
    history.probe(BASE, fresh=True)
    use = history.probe(BASE, fresh=True)
    assert use.fresh and use.conv
    assert costs.one_time(use, BASE, "likely") == {"spawn": 8.0, "first_steps": 28.0}


def test_a_compile_after_a_release_finds_the_disk_cache_but_a_new_batch_compiles_cold():
    costs, history = h200_like(), ProcessHistory()
    compiled = {**BASE, "jit": "compile"}
    first = history.probe(compiled, fresh=True)
    assert first.compile == "cold"
    assert costs.one_time(first, compiled, "likely")["compile"] == 60.0
    # the worker resets dynamo between probes: the next traces again, the FX cache hits
    after = history.probe(compiled, fresh=False)
    assert after.compile == "cached"
    assert costs.one_time(after, compiled, "likely")["compile"] == 5.0
    assert costs.one_time(after, compiled, "high")["compile"] == 15.0
    # a CUDA graph around the step or another optimizer does not change the model's graph
    graphs = {**compiled, "cuda_graphs": True, "optimizer_impl": "fused"}
    assert history.probe(graphs, fresh=False).compile == "cached"
    # a new batch is a new graph: cold again (measured on the CPU: 30 s against 0.4 s)
    bigger = {**compiled, "global_batch_size": 128}
    assert history.probe(bigger, fresh=False).compile == "cold"


def test_the_compile_cache_outlives_processes_that_a_gather_warmed():
    from tuneup.costs.one_time import graph_key

    compiled = {**BASE, "jit": "compile"}
    key = graph_key(compiled)
    assert key is not None
    history = ProcessHistory(compiled={key})
    assert history.probe(compiled, fresh=True).compile == "cached"


def test_every_probe_with_cuda_graphs_captures_and_every_scripted_probe_scripts():
    costs, history = h200_like(), ProcessHistory()
    graphs = {**BASE, "cuda_graphs": True, "jit": "script"}
    for fresh in (True, False, False):
        use = history.probe(graphs, fresh=fresh)
        parts = costs.one_time(use, graphs, "likely")
        assert parts["graph_capture"] == 2.0 and parts["compile"] == 5.0


def test_a_warm_up_that_does_not_settle_runs_to_its_cap():
    budget = ProbeBudget(trial_s=0.5, min_trials=2, max_trials=5, warmup_cap_s=6.0)
    plan = dataclasses.replace(plan_probe(budget, judged="io", whole=False), loss_steps=0)
    steady = ProbeCosts(0.0, 0.0, 0.0, {"io": 0.5}, {"io": 2.0})
    settles = probe_seconds(plan, steady)
    never = probe_seconds(plan, dataclasses.replace(steady, unsettled={"io": 1.0}))
    half = probe_seconds(plan, dataclasses.replace(steady, unsettled={"io": 0.5}))
    trials = 2 * 0.5
    # a settling warm-up: the first step and two windows of two 0.5 s steps
    assert settles - trials == pytest.approx(0.5 + 2 * 1.0)
    assert never - trials == pytest.approx(6.0)
    assert half == pytest.approx((settles + never) / 2)


def test_a_failed_probe_costs_its_start_and_first_step():
    sim = SimTrainer(seed=0, cuda=False)
    failed = sim("cuda_graphs", Candidate("graphs", {"cuda_graphs": True}), {"cuda_graphs": True})
    assert failed.status == Status.UNSUPPORTED
    # the sim's fresh process: its 30 s start and 5 s first steps, not 0 s
    assert failed.wall_s == pytest.approx(sum(failed.one_time_s.values()))
    assert failed.one_time_s["spawn"] == 30.0 and failed.wall_s >= 35.0
    costs, history = h200_like(), ProcessHistory()
    history.probe(BASE, fresh=True)
    use = history.probe({**BASE, "global_batch_size": 512}, fresh=False)
    history.failed()
    assert costs.failed(use, {**BASE, "global_batch_size": 512}, "likely")["setup"] == 2.0
    assert history.probe(BASE, fresh=True).conv  # the next starts a fresh process


def test_every_figure_says_where_it_came_from_and_what_would_settle_it():
    figures = h200_like().figures()
    assumed = {name: c for name, c in figures.items() if not c.measured}
    assert {"conv_warm", "conv_floor", "compile_cached", "batch_exponent"} <= set(assumed)
    for cost in assumed.values():
        assert cost.source and cost.settle and cost.low <= cost.likely <= cost.high
    said = figures["compile_cached"].to_dict()
    assert said["settled_by"] == "gpu" and not said["measured"]
    assert FirstUse(fresh=False).new is False


def test_a_probe_whose_warm_up_never_settled_says_so_in_its_line():
    from tuneup.probe.describe import status_text
    from tuneup.probe.types import ProbeResult

    plan = {"phases": ["io"], "warmup_cap_s": 6.0, "stable": {"io": False}}
    wandered = ProbeResult("workers", {}, {}, Status.OK, io_sps=110.0, plan=plan)
    assert "IO warm-up unsettled after its 6 s cap" in status_text(wandered)
    settled = dataclasses.replace(wandered, plan={**plan, "stable": {"io": True}})
    assert "unsettled" not in status_text(settled)


def test_a_presets_costs_say_which_figures_were_measured_and_how_warm_ups_settle():
    from tuneup.preset.load import load_preset
    from tuneup.preset.schema import check_costs

    h200 = load_preset("h200").costs
    # the rest predicted
    assert h200 is not None
    assert h200["measured"] == ["spawn_s", "setup_s", "first_s", "batch_exponent", "kernel_s"]
    assert 0 < h200["unsettled"]["io"] < 1 and h200["scale"] > 1
    _, problems = check_costs({"measured": ["spawn_s", "warp_s"], "unsettled": {"io": 1.5}})
    assert any("measured" in p and "warp_s" not in p for p in problems)
    assert any("unsettled" in p and "0 to 1" in p for p in problems)
    _, alone = check_costs({"kernel_s": -0.2})
    assert alone and "probe.costs.kernel_s" in alone[0] and "0 or more" in alone[0]
    _, grows = check_costs({"batch_exponent": -1})
    assert grows and "batch_exponent" in grows[0] and "0 (not at all) to 2" in grows[0]
    _, scaled = check_costs({"scale": 9})
    assert scaled and "probe.costs.scale" in scaled[0] and "0.5 to 3" in scaled[0]
    _, fine = check_costs({"measured": ["setup_s"], "unsettled": {"full": 0.25}, "scale": 1.6})
    assert fine == []


def test_a_row_a_warm_worker_searched_is_priced_as_measured_and_grows_with_the_batch():
    # the second H200 ladder: bf16 + channels_last's search took 32.5 s at batch 64 and
    # 66.4 s at 128, in a warm worker; bf16 alone 12.5 s
    costs = dataclasses.replace(
        h200_like(),
        conv_new_rows={"amp bf16 + channels_last": fixed(32.5), "amp bf16": fixed(12.5)},
        batch_exponent=fixed(1.0),
    )
    history = ProcessHistory()
    history.probe(BASE, fresh=True)
    layout = {**BASE, "amp_mode": "bf16", "channels_last": True, "global_batch_size": 128}
    use = history.probe(layout, fresh=False)
    assert costs.first_step(use, layout, "likely") == pytest.approx(65.0)
    bf16 = {**BASE, "amp_mode": "bf16"}
    assert costs.first_step(history.probe(bf16, fresh=False), bf16, "likely") == 12.5


def test_a_combined_row_no_run_measured_is_priced_between_its_parts():
    costs = dataclasses.replace(
        h200_like(), first_fresh={**h200_like().first_fresh, "channels_last": fixed(54.0)}
    )
    layout = {**BASE, "amp_mode": "bf16", "channels_last": True}
    use = ProcessHistory().probe(layout, fresh=True)
    assert costs.first_step(use, layout, "likely") == pytest.approx(13.0)  # its AMP part
    assert costs.first_step(use, layout, "high") == pytest.approx(54.0)  # its dearest part
    assert not costs.fresh_first("amp bf16 + channels_last").measured
