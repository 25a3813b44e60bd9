"""The stage API, the built-in stages and the entry-point registry."""

from __future__ import annotations

import dataclasses
import importlib.metadata
import json
import os
from pathlib import Path
from typing import Any

import pytest
from tuneup_plugins import stages as builtin

from tuneup.bundled import read_bundled_preset
from tuneup.cli import main
from tuneup.config import build_config
from tuneup.errors import UsageError
from tuneup.hardware.machine import env_threads
from tuneup.hardware.types import MachineInfo
from tuneup.probe import stages as registry
from tuneup.probe.stages import Stage, default_ladder, load_stage, scan_stages, stage_names
from tuneup.probe.types import Candidate

BUILTINS: dict[str, Stage] = {
    s.name: s
    for s in (
        builtin.WORKERS,
        builtin.DATA,
        builtin.TF32,
        builtin.AMP,
        builtin.OPTIMIZER,
        builtin.JIT,
        builtin.CUDA_GRAPHS,
        builtin.CHANNELS_LAST,
        builtin.BATCH_SIZE,
        builtin.DDP,
    )
}

LAPTOP = MachineInfo(cpus_usable=2)  # the 2-core CPU the cpu-smoke preset must tune on
GPU_NODE = MachineInfo(
    cuda=True, gpu_count=4, gpu_names=("NVIDIA A100-SXM4-40GB",) * 4, cpus_usable=32, apex=True
)


def cpu_smoke() -> dict[str, Any]:
    return dict(read_bundled_preset("cpu-smoke")["train"])


def labels(candidates: list[Candidate] | tuple[Candidate, ...]) -> list[str]:
    return [c.label for c in candidates]


# --- the built-in stages -------------------------------------------------------------------


def test_every_builtin_stage_declares_its_own_place_in_the_default_ladder():
    orders = [stage.order for stage in BUILTINS.values()]
    assert None not in orders and len(set(orders)) == len(orders)  # one place each


@pytest.mark.parametrize("machine", [LAPTOP, GPU_NODE], ids=["cpu", "gpu"])
@pytest.mark.parametrize("base_name", ["defaults", "cpu-smoke", "fp16-apex"])
def test_every_planned_candidate_makes_a_valid_config(machine, base_name):
    bases = {
        "defaults": {},
        "cpu-smoke": cpu_smoke(),
        "fp16-apex": {"amp_mode": "fp16", "optimizer_impl": "apex", "num_data_workers": 8},
    }
    base = bases[base_name]
    for stage in BUILTINS.values():
        plan = stage.propose(machine, base)
        assert plan.rejected == (), (stage.name, plan.rejected)
        for cand in plan.candidates:
            assert set(cand.values) <= set(stage.knobs), (stage.name, cand)
            build_config({**base, **cand.values})  # raises on an invalid merge


def test_cpu_smoke_preset_has_a_ladder_on_a_two_core_cpu():
    plans = {name: stage.propose(LAPTOP, cpu_smoke()) for name, stage in BUILTINS.items()}
    runnable = {name for name, plan in plans.items() if not plan.skipped}
    assert {"workers", "amp", "optimizer", "jit", "channels_last", "batch_size"} <= runnable
    assert plans["tf32"].reason == "needs CUDA (no GPU visible)"
    assert plans["cuda_graphs"].reason == "needs CUDA (no GPU visible)"


def test_workers_are_capped_by_the_usable_cpus():
    six = MachineInfo(cpus_usable=6)
    assert labels(builtin.WORKERS.candidates_for(six, {})) == ["2 workers", "4 workers"]
    assert len(builtin.WORKERS.candidates_for(GPU_NODE, {})) == 4
    plan = builtin.WORKERS.propose(MachineInfo(cpus_usable=1), {})
    assert plan.skipped and "CPUs per GPU/rank: only 1;" in plan.reason


