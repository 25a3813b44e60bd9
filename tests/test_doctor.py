"""`tuneup doctor` on this CPU machine, with fakes for NVML, /dev/shm and the toolchain."""

from __future__ import annotations

import dataclasses
import io
import json

import pytest

from tuneup.doctor.checks import FAIL, OK, WARN, failed, honesty_checks, run_checks
from tuneup.doctor.facts import Facts, TorchFacts, gather_facts
from tuneup.doctor.honesty import Honesty
from tuneup.hardware.toolchain import Toolchain
from tuneup.probe.types import Contention
from tuneup.testing.fake_nvml import NOT_SUPPORTED, FakeGpu, FakeNvml, FakeProcess

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


def read_node(**sources) -> Facts:
    """Facts of a healthy 4 x H100 node read through fakes; `sources` replace gather_facts's."""
    fakes = {
        "nvml": FakeNvml(devices=[FakeGpu(name=H100) for _ in range(4)], cuda_driver=12040),
        "torch_facts": lambda: CUDA_TORCH,
        "shm": lambda: 64 * GB,
        "meminfo": lambda: (512 * GB, 480 * GB),
        "toolchain": lambda: TOOLS,
        "environ": {},
        "cpus": lambda: 64,
        "cpu_count": lambda: 128,
        "module_available": lambda name: True,
        "apex_available": lambda: False,
        "host_load": lambda: Contention(other_cpus=0.2, usable_cpus=64),
    }
    return gather_facts(**{**fakes, **sources})


def gpu_node(**changes) -> Facts:
    """The healthy node's facts; `changes` replace Facts fields."""
    return dataclasses.replace(read_node(), **changes)


def by_name(facts: Facts) -> dict[str, tuple[str, str, str]]:
    return {c.name: (c.level, c.detail, c.fix) for c in run_checks(facts)}


def test_a_healthy_gpu_node_is_all_ok() -> None:
    checks = by_name(gpu_node())
    assert {level for level, _, _ in checks.values()} == {OK}
    assert checks["GPUs"][1] == f"4 x {H100} (79.6 GiB)"
    assert checks["driver"][1] == "550.54.15 (CUDA up to 12.4, NVML 12.550.54.15)"
    assert checks["CPUs"][1] == "64 usable (affinity) of 128, 16 per GPU"
    assert checks["cuDNN"][1].startswith("9.1.0 (benchmark off") and checks["NCCL"][1] == "2.21.5"
    assert "need 2.4 GB" in checks["/dev/shm"][1]


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
    # CUDA_VISIBLE_DEVICES=0: NVML lists 4 GPUs, this process drives one with all 8 cores
    one = dataclasses.replace(CUDA_TORCH, device_count=1)
    assert by_name(gpu_node(cpus_usable=8, torch=one))["CPUs"][0] == OK
    memory = by_name(gpu_node(mem_available=8 * GB))["host memory"]
    assert memory[0] == WARN and "lowmem" in memory[2]


def test_mig_warns_that_timings_hold_for_the_slice() -> None:
    nvml = FakeNvml(devices=[FakeGpu(name=H100, mig=True), FakeGpu(name=H100, mig=NOT_SUPPORTED)])
    facts = read_node(nvml=nvml, cpus=lambda: 32)
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
    facts = read_node(
        nvml=FakeNvml(devices=[FakeGpu()]), meminfo=lambda: (None, None), environ=environ
    )
    checks = by_name(facts)
    assert "4242" in checks["SLURM"][1]
    assert checks["host memory"][0] == WARN  # /proc/meminfo not read


def test_cudnn_switched_off_warns() -> None:
    off = dataclasses.replace(CUDA_TORCH, cudnn_enabled=False)
    level, detail, fix = by_name(gpu_node(torch=off))["cuDNN"]
    assert level == WARN and "disabled" in detail and "cudnn.enabled = True" in fix


