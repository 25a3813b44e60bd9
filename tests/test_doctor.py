"""`tuneup doctor` on this CPU machine, with fakes for NVML, /dev/shm and the toolchain."""

from __future__ import annotations

import dataclasses
import io
import json

import pytest

from tuneup.cluster.toolchain import Toolchain
from tuneup.doctor.checks import FAIL, OK, WARN, failed, run_checks
from tuneup.doctor.facts import Facts, TorchFacts, gather_facts
from tuneup.testing.fake_nvml import NOT_SUPPORTED, FakeGpu, FakeNvml

GB = 10**9
H100 = "NVIDIA H100 80GB HBM3"
CUDA_TORCH = TorchFacts(
    version="2.11.0+cu130",
    cuda_build="12.4",
    cuda_available=True,
    device_count=4,
    cudnn="9.1.0",
    nccl="2.21.5",
    tf32_matmul=False,
    tf32_cudnn=True,
    cudnn_enabled=True,
    cudnn_benchmark=False,
)
TOOLS = Toolchain("/usr/bin/gcc", True, "/usr/lib64/libcuda.so.1")


def gpu_node(**changes) -> Facts:
    """A healthy 4 x H100 node read through the fake NVML; `changes` replace Facts fields."""
    nvml = FakeNvml(devices=[FakeGpu(name=H100) for _ in range(4)], cuda_driver=12040)
    facts = gather_facts(
        nvml=nvml,
        torch_facts=lambda: CUDA_TORCH,
        shm=lambda: 64 * GB,
        meminfo=lambda: (512 * GB, 480 * GB),
        toolchain=lambda: TOOLS,
        environ={},
        cpus=lambda: 64,
        module_available=lambda name: True,
        apex_available=lambda: False,
    )
    return dataclasses.replace(facts, **changes)


def by_name(facts: Facts) -> dict[str, tuple[str, str, str]]:
    return {c.name: (c.level, c.detail, c.fix) for c in run_checks(facts)}


def test_a_healthy_gpu_node_is_all_ok() -> None:
    checks = by_name(gpu_node())
    assert {level for level, _, _ in checks.values()} == {OK}
    assert checks["GPUs"][1] == f"4 x {H100} (79.6 GiB)"
    assert checks["driver"][1] == "550.54.15 (CUDA up to 12.4)"
    assert "16 per GPU" in checks["CPUs"][1]
    assert checks["cuDNN"][1] == "9.1.0" and checks["NCCL"][1] == "2.21.5"


def test_a_cpu_only_torch_on_a_gpu_node_fails_with_the_install_fix() -> None:
    level, detail, fix = by_name(gpu_node(torch=TorchFacts(version="2.13.0+cpu")))["torch"]
    assert level == FAIL and "nothing will run on them" in detail and "cu124" in fix


def test_torch_built_for_a_newer_cuda_than_the_driver() -> None:
    newer_major = dataclasses.replace(CUDA_TORCH, cuda_build="13.0")
    assert by_name(gpu_node(torch=newer_major))["driver"][0] == FAIL
    newer_minor = dataclasses.replace(CUDA_TORCH, cuda_build="12.8")
    level, detail, _ = by_name(gpu_node(torch=newer_minor))["driver"]
    assert level == WARN and "minor-version" in detail


def test_a_cuda_torch_that_sees_no_gpu_fails() -> None:
    blind = dataclasses.replace(CUDA_TORCH, cuda_available=False, device_count=0)
    level, _, fix = by_name(gpu_node(torch=blind))["torch"]
    assert level == FAIL and "CUDA_VISIBLE_DEVICES" in fix
    no_gpus = by_name(gpu_node(gpus=(), nvml_error="NVML did not start"))["GPUs"]
    assert no_gpus[0] == FAIL and "salloc" in no_gpus[2]


def test_a_container_sized_dev_shm_fails_with_the_docker_fix() -> None:
    level, detail, fix = by_name(gpu_node(shm_free=64 * 10**6))["/dev/shm"]
    assert level == FAIL and "64.0 MB free" in detail
    assert "--shm-size" in fix and "num_data_workers" in fix
    assert by_name(gpu_node(shm_free=None))["/dev/shm"][0] == WARN


def test_few_cores_per_gpu_and_little_host_memory_warn() -> None:
    cpus = by_name(gpu_node(cpus_usable=8))["CPUs"]
    assert cpus[0] == WARN and "2 per GPU" in cpus[1] and "--cpus-per-task" in cpus[2]
    memory = by_name(gpu_node(mem_available=8 * GB))["host memory"]
    assert memory[0] == WARN and "lowmem" in memory[2]