def test_workers_are_capped_by_the_cpus_per_rank():
    # Perlmutter-like: 64 usable CPUs shared by 4 ranks on the node, 16 each.
    node = MachineInfo(cuda=True, gpu_count=4, cpus_usable=64, world_size=4)
    assert labels(builtin.WORKERS.candidates_for(node, {})) == [
        "2 workers",
        "4 workers",
        "8 workers",
        "16 workers",
    ]
    two_nodes = MachineInfo(cuda=True, gpu_count=4, cpus_usable=16, world_size=8, nodes=2)
    assert labels(builtin.WORKERS.candidates_for(two_nodes, {})) == ["2 workers", "4 workers"]
    crowded = MachineInfo(cuda=True, gpu_count=4, cpus_usable=4, world_size=4)
    plan = builtin.WORKERS.propose(crowded, {})
    assert plan.skipped
    assert plan.reason.startswith("CPUs per GPU/rank: only 1 (4 usable over 4 ranks per node)")


def test_plan_drops_the_variant_the_incumbent_already_is():
    plan = builtin.WORKERS.propose(GPU_NODE, {"num_data_workers": 4})
    assert labels(plan.candidates) == ["2 workers", "8 workers", "16 workers"]
    # the default is 2 workers: a partial incumbent is read over the defaults
    assert "2 workers" not in labels(builtin.WORKERS.propose(GPU_NODE, {}).candidates)


def test_plan_rejects_a_candidate_that_makes_an_invalid_config():
    stage = builtin.WORKERS.with_candidates(
        [Candidate("none", {"num_data_workers": -1}), Candidate("3", {"num_data_workers": 3})]
    )
    plan = stage.propose(GPU_NODE, {})
    assert labels(plan.candidates) == ["3"]
    assert plan.rejected[0][0] == "none" and "num_data_workers" in plan.rejected[0][1]


def test_amp_tries_fp16_only_on_the_gpu():
    assert labels(builtin.AMP.candidates_for(GPU_NODE, {})) == [
        "bf16",
        "fp16",
        "bf16 + channels_last",
    ]
    assert labels(builtin.AMP.candidates_for(LAPTOP, {})) == ["bf16"]
    # a GPU machine training on the CPU is a CPU run
    assert labels(builtin.AMP.candidates_for(GPU_NODE, {"device": "cpu"})) == ["bf16"]


def test_amp_pairs_bf16_with_channels_last_on_the_gpu_until_the_layout_is_taken():
    # bf16 alone may lose on the default layout and channels_last alone in float32:
    # the pair tensor cores want is tried as one candidate, whatever the stage order.
    plan = builtin.AMP.propose(GPU_NODE, {})
    pair = [c for c in plan.candidates if c.label == "bf16 + channels_last"]
    assert pair and pair[0].values == {"amp_mode": "bf16", "channels_last": True}
    taken = builtin.AMP.propose(GPU_NODE, {"channels_last": True})
    assert labels(taken.candidates) == ["bf16", "fp16"]


def test_optimizer_offers_apex_only_where_it_can_run():
    assert labels(builtin.OPTIMIZER.candidates_for(GPU_NODE, {})) == [
        "fused Adam",
        "apex FusedAdam",
    ]
    no_apex = MachineInfo(cuda=True, gpu_count=1, cpus_usable=8)
    assert labels(builtin.OPTIMIZER.candidates_for(no_apex, {})) == ["fused Adam"]
    assert labels(builtin.OPTIMIZER.candidates_for(GPU_NODE, {"cuda_graphs": True})) == [
        "fused Adam"
    ]
    assert labels(builtin.OPTIMIZER.candidates_for(LAPTOP, {})) == ["fused Adam"]


def test_tf32_probe_turns_it_off_and_skips_cpu_runs():
    assert [c.values for c in builtin.TF32.propose(GPU_NODE, {}).candidates] == [{"tf32": False}]
    plan = builtin.TF32.propose(GPU_NODE, {"device": "cpu"})
    assert plan.skipped and "CPU" in plan.reason


def test_cuda_graphs_from_an_fp16_incumbent_switches_to_bf16():
    plan = builtin.CUDA_GRAPHS.propose(GPU_NODE, {"amp_mode": "fp16", "optimizer_impl": "apex"})
    (cand,) = plan.candidates
    assert cand.values == {"cuda_graphs": True, "amp_mode": "bf16", "optimizer_impl": "fused"}
    assert "bf16" in cand.label
    with pytest.raises(UsageError):  # what the stage avoids
        build_config({"amp_mode": "fp16", "cuda_graphs": True})


