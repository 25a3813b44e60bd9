"""The profile rules: what a user reads after a profiled probe, and when each rule stays quiet."""

from __future__ import annotations

from typing import Any

import pytest

from tuneup.probe.breakdown import whats_left
from tuneup.probe.profile_rules import StageOutcome, findings

STEP_S = 0.031

LADDER = {
    "workers": StageOutcome(True, "num_data_workers=8 adopted: 113 -> 319 samples/s IO"),
    "data": StageOutcome(False, "left out for the time budget"),
    "amp": StageOutcome(False, "skipped: needs CUDA"),
    "cuda_graphs": StageOutcome(True, "cuda_graphs kept off: 1,210 -> 1,190 samples/s"),
    "ddp": StageOutcome(True, "bucket_cap_mb=100 adopted: 880 -> 940 samples/s"),
}
CONFIG = {
    "amp_mode": "none",
    "tf32": True,
    "num_data_workers": 2,
    "data_loader_config": "lowmem",
    "pin_memory": True,
    "non_blocking": True,
    "cuda_graphs": False,
    "jit": "none",
    "bucket_cap_mb": 25,
    "gradient_as_bucket_view": False,
}


def cpu_profile(**parts: float) -> dict[str, Any]:
    """A CPU profile as journaled: no GPU side, no FLOP rate."""
    step_parts = {"data": 0.0005, "forward": 0.010, "backward": 0.017, "optimizer": 0.0035}
    return {
        "steps": 8,
        "step_s": STEP_S,
        "parts_s": step_parts | parts,
        "device": "cpu",
        "gpu": None,
        "top": [{"name": "aten::convolution_backward", "self_s": 0.012, "share": 0.41}],
        "tflops": None,
        "mfu": None,
        "conv_share": 0.66,
    }


def cuda_profile(gpu: dict[str, float] | None = None, **fields: Any) -> dict[str, Any]:
    """A healthy CUDA profile (busy GPU, tensor cores, long kernels), changed where asked."""
    times = {
        "busy_s": 0.029,
        "idle_host_s": 0.001,
        "idle_gaps_s": 0.001,
        "tensor_core_s": 0.018,
        "kernels_per_step": 400.0,
        "mean_kernel_us": 70.0,
        "pageable_copies": 0.0,
    }
    return (
        cpu_profile()
        | {
            "device": "cuda",
            "gpu": times | (gpu or {}),
            "tflops": 310.0,
            "mfu": 0.39,
            "conv_share": 0.71,
        }
        | fields
    )


def rules(found: list[Any]) -> list[str]:
    return [finding.rule for finding in found]


def test_a_starved_loader_names_the_workers_stage_and_what_the_ladder_measured_there():
    found = findings(cpu_profile(data=0.012), LADDER, CONFIG)

    assert rules(found) == ["data_wait"]
    wait = found[0]
    assert wait.stage == "workers"
    assert wait.tried
    assert wait.measured == pytest.approx(0.012 / STEP_S)
    assert wait.threshold == 0.05
    assert "data wait is 39% of the step (rule: above 5%)" in wait.text
    assert "the workers and data stages address it" in wait.text
    assert "113 -> 319 samples/s IO" in wait.text
    assert "[data] left out for the time budget" in wait.text
    assert "num_data_workers=2" in wait.text
    assert "\n" not in wait.text


def test_a_fast_loader_raises_no_data_wait():
    assert findings(cpu_profile(data=0.0005), LADDER, CONFIG) == []


def test_a_stage_the_ladder_did_not_plan_is_said_so():
    wait = findings(cpu_profile(data=0.012), {}, CONFIG)[0]

    assert not wait.tried
    assert wait.ladder_said == "[workers] not in this ladder; [data] not in this ladder"


def test_a_launch_bound_cuda_step_names_cuda_graphs():
    short_kernels = {"idle_gaps_s": 0.009, "mean_kernel_us": 8.0, "kernels_per_step": 1800.0}
    found = findings(cuda_profile(short_kernels), LADDER, CONFIG)

    assert rules(found) == ["launch_bound"]
    bound = found[0]
    assert bound.stage == "cuda_graphs"
    assert "gaps between kernels are 29% of the step" in bound.text
    assert "8.0 us on average, 1,800 per step" in bound.text
    assert "cuda_graphs off" in bound.text
    assert "[cuda_graphs] cuda_graphs kept off" in bound.text
    assert "[jit] not in this ladder" in bound.text


def test_long_kernels_with_the_same_gaps_are_not_launch_bound():
    found = findings(cuda_profile({"idle_gaps_s": 0.009, "mean_kernel_us": 60.0}), LADDER, CONFIG)

    assert "launch_bound" not in rules(found)