def test_mig_warns_that_timings_hold_for_the_slice() -> None:
    nvml = FakeNvml(devices=[FakeGpu(name=H100, mig=True), FakeGpu(name=H100, mig=NOT_SUPPORTED)])
    facts = gather_facts(
        nvml=nvml,
        torch_facts=lambda: CUDA_TORCH,
        shm=lambda: 64 * GB,
        meminfo=lambda: (512 * GB, 480 * GB),
        toolchain=lambda: TOOLS,
        environ={},
        cpus=lambda: 32,
    )
    assert [g.mig for g in facts.gpus] == [True, None]
    level, detail, fix = by_name(facts)["MIG"]
    assert level == WARN and "1 GPU(s)" in detail and "nvidia-smi -mig 0" in fix


@pytest.mark.parametrize(
    ("tools", "said"),
    [
        (Toolchain(None, True, "libcuda.so.1"), "install gcc, or set CC"),
        (Toolchain("/usr/bin/gcc", False, "libcuda.so.1"), "pip install triton"),
        (Toolchain("/usr/bin/gcc", True, None), "TRITON_LIBCUDA_PATH"),
    ],
)
def test_a_missing_compile_toolchain_warns_that_compile_will_be_skipped(tools, said) -> None:
    level, detail, fix = by_name(gpu_node(toolchain=tools))["compile toolchain"]
    assert level == WARN and detail.startswith("jit=compile will be skipped") and said in fix


def test_dali_missing_on_a_gpu_node_and_a_global_tf32_override_warn() -> None:
    checks = by_name(gpu_node(dali=False, tf32_override="0"))
    assert checks["DALI"][0] == WARN and "nvidia-dali-cuda120" in checks["DALI"][2]
    assert checks["TF32"][0] == WARN and "unset NVIDIA_TF32_OVERRIDE" in checks["TF32"][2]


def test_in_a_slurm_job_the_job_is_described() -> None:
    environ = {"SLURM_JOB_ID": "4242", "SLURM_JOB_NUM_NODES": "1", "SLURM_GPUS_ON_NODE": "4"}
    facts = gather_facts(
        nvml=FakeNvml(devices=[FakeGpu()]),
        torch_facts=lambda: CUDA_TORCH,
        shm=lambda: 64 * GB,
        meminfo=lambda: (None, None),
        toolchain=lambda: TOOLS,
        environ=environ,
    )
    checks = by_name(facts)
    assert "4242" in checks["SLURM"][1]
    assert checks["host memory"][0] == WARN  # /proc/meminfo not read


def test_exit_status_is_one_only_when_a_check_failed() -> None:
    assert not failed(run_checks(gpu_node(dali=False)))  # warnings only
    assert failed(run_checks(gpu_node(shm_free=10**6)))


def test_doctor_quick_json_on_this_machine_is_consistent_with_its_exit(capsys) -> None:
    from tuneup.cli import main

    code = main(["doctor", "--quick", "--json"])
    report = json.loads(capsys.readouterr().out)
    levels = [c["level"] for c in report["checks"]]
    assert set(levels) <= {OK, WARN, FAIL} and len(levels) == 14
    assert report["honesty"] is None and report["failed"] == levels.count(FAIL)
    assert code == (1 if FAIL in levels else 0)


def test_the_honesty_check_times_trainer_and_bare_loop_on_the_cpu() -> None:
    from tuneup.doctor.honesty import run_honesty
    from tuneup.doctor.render import honesty_lines, write_table

    honesty = run_honesty(cpu=True, repeats=2, steps=3)
    assert honesty.device == "cpu" and len(honesty.ratios) == 2
    assert honesty.trainer_sps > 0 and honesty.bare_sps > 0 and honesty.ratio > 0
    assert honesty.tflops is not None and honesty.tflops > 0 and honesty.mfu is None
    assert "n/a (no CUDA)" in honesty_lines(honesty)[-1]
    out = io.StringIO()
    write_table(out, run_checks(gpu_node()), honesty, None)
    assert "trainer SYNTHETIC" in out.getvalue() and "0 failed, 0 warning(s)" in out.getvalue()


def test_peak_tflops_picks_the_most_specific_gpu() -> None:
    from tuneup.trainer.flops import math_mode, peak_tflops

    assert peak_tflops("NVIDIA H100 PCIe", "bf16") == 756.0
    assert peak_tflops(H100, "bf16") == 989.5
    assert peak_tflops("NVIDIA A100-SXM4-40GB", math_mode("none", True)) == 156.0
    assert peak_tflops("Tesla V100-SXM2-16GB", "bf16") is None
    assert peak_tflops("NVIDIA L4", "fp32") is None


@pytest.mark.gpu
def test_the_full_doctor_on_a_gpu_reports_mfu_and_bandwidth(capsys) -> None:
    from tuneup.cli import main

    main(["doctor", "--json"])
    report = json.loads(capsys.readouterr().out)
    honesty = report["honesty"]
    assert honesty is not None and honesty["device"] != "cpu"
    assert honesty["ratio"] > 0 and honesty["tflops"] > 0
    assert honesty["h2d_pinned_gbs"] > 0 and honesty["h2d_pageable_gbs"] > 0
    if honesty["peak_tflops"] is not None:
        assert 0 < honesty["mfu"] < 1