@pytest.mark.parametrize("mode", ["reduce-overhead", "max-autotune"])
def test_cuda_graphs_skipped_when_compile_already_captures_graphs(mode):
    base = {"jit": "compile", "compile_mode": mode}
    plan = builtin.CUDA_GRAPHS.propose(GPU_NODE, base)
    assert plan.skipped and mode in plan.reason
    with pytest.raises(UsageError, match=f"compile_mode={mode}"):  # nor can a user ask for both
        build_config({**base, "cuda_graphs": True})
    assert builtin.CUDA_GRAPHS.propose(LAPTOP, {}).reason == "needs CUDA (no GPU visible)"


def test_batch_size_halves_and_doubles_what_is_in_force():
    plan = builtin.BATCH_SIZE.propose(GPU_NODE, {"global_batch_size": 64})
    assert [c.values for c in plan.candidates] == [
        {"global_batch_size": 32},
        {"global_batch_size": 128},
    ]
    local = builtin.BATCH_SIZE.propose(GPU_NODE, {"local_batch_size": 16})
    assert [c.values for c in local.candidates] == [
        {"local_batch_size": 8},
        {"local_batch_size": 32},
    ]


def test_batch_size_keeps_an_equal_share_per_rank():
    four_ranks = MachineInfo(cuda=True, gpu_count=4, cpus_usable=32, world_size=4)
    plan = builtin.BATCH_SIZE.propose(four_ranks, {"global_batch_size": 4})
    assert [c.values for c in plan.candidates] == [{"global_batch_size": 8}]
    plan = builtin.BATCH_SIZE.propose(four_ranks, {"global_batch_size": 6})
    assert [c.values for c in plan.candidates] == [{"global_batch_size": 12}]
    one = builtin.BATCH_SIZE.propose(LAPTOP, {"global_batch_size": 1, "base_batch_size": 1})
    assert [c.values for c in one.candidates] == [{"global_batch_size": 2}]


# --- the Stage API ---------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("machine", "needs", "reason"),
    [
        (LAPTOP, ("cuda",), "needs CUDA (no GPU visible)"),
        (MachineInfo(gpu_count=1), ("cuda",), "needs CUDA (GPUs visible, but this torch build"),
        (GPU_NODE, ("apex", "dali"), "needs NVIDIA DALI (not importable)"),
        (LAPTOP, ("apex",), "needs NVIDIA apex (not importable)"),
        (MachineInfo(cuda=True, gpu_count=1), ("multi_gpu",), "needs several GPUs (1 visible)"),
        (GPU_NODE, ("cuda", "multi_gpu", "apex"), None),
    ],
)
def test_unavailable_reason_names_the_first_missing_need(machine, needs, reason):
    on = (Candidate("on", {"channels_last": True}),)
    stage = Stage("probe", "Probe", "test", knobs=("channels_last",), needs=needs, candidates=on)
    got = stage.unavailable_reason(machine)
    assert got is None if reason is None else got.startswith(reason)
    plan = stage.propose(machine, {})
    assert plan.skipped == (reason is not None)
    assert plan.candidates == (() if reason else on)


@pytest.mark.parametrize(
    "kwargs",
    [
        {"needs": ("tpu",)},
        {"knobs": ("no_such_knob",)},
        {"knobs": ("tf32",), "candidates": (Candidate("x", {"amp_mode": "bf16"}),)},
    ],
)
def test_a_malformed_stage_fails_when_its_plugin_is_imported(kwargs):
    fields: dict[str, Any] = {"knobs": ("tf32",), **kwargs}
    with pytest.raises(ValueError):
        Stage("bad", "Bad", "malformed", **fields)