@pytest.mark.parametrize(
    ("changes", "code"),
    [({}, 0), ({"dali": False, "cpus_usable": 8}, 0), ({"shm_free": 10**6}, 1)],
)
def test_exit_status_is_one_only_when_a_check_failed(monkeypatch, changes, code) -> None:
    import tuneup.doctor.facts
    from tuneup.commands.doctor import run_doctor_command

    monkeypatch.setattr(tuneup.doctor.facts, "gather_facts", lambda: gpu_node(**changes))
    out = io.StringIO()
    assert run_doctor_command(quick=True, as_json=False, cpu=False, out=out) == code
    assert failed(run_checks(gpu_node(**changes))) == bool(code)
    assert "tuneup doctor" in out.getvalue()


def measured(**changes) -> Honesty:
    """An H100's honesty figures; `changes` replace fields."""
    values = dict(
        device=H100,
        config={},
        case="preset jean-zay-h100's baseline: batch 64, 64^3 crops, tf32",
        trainer_sps=99.0,
        bare_sps=100.0,
        ratio=0.99,
        ratios=(0.98, 0.99, 1.0),
        tflops=150.0,
        peak_tflops=494.5,
        precision="tf32",
        mfu=150.0 / 494.5,
        h2d_pinned_gbs=52.1,
        h2d_pageable_gbs=18.3,
    )
    return Honesty(**{**values, **changes})


def rows(h: Honesty | None, error: str | None = None) -> dict[str, tuple[str, str, str]]:
    return {c.name: (c.level, c.detail, c.fix) for c in honesty_checks(h, error)}


def test_the_timed_rows_when_the_trainer_tells_the_truth() -> None:
    checks = rows(measured())
    assert {level for level, _, _ in checks.values()} == {OK}
    assert "ratio 0.990 (pairs 0.980-1.000)" in checks["honesty"][1]
    assert "jean-zay-h100's baseline: batch 64" in checks["honesty"][1]  # what was timed
    assert (
        checks["compute"][1]
        == "150 TFLOP/s, MFU 30.3% of the tf32 dense peak (494.5 TFLOP/s, datasheet)"
    )
    assert checks["host to device"][1] == "52.1 GB/s pinned, 18.3 GB/s pageable"
    assert rows(None) == {}


@pytest.mark.parametrize(("ratio", "said"), [(0.9, "understate"), (1.1, "flatter")])
def test_a_trainer_off_the_bare_loop_by_more_than_3_percent_warns(ratio, said) -> None:
    level, detail, fix = rows(measured(ratio=ratio, ratios=(ratio,)))["honesty"]
    assert level == WARN and said in detail and "rerun on an idle node" in fix


def test_slow_copies_warn_and_a_gpu_without_a_peak_or_cuda_has_no_mfu() -> None:
    level, detail, fix = rows(measured(h2d_pinned_gbs=6.0))["host to device"]
    assert level == WARN and "below PCIe 3.0 x16" in detail and "NUMA" in fix
    unknown = rows(measured(device="Tesla V100-SXM2-16GB", peak_tflops=None, mfu=None))
    assert unknown["compute"] == (
        OK,
        "150 TFLOP/s (MFU n/a: no tf32 peak on file for Tesla V100-SXM2-16GB)",
        "",
    )
    cpu = rows(
        measured(
            device="cpu",
            peak_tflops=None,
            mfu=None,
            tflops=0.002,
            h2d_pinned_gbs=None,
            h2d_pageable_gbs=None,
        )
    )
    assert cpu["compute"][1] == "0.002 TFLOP/s (MFU n/a: no CUDA)"
    assert cpu["host to device"] == (OK, "n/a: no CUDA", "")


def test_a_timed_check_that_crashes_is_a_failed_row() -> None:
    level, detail, fix = rows(None, "RuntimeError: CUDA error: out of memory")["honesty"]
    assert level == FAIL and "out of memory" in detail and fix == "--quick skips it"