def test_no_tensor_core_time_fires_where_convolutions_are_eligible():
    found = findings(cuda_profile({"tensor_core_s": 0.0}), LADDER, CONFIG | {"tf32": False})

    assert rules(found) == ["tensor_cores"]
    cores = found[0]
    assert cores.stage == "amp"
    assert "tensor cores ran 0.0% of GPU busy time while convolutions are 71%" in cores.text
    assert "the amp and tf32 stages address it" in cores.text
    assert "amp_mode=none, tf32 off" in cores.text
    assert "[amp] skipped: needs CUDA" in cores.text


def test_tf32_is_named_only_when_the_config_has_it_off():
    cores = findings(cuda_profile({"tensor_core_s": 0.0}), LADDER, CONFIG)[0]

    assert "the amp stage addresses it" in cores.text
    assert "[tf32]" not in cores.ladder_said


@pytest.mark.parametrize(
    "profile",
    [
        cuda_profile({"tensor_core_s": 0.018}),  # tensor cores busy
        cuda_profile({"tensor_core_s": 0.0}, conv_share=0.05),  # few convolutions
        cuda_profile({"tensor_core_s": None}),  # not measured
        cuda_profile({"tensor_core_s": 0.0}, device="cpu"),  # no tensor cores to use
    ],
    ids=["tensor-cores-busy", "few-convolutions", "not-measured", "cpu"],
)
def test_no_tensor_core_time_is_quiet_where_not_eligible(profile):
    assert "tensor_cores" not in rules(findings(profile, LADDER, CONFIG))


@pytest.mark.parametrize(("allreduce_s", "fires"), [(0.0035, True), (0.0028, False)])
def test_communication_fires_only_above_a_tenth_of_the_step(allreduce_s, fires):
    found = findings(cpu_profile(allreduce=allreduce_s), LADDER, CONFIG)

    assert rules(found) == (["allreduce"] if fires else [])
    if fires:
        assert found[0].stage == "ddp"
        assert "gradient all-reduce is 11% of the step" in found[0].text
        assert "bucket_cap_mb=25, gradient_as_bucket_view off" in found[0].text
        assert "bucket_cap_mb=100 adopted" in found[0].ladder_said


def test_findings_come_in_order_of_how_much_of_the_step_they_concern():
    found = findings(cpu_profile(data=0.004, allreduce=0.008), LADDER, CONFIG)

    assert rules(found) == ["allreduce", "data_wait"]


def test_a_cpu_profile_with_missing_keys_raises_nothing_and_fires_only_cpu_rules():
    sparse = {
        "step_s": STEP_S,
        "parts_s": {"data": 0.012, "h2d": 0.01, "allreduce": 0.005, "forward": None},
        "device": "cpu",
        "gpu": None,
        "conv_share": 0.7,
        "tflops": None,
    }
    assert rules(findings(sparse, LADDER, {})) == ["data_wait", "allreduce"]
    for nothing in ({}, {"step_s": None, "parts_s": None, "gpu": None, "top": None}):
        assert findings(nothing, {}, {}) == []
        assert whats_left(nothing) == "the profile measured nothing to report"


def test_gpu_rules_stay_quiet_without_a_gpu_side():
    assert findings(cuda_profile() | {"gpu": None}, LADDER, CONFIG) == []


def test_pageable_copies_name_the_data_stage_and_the_knob_that_is_off():
    found = findings(cuda_profile({"pageable_copies": 2.0}), LADDER, CONFIG | {"pin_memory": False})

    assert rules(found) == ["h2d_copies"]
    copies = found[0]
    assert copies.stage == "data"
    assert "2 pageable copies in the profile" in copies.text
    assert "pin_memory off, non_blocking on" in copies.text
    assert "data_loader_config=lowmem (not the GPU-resident loader)" in copies.text


def test_an_idle_gpu_names_its_biggest_idle_cause():
    waiting = {"busy_s": 0.012, "idle_host_s": 0.017, "idle_gaps_s": 0.002}
    found = findings(cuda_profile(waiting), LADDER, CONFIG)

    assert rules(found) == ["gpu_busy"]
    idle = found[0]
    assert idle.stage == "workers"
    assert "the GPU is busy 39% of the step (rule: below 50%)" in idle.text
    assert "the biggest idle cause is waiting on the host, 55% of the step" in idle.text


def test_whats_left_carries_the_measured_numbers():
    left = whats_left(cuda_profile())

    assert left.startswith("convolutions 71% of GPU time; 310 TFLOP/s, 39% of peak")
    assert "GPU busy 94% of the step" in left
    assert "by part: backward 55%, forward 32%, optimizer 11%, data 2%" in left
    assert left.endswith("8 profiled steps of 31.0 ms")


def test_whats_left_on_a_cpu_says_the_share_by_part():
    left = whats_left(cpu_profile() | {"conv_share": None})

    assert "TFLOP/s" not in left
    assert "GPU" not in left
    assert "top op aten::convolution_backward 41%" in left
    assert "by part: backward 55%, forward 32%, optimizer 11%, data 2%" in left