def test_an_incumbent_reason_skips_the_stage_and_empties_its_candidates():
    class Picky(Stage):
        def incumbent_reason(self, machine: MachineInfo, base: Any) -> str | None:
            return "the incumbent already does this" if base.get("tf32") is False else None

    off = (Candidate("off", {"tf32": False}),)
    stage = Picky("picky", "Picky", "skips", knobs=("tf32",), candidates=off)
    plan = stage.propose(LAPTOP, {"tf32": False})
    assert plan.skipped and plan.reason == "the incumbent already does this"
    assert stage.candidates_for(LAPTOP, {"tf32": False}) == []
    assert stage.candidates_for(LAPTOP, {}) == list(off)


@pytest.mark.parametrize("machine", [LAPTOP, GPU_NODE, MachineInfo(cpus_usable=1)], ids=str)
def test_candidates_for_never_raises_and_agrees_with_the_proposal(machine):
    bases = [{}, {"device": "cpu"}, {"jit": "compile", "compile_mode": "reduce-overhead"}]
    bases.append({"global_batch_size": 1, "base_batch_size": 1, "num_data_workers": 16})
    for stage in BUILTINS.values():
        for base in bases:
            proposal = stage.propose(machine, base)
            offered = stage.candidates_for(machine, base)
            if stage.unavailable_reason(machine) is None and stage.incumbent_reason(machine, base):
                assert offered == [], (stage.name, base)
            for cand in proposal.candidates:
                assert cand in offered


# --- the registry ----------------------------------------------------------------------------


def _ep(name: str, value: str) -> importlib.metadata.EntryPoint:
    return importlib.metadata.EntryPoint(name=name, value=value, group=registry.ENTRY_POINT_GROUP)


@pytest.fixture
def fake_entry_points(monkeypatch):
    """Replace the installed entry points with a given list."""

    def install(*eps: importlib.metadata.EntryPoint) -> None:
        def entry_points(**params: Any) -> list[importlib.metadata.EntryPoint]:
            assert params == {"group": registry.ENTRY_POINT_GROUP}
            return list(eps)

        monkeypatch.setattr(importlib.metadata, "entry_points", entry_points)

    return install


def test_stage_names_reads_names_without_importing(fake_entry_points):
    fake_entry_points(
        _ep("workers", "tuneup_plugins.stages:WORKERS"),
        _ep("ghost", "tuneup_no_such_plugin_module:STAGE"),
    )
    assert stage_names() == ["ghost", "workers"]


def test_load_stage_by_name(fake_entry_points):
    fake_entry_points(_ep("amp", "tuneup_plugins.stages:AMP"))
    assert load_stage("amp") is builtin.AMP


def test_load_stage_unknown_name_lists_the_known_ones(fake_entry_points):
    fake_entry_points(
        _ep("workers", "tuneup_plugins.stages:WORKERS"), _ep("amp", "tuneup_plugins.stages:AMP")
    )
    with pytest.raises(
        UsageError,
        match=r"unknown stage 'worker': did you mean 'workers'\? "
        r"known stages are amp, workers",
    ):
        load_stage("worker")


@pytest.mark.parametrize(
    ("name", "value", "message"),
    [
        ("ghost", "tuneup_no_such_plugin_module:STAGE", "failed to import: ModuleNotFoundError"),
        ("order", "tuneup_plugins.stages:BUCKET_SIZES_MB", "is a tuple, not a tuneup"),
        ("threads", "tuneup_plugins.stages:WORKERS", "calls itself 'workers'"),
    ],
)
def test_load_stage_broken_plugin_is_one_clear_error(fake_entry_points, name, value, message):
    fake_entry_points(_ep(name, value))
    with pytest.raises(UsageError, match=message) as info:
        load_stage(name)
    assert "\n" not in str(info.value) and f"'{name}'" in str(info.value)


def test_scan_reports_broken_plugins_and_keeps_going(fake_entry_points):
    fake_entry_points(
        _ep("workers", "tuneup_plugins.stages:WORKERS"),
        _ep("ghost", "tuneup_no_such_plugin_module:STAGE"),
        _ep("order", "tuneup_plugins.stages:BUCKET_SIZES_MB"),
        _ep("amp", "tuneup_plugins.stages:AMP"),
        _ep("amp", "tuneup_plugins.stages:JIT"),
    )
    stages, warnings = scan_stages()
    assert list(stages) == ["amp", "workers"]
    assert stages["amp"] is builtin.AMP
    assert len(warnings) == 3
    assert any("'ghost'" in w and "skipped" in w for w in warnings)
    assert any("'order'" in w for w in warnings)
    assert any("repeats a name" in w for w in warnings)