def test_doctor_quick_json_on_this_machine_is_consistent_with_its_exit(capsys) -> None:
    from tuneup.cli import main

    code = main(["doctor", "--quick", "--json"])
    report = json.loads(capsys.readouterr().out)
    levels = [c["level"] for c in report["checks"]]
    assert set(levels) <= {OK, WARN, FAIL} and len(levels) == 15
    assert report["honesty"] is None and report["failed"] == levels.count(FAIL)
    assert code == (1 if FAIL in levels else 0)


def test_the_honesty_check_times_trainer_and_bare_loop_on_the_cpu() -> None:
    from tuneup.doctor.honesty import run_honesty
    from tuneup.doctor.render import report_dict, write_table

    honesty = run_honesty(cpu=True, repeats=2, steps=3)
    assert honesty.device == "cpu" and len(honesty.ratios) == 2
    assert honesty.trainer_sps > 0 and honesty.bare_sps > 0 and honesty.ratio > 0
    assert honesty.tflops is not None and honesty.tflops > 0 and honesty.mfu is None
    checks = run_checks(gpu_node()) + honesty_checks(honesty, None)
    assert [c.name for c in checks[-3:]] == ["honesty", "compute", "host to device"]
    out = io.StringIO()
    write_table(out, checks)
    assert "trainer SYNTHETIC" in out.getvalue() and "0 failed" in out.getvalue()
    report = json.loads(json.dumps(report_dict(checks, honesty)))
    assert report["honesty"]["ratio"] == honesty.ratio and report["honesty"]["mfu"] is None
    assert report["honesty"]["h2d_pinned_gbs"] is None and report["failed"] == 0


def test_peak_tflops_picks_the_most_specific_gpu() -> None:
    from tuneup.unet.flops import math_mode, peak_tflops

    assert peak_tflops("NVIDIA H100 PCIe", "bf16") == 756.0
    assert peak_tflops(H100, "bf16") == 989.5
    assert peak_tflops("NVIDIA A100-SXM4-40GB", math_mode("none", True)) == 156.0
    assert peak_tflops("Tesla V100-SXM2-16GB", "bf16") is None
    assert peak_tflops("NVIDIA L4", "fp32") is None


@pytest.fixture(scope="module")
def gpu_doctor_report() -> dict:
    """One full `tuneup doctor --json` on the GPU for the tests that read it: each run times
    the preset's baseline (64 s on an H200), so two runs had taken half the gpu tests'
    window there (2026-11-27d)."""
    import subprocess
    import sys

    done = subprocess.run(
        [sys.executable, "-m", "tuneup", "doctor", "--json"],
        capture_output=True,
        text=True,
        timeout=300,
    )
    return json.loads(done.stdout)


@pytest.mark.gpu
def test_the_full_doctor_on_a_gpu_reports_mfu_and_bandwidth(gpu_doctor_report: dict) -> None:
    report = gpu_doctor_report
    honesty = report["honesty"]
    assert honesty is not None and honesty["device"] != "cpu"
    assert honesty["ratio"] > 0 and honesty["tflops"] > 0
    assert honesty["h2d_pinned_gbs"] > 0 and honesty["h2d_pageable_gbs"] > 0
    if honesty["peak_tflops"] is not None:
        assert 0 < honesty["mfu"] < 1
    names = [c["name"] for c in report["checks"]]
    assert names[-3:] == ["honesty", "compute", "host to device"]


