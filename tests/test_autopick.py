"""Auto-pick: with no --preset, the GPU model and count this process sees choose the preset."""

from __future__ import annotations

import pytest

from tuneup.bundled import bundled_preset_names
from tuneup.preset.autopick import GpuModel, auto_pick, gpu_inventory
from tuneup.testing.fake_nvml import NOT_SUPPORTED, FakeGpu, FakeNvml, NVMLError_LibraryNotFound

A100_40 = {"name": "NVIDIA A100-SXM4-40GB", "memory_total_mb": 40960.0}
A100_80 = {"name": "NVIDIA A100-SXM4-80GB", "memory_total_mb": 81920.0}
H100 = {"name": "NVIDIA H100 80GB HBM3", "memory_total_mb": 81559.0}
H200 = {"name": "NVIDIA H200", "memory_total_mb": 143771.0}
V100_16 = {"name": "Tesla V100-SXM2-16GB", "memory_total_mb": 16160.0}
L40S = {"name": "NVIDIA L40S", "memory_total_mb": 46068.0}


def fake(spec: dict, count: int) -> FakeNvml:
    return FakeNvml(devices=[FakeGpu(**spec) for _ in range(count)])


@pytest.mark.parametrize(
    ("spec", "count", "preset"),
    [
        (A100_40, 4, "perlmutter-a100-4gpu"),
        (A100_40, 1, "perlmutter-a100"),
        (A100_40, 2, "perlmutter-a100"),
        (A100_80, 8, "jean-zay-a100"),
        (A100_40, 8, "perlmutter-a100-4gpu"),  # 40 GB: not Jean Zay's 80 GB nodes
        (H100, 1, "jean-zay-h100"),
        (H100, 4, "jean-zay-h100"),
        (V100_16, 1, "jean-zay-v100"),
        (V100_16, 4, "jean-zay-v100"),
        (V100_16, 6, "summit-v100"),
        (H200, 1, "h200"),
        (L40S, 1, "generic-cuda"),
    ],
)
def test_faked_inventories_pick_their_machine_preset(spec: dict, count: int, preset: str) -> None:
    gpus = gpu_inventory(fake(spec, count), environ={})
    assert len(gpus) == count
    pick = auto_pick(gpus, cpus=64)
    assert pick.name == preset and pick.name in bundled_preset_names()
    assert f"{count} x {spec['name']}" in pick.reason and "64 CPUs" in pick.reason


def test_no_gpu_picks_the_cpu_smoke_preset() -> None:
    for nvml in (FakeNvml(devices=[]), FakeNvml(init_error=NVMLError_LibraryNotFound)):
        gpus = gpu_inventory(nvml, environ={})
        assert gpus == []
        pick = auto_pick(gpus, cpus=2)
        assert pick.name == "cpu-smoke" and "no NVIDIA GPU" in pick.reason


def test_gpus_without_a_cuda_torch_fall_back_to_the_cpu() -> None:
    pick = auto_pick([GpuModel("NVIDIA H100 80GB HBM3", 79.6)], cpus=16, cuda=False)
    assert pick.name == "cpu-smoke" and "no CUDA" in pick.reason and "H100" in pick.reason


def test_the_reason_says_why_in_words() -> None:
    pick = auto_pick(gpu_inventory(fake(A100_40, 4), environ={}), cpus=128)
    assert pick.reason.startswith("4 x NVIDIA A100-SXM4-40GB (40 GiB), 128 CPUs: ")
    assert "Perlmutter" in pick.reason


def test_memory_comes_from_nvml_in_gib() -> None:
    (gpu,) = gpu_inventory(fake(V100_16, 1), environ={})
    assert gpu.memory_gib == pytest.approx(15.8, abs=0.05)


def test_cuda_visible_devices_limits_the_count() -> None:
    gpus = gpu_inventory(fake(A100_40, 4), environ={"CUDA_VISIBLE_DEVICES": "2"})
    assert len(gpus) == 1
    assert auto_pick(gpus, cpus=32).name == "perlmutter-a100"


def test_unknown_memory_does_not_rule_a_gpu_out() -> None:
    spec = {**A100_80, "memory_total_mb": NOT_SUPPORTED}
    gpus = gpu_inventory(fake(spec, 8), environ={})
    assert all(g.memory_gib is None for g in gpus)
    assert auto_pick(gpus, cpus=64).name == "jean-zay-a100"


def test_mixed_gpus_go_by_gpu_zero_and_say_so() -> None:
    gpus = [GpuModel("NVIDIA H100 80GB HBM3", 79.6), GpuModel("NVIDIA A100-SXM4-40GB", 40.0)]
    pick = auto_pick(gpus, cpus=32)
    assert pick.name == "jean-zay-h100" and "mixed" in pick.reason