def test_installed_builtin_stages_register_through_entry_points():
    names = stage_names()
    if not names:
        pytest.skip("no tuneup.stages entry points installed yet (pyproject not reinstalled)")
    assert set(BUILTINS) <= set(names)
    stages, warnings = scan_stages()
    assert warnings == []
    for name in BUILTINS:
        assert stages[name] is BUILTINS[name]
    # the default ladder is every stage that declares a place, in that order
    ladder = default_ladder()
    assert set(BUILTINS) <= set(ladder)
    assert [stages[n].order for n in ladder] == sorted(stages[n].order for n in ladder)


def test_a_bigger_batch_carries_the_sqrt_rule_when_the_config_has_none():
    base = cpu_smoke()  # lr_schedule.scaling: none, global batch 8
    proposal = builtin.BATCH_SIZE.propose(LAPTOP, base)
    by_label = {c.label: c.values for c in proposal.candidates}
    double = by_label["batch x2 (global_batch_size 16)"]
    assert double["lr_schedule"]["scaling"] == "sqrt" and double["base_batch_size"] == 8
    assert double["lr_schedule"]["start_lr"] == base["lr_schedule"]["start_lr"]
    cfg = build_config({**base, **double})
    assert cfg.global_batch_size == 16 and cfg.lr_schedule["scaling"] == "sqrt"
    # a config that already scales keeps its own rule: nothing else is added
    tutorial = {**base, "lr_schedule": {**base["lr_schedule"], "scaling": "linear"}}
    plain = builtin.BATCH_SIZE.propose(LAPTOP, tutorial).candidates
    assert all(set(c.values) == {"global_batch_size"} for c in plain)


@pytest.mark.parametrize(
    ("machine", "why"),
    [
        (dataclasses.replace(LAPTOP, c_compiler=False), "needs a C compiler"),
        (dataclasses.replace(GPU_NODE, triton=False), "needs Triton"),
        (dataclasses.replace(GPU_NODE, libcuda=False), "libcuda.so"),
    ],
)
def test_compile_is_left_out_before_any_probe_where_its_toolchain_is_missing(machine, why):
    plan = builtin.JIT.propose(machine, {})
    assert labels(plan.candidates) == ["TorchScript"]
    assert [label for label, _ in plan.rejected] == ["torch.compile"] and why in plan.rejected[0][1]
    # and the user reads why on the stage's line
    from tuneup.tuning.session.stage_plans import stage_plans

    (stage_plan,) = stage_plans(("jit",), machine, {})
    assert stage_plan.not_tried and why in stage_plan.not_tried[0]


def test_compile_is_tried_where_the_toolchain_is_complete():
    assert labels(builtin.JIT.propose(GPU_NODE, {}).candidates) == ["TorchScript", "torch.compile"]
    # a CPU run needs only the C compiler
    cpu_only = dataclasses.replace(LAPTOP, triton=False, libcuda=False)
    assert labels(builtin.JIT.propose(cpu_only, {}).candidates) == ["TorchScript", "torch.compile"]


def test_threads_tries_the_counts_that_leave_the_loaders_workers_their_cpus():
    laptop = builtin.THREADS.candidates_for(LAPTOP, {"num_data_workers": 1})
    assert [c.values for c in laptop] == [{"intra_op_threads": 1}]
    node = MachineInfo(cuda=True, gpu_count=4, cpus_usable=64, world_size=4)  # 16 per rank
    offered = builtin.THREADS.candidates_for(node, {"num_data_workers": 4})
    assert labels(offered) == ["1 thread", "8 threads", "12 threads"]
    # the incumbent's count is not tried again
    kept = builtin.THREADS.candidates_for(node, {"num_data_workers": 4, "intra_op_threads": 8})
    assert labels(kept) == ["1 thread", "12 threads"]
    plan = builtin.THREADS.propose(MachineInfo(cpus_usable=1), {"intra_op_threads": 1})
    assert plan.skipped and "one CPU per rank" in plan.reason