@pytest.mark.gpu
def test_the_static_checks_leave_cuda_uninitialised() -> None:
    """NVIDIA_TF32_OVERRIDE and friends still apply to whatever the doctor runs next."""
    import subprocess
    import sys

    code = (
        "import torch; from tuneup.doctor.facts import gather_facts; facts = gather_facts(); "
        "print(torch.cuda.is_initialized(), len(facts.gpus), facts.torch.device_count)"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    initialised, gpus, visible = done.stdout.split()
    assert initialised == "False" and int(gpus) >= 1 and int(visible) >= 1


def test_an_unknown_option_is_one_line_and_exit_two(capsys) -> None:
    from tuneup.cli import main

    assert main(["doctor", "--bogus"]) == 2
    err = capsys.readouterr().err.strip()
    assert "unrecognized arguments: --bogus" in err and "\n" not in err


def test_torch_is_read_in_a_child_and_a_failing_child_is_a_fact() -> None:
    import subprocess

    import torch

    from tuneup.doctor.facts import read_torch

    facts = read_torch()
    assert facts.version == torch.__version__ and facts.error is None

    def broken(*args, **kwargs):
        return subprocess.CompletedProcess(args, 1, "", "ImportError: libcudnn.so.9: not found\n")

    def slow(*args, **kwargs):
        raise subprocess.TimeoutExpired(args, 120)

    assert read_torch(broken).error == "reading torch failed: ImportError: libcudnn.so.9: not found"
    assert "took over 120 s" in (read_torch(slow).error or "")


def test_the_honesty_check_times_what_the_presets_ladder_will_run() -> None:
    from tuneup.doctor.honesty import preset_case
    from tuneup.preset.load import load_preset

    values, words = preset_case(load_preset("h200"))
    assert values["global_batch_size"] == 64 and values["device"] == "cuda"
    assert values["data_loader_config"] == "synthetic"  # one cached batch, no loader
    assert words == "preset h200's baseline: batch 64, 64^3 crops, tf32"


def test_doctor_with_a_preset_that_does_not_load_is_a_one_line_error() -> None:
    from tuneup.commands.doctor import run_doctor_command
    from tuneup.errors import UsageError

    with pytest.raises(UsageError, match="no preset named 'nosuch'"):
        run_doctor_command(quick=True, as_json=False, cpu=False, preset="nosuch")


@pytest.mark.gpu
def test_the_doctor_times_the_picked_presets_baseline_on_the_gpu(gpu_doctor_report: dict) -> None:
    report = gpu_doctor_report
    assert report["honesty"]["case"].startswith("preset ") and "batch" in report["honesty"]["case"]


def test_other_processes_on_the_cpus_and_the_gpus_are_measured_and_warned_with_the_figure() -> None:
    assert by_name(gpu_node())["load"][:2] == (OK, "other processes used 0.2 of 64 usable CPUs")
    busy = Contention(
        other_cpus=1.9,
        usable_cpus=2,
        note="other processes used 1.9 of 2 CPUs",
        busiest="python3 1.0, python3 0.9",
    )
    level, detail, fix = by_name(gpu_node(host_load=busy, cpus_usable=2))["load"]
    assert level == WARN and "other processes used 1.9 of 2 usable CPUs" in detail
    assert "(python3 1.0, python3 0.9)" in detail and "quiet node" in fix
    gpu = FakeGpu(name=H100, processes=[FakeProcess(4242, 1024.0)])
    nvml = FakeNvml(devices=[gpu], cuda_driver=12040)
    level, detail, _ = by_name(read_node(nvml=nvml))["load"]
    assert level == WARN and "GPU 0: 1 other process(es)" in detail, detail


def test_the_honesty_warning_names_the_load_it_was_timed_under() -> None:
    busy = Contention(other_cpus=1.9, usable_cpus=2, note="other processes used 1.9 of 2 CPUs")
    level, detail, fix = rows_under(measured(ratio=1.12, ratios=(1.1, 1.12, 1.2)), busy)["honesty"]
    assert level == WARN and "may flatter this node" in detail
    assert "likely cause: other processes used 1.9 of 2 CPUs while it was timed" in detail
    assert "load row" in fix
    quiet = rows_under(measured(ratio=1.12, ratios=(1.1, 1.12, 1.2)), None)["honesty"]
    assert "likely cause" not in quiet[1]


def rows_under(h: Honesty, load: Contention | None) -> dict[str, tuple[str, str, str]]:
    return {c.name: (c.level, c.detail, c.fix) for c in honesty_checks(h, None, load)}