def device_profile(parts: dict[str, float], **gpu: float) -> dict[str, Any]:
    """A CUDA profile read from its trace: the parts are the GPU's work by the range that
    launched it, the host's spans beside them (as the 2026-11-27d recommendation's)."""
    times = {
        "busy_s": 0.0659,
        "idle_s": 0.0034,
        "idle_host_s": 0.0027,
        "idle_input_s": 0.0027,
        "idle_gaps_s": 0.0007,
        "idle_other_s": 0.0,
        "tensor_core_s": 0.044,
        "kernels_per_step": 430.0,
        "mean_kernel_us": 152.0,
        "pageable_copies": 0.0,
    }
    host = {"data": 0.0214, "forward": 0.0035, "backward": 0.022, "other": 0.021}
    return cuda_profile(times | gpu) | {
        "step_s": 0.0693,
        "basis": "device",
        "parts_s": parts,
        "host_parts_s": host,
        "top": [{"name": "sm90_xmma_dgrad_implicit_gemm_bf16", "self_s": 0.1, "share": 0.22}],
    }


BUSY_IN_COMPUTE = {"data": 0.0031, "h2d": 0.001, "forward": 0.028, "backward": 0.0328}


def test_a_busy_gpu_in_forward_and_backward_is_compute_bound_whatever_the_host_waited_in():
    found = findings(device_profile(BUSY_IN_COMPUTE), LADDER, CONFIG)

    assert rules(found) == ["compute_bound"]  # the host's 31% in `data` is no data wait
    bound = found[0]
    assert "compute-bound: the GPU is busy 95% of the step, 94% of its time" in bound.text
    assert "the top kernel is sm90_xmma_dgrad_implicit_gemm_bf16, 22% of GPU time" in bound.text
    assert "[amp] skipped: needs CUDA" in bound.text


def test_a_gpu_idle_waiting_on_input_is_data_bound():
    waiting = {"busy_s": 0.03, "idle_s": 0.039, "idle_host_s": 0.036, "idle_input_s": 0.035}
    found = findings(device_profile(BUSY_IN_COMPUTE, **waiting), LADDER, CONFIG)

    assert rules(found) == ["gpu_busy", "data_wait"]
    assert found[1].text.startswith("the GPU waits on input 51% of the step")
    assert found[1].stage == "workers"
    assert "the biggest idle cause is waiting on input, 51% of the step" in found[0].text


def test_input_work_taking_much_of_the_gpus_time_is_data_bound():
    heavy = BUSY_IN_COMPUTE | {"data": 0.02}  # a GPU loader's augmentations
    found = findings(device_profile(heavy), LADDER, CONFIG)

    wait = next(f for f in found if f.rule == "data_wait")
    assert wait.text.startswith("input work (data and h2d) is 26% of the GPU's time")
    assert wait.threshold == 0.20


def test_a_journaled_host_span_in_data_is_no_data_wait_while_the_gpu_kept_busy():
    """The 2026-11-27d recommendation as journaled before the device was read."""
    recorded = cuda_profile(
        {"busy_s": 0.0659, "idle_host_s": 0.0021, "idle_gaps_s": 0.001},
        step_s=0.0693,
        parts_s={"data": 0.0214, "forward": 0.0035, "backward": 0.022, "other": 0.021},
    )
    assert "data_wait" not in rules(findings(recorded, LADDER, CONFIG))
    starved = recorded | {"gpu": recorded["gpu"] | {"busy_s": 0.02, "idle_host_s": 0.045}}
    wait = next(f for f in findings(starved, LADDER, CONFIG) if f.rule == "data_wait")
    assert "and the GPU idles 65% of it waiting on the host" in wait.text


def test_a_host_launching_too_slowly_is_launch_bound():
    slow = {
        "busy_s": 0.02,
        "idle_s": 0.049,
        "idle_host_s": 0.045,
        "idle_input_s": 0.001,
        "idle_gaps_s": 0.002,
        "mean_kernel_us": 6.0,
    }
    found = findings(device_profile(BUSY_IN_COMPUTE, **slow), LADDER, CONFIG)

    assert rules(found) == ["gpu_busy", "launch_bound"]
    assert "gaps between kernels are 66% of the step" in found[1].text
    assert found[0].stage == "cuda_graphs"  # the host's own wait, not input's


def test_a_trace_read_alone_quotes_no_ladder():
    found = findings(device_profile(BUSY_IN_COMPUTE), None, {})

    assert found[0].text.endswith(
        "tuneup's amp and jit stages address it (the top kernel is "
        "sm90_xmma_dgrad_implicit_gemm_bf16, 22% of GPU time)"
    )
    assert "this ladder" not in found[0].text and not found[0].tried


def test_whats_left_on_the_device_names_its_largest_parts_and_kernels_first():
    left = whats_left(device_profile(BUSY_IN_COMPUTE))

    assert left.startswith("GPU time by part: backward 51%, forward 43%, data 5%, h2d 2%")
    assert "top kernels: sm90_xmma_dgrad_implicit_gemm_bf16 22%" in left
    assert "GPU busy 95% of the step (idle on input 4%, launches 1%)" in left