def test_threads_does_not_measure_the_count_omp_num_threads_already_sets() -> None:
    """Under OMP_NUM_THREADS=1 the incumbent (intra_op_threads 0: torch's choice) runs one
    thread: the stage measured 1 thread against 1."""
    omp_1 = dataclasses.replace(LAPTOP, env_threads=1, env_threads_from="OMP_NUM_THREADS")
    plan = builtin.THREADS.propose(omp_1, {"num_data_workers": 1})
    assert plan.skipped and plan.reason == (
        "the incumbent already runs 1 thread (OMP_NUM_THREADS=1), what each count the stage "
        "tries comes to here (one, the 2 CPUs per rank less its 1 worker(s), half of them): "
        "nothing else to try"
    )
    node = MachineInfo(cpus_usable=16, env_threads=1, env_threads_from="OMP_NUM_THREADS")
    offered = builtin.THREADS.candidates_for(node, {"num_data_workers": 4})
    assert labels(offered) == ["8 threads", "12 threads"]
    # the knob, where set, is what runs: the variable no longer decides
    kept = builtin.THREADS.candidates_for(node, {"num_data_workers": 4, "intra_op_threads": 8})
    assert labels(kept) == ["1 thread", "12 threads"]


def test_a_ladder_under_omp_num_threads_1_says_why_threads_has_nothing_to_try(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv("OMP_NUM_THREADS", "1")
    monkeypatch.delenv("MKL_NUM_THREADS", raising=False)
    monkeypatch.setattr(os, "sched_getaffinity", lambda _pid: {0, 1})  # the 2-core laptop
    out = tmp_path / "run"

    assert main(["probe", "--trainer", "sim", "--stages", "threads", "--out", str(out)]) == 0

    (line,) = [x for x in capsys.readouterr().out.splitlines() if x.startswith("threads:")]
    assert line.startswith("threads: skipped: the incumbent already runs 1 thread (OMP_NUM_")
    assert "nothing else to try" in line
    journal = [json.loads(x) for x in (out / "journal.jsonl").read_text().splitlines()]
    assert {p["stage"] for p in journal} == {"baseline"}  # no 1-thread probe against 1 thread


def test_the_thread_variables_are_read_as_torch_reads_them() -> None:
    assert env_threads({"OMP_NUM_THREADS": "1"}) == (1, "OMP_NUM_THREADS")
    both = {"OMP_NUM_THREADS": "2", "MKL_NUM_THREADS": "3"}
    assert env_threads(both) == (3, "MKL_NUM_THREADS")  # MKL's wins in torch
    assert env_threads({"OMP_NUM_THREADS": "4,2"}) == (4, "OMP_NUM_THREADS")
    assert env_threads({"OMP_NUM_THREADS": "0"}) == (None, "")
    for unread in ("many", "²", "-2"):
        assert env_threads({"OMP_NUM_THREADS": unread}) == (None, "")
    assert env_threads({}) == (None, "")


def test_the_threads_knob_sets_torchs_threads_and_zero_gives_torchs_own_back():
    torch = pytest.importorskip("torch")
    from tuneup.unet.runtime import apply_threads

    before = torch.get_num_threads()
    try:
        assert apply_threads(1) == 1 and torch.get_num_threads() == 1
        assert apply_threads(0) == before and torch.get_num_threads() == before
    finally:
        torch.set_num_threads(before)
    with pytest.raises(UsageError, match="intra_op_threads"):
        build_config({"intra_op_threads": -1})


def test_workers_are_not_tuned_for_a_loader_that_has_none() -> None:
    plan = builtin.WORKERS.propose(GPU_NODE, {"data_loader_config": "gpu"})
    assert plan.skipped and plan.reason == "the incumbent's loader (gpu) has no workers to tune"
    assert not builtin.WORKERS.propose(GPU_NODE, {"data_loader_config": "inmem"}).skipped
