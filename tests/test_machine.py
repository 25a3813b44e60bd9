"""machine_info: CPUs, GPUs through a faked NVML, apex and DALI, and no CUDA in the parent."""

from __future__ import annotations

import importlib.machinery
import json
import os
import subprocess
import sys
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

from tuneup.hardware.machine import (
    apex_fused_adam_available,
    has_module,
    machine_info,
    nvml_gpu_names,
    torch_has_cuda,
)


class FakeNvml:
    """The pynvml calls machine_info makes, answering from a list of (name, uuid)."""

    def __init__(self, gpus: list[tuple[Any, str]], *, init_error: bool = False) -> None:
        self.gpus = gpus
        self.init_error = init_error
        self.shut_down = False

    def nvmlInit(self) -> None:
        if self.init_error:
            raise RuntimeError("NVML Shared Library Not Found")

    def nvmlShutdown(self) -> None:
        self.shut_down = True

    def nvmlDeviceGetCount(self) -> int:
        return len(self.gpus)

    def nvmlDeviceGetHandleByIndex(self, index: int) -> int:
        return index

    def nvmlDeviceGetName(self, handle: int) -> Any:
        return self.gpus[handle][0]

    def nvmlDeviceGetUUID(self, handle: int) -> str:
        return self.gpus[handle][1]


FOUR = [(f"NVIDIA A100-SXM4-40GB #{i}", f"GPU-{i}aaa-uuid") for i in range(4)]


def test_gpu_names_through_nvml():
    nvml = FakeNvml([(b"NVIDIA H200", "GPU-x"), ("NVIDIA H200", "GPU-y")])
    assert nvml_gpu_names(nvml, environ={}) == ["NVIDIA H200", "NVIDIA H200"]
    assert nvml.shut_down


def test_no_driver_means_zero_gpus_not_a_crash():
    assert nvml_gpu_names(FakeNvml([], init_error=True), environ={}) == []
    broken = FakeNvml(FOUR)
    broken.nvmlDeviceGetCount = lambda: 1 / 0  # type: ignore[method-assign]
    assert nvml_gpu_names(broken, environ={}) == []


@pytest.mark.parametrize(
    ("visible", "expected"),
    [
        ("2", ["NVIDIA A100-SXM4-40GB #2"]),
        ("3,1", ["NVIDIA A100-SXM4-40GB #3", "NVIDIA A100-SXM4-40GB #1"]),
        ("GPU-2aaa", ["NVIDIA A100-SXM4-40GB #2"]),
        ("", []),
        ("-1", []),
        ("0,7,1", ["NVIDIA A100-SXM4-40GB #0"]),  # CUDA stops at the first invalid entry
    ],
)
def test_cuda_visible_devices_limits_what_nvml_reports(visible, expected):
    assert nvml_gpu_names(FakeNvml(FOUR), environ={"CUDA_VISIBLE_DEVICES": visible}) == expected


def test_machine_info_from_injected_probes():
    info = machine_info(
        world_size=2,
        cpus=lambda: 16,
        gpu_names=lambda: ["NVIDIA H200"],
        torch_cuda=lambda: True,
        module_available=lambda name: name == "nvidia.dali",
        apex_available=lambda: False,
    )
    assert info.cuda and info.gpu_count == 1 and info.gpu_names == ("NVIDIA H200",)
    assert (info.cpus_usable, info.dali, info.apex, info.world_size) == (16, True, False, 2)


def test_gpus_without_a_cuda_torch_are_not_cuda():
    info = machine_info(gpu_names=lambda: ["NVIDIA H200"], torch_cuda=lambda: False)
    assert info.gpu_count == 1 and not info.cuda


def _spec_at(folder: Path) -> Any:
    return SimpleNamespace(submodule_search_locations=[str(folder)])


def test_torch_cuda_build_is_recognised_by_its_library(tmp_path):
    (tmp_path / "lib").mkdir()
    (tmp_path / "lib" / "libtorch_cpu.so").touch()
    assert not torch_has_cuda(lambda name: _spec_at(tmp_path))
    (tmp_path / "lib" / "libtorch_cuda.so").touch()
    assert torch_has_cuda(lambda name: _spec_at(tmp_path))
    assert not torch_has_cuda(lambda name: None)


def test_apex_means_nvidia_apex_with_its_cuda_extension(tmp_path):
    def finder(amp_c: bool) -> Any:
        def find(name: str) -> Any:
            if name == "apex":
                return _spec_at(tmp_path)
            return importlib.machinery.ModuleSpec("amp_C", None) if amp_c else None

        return find

    assert not apex_fused_adam_available(finder(True))  # the registry's unrelated `apex`
    (tmp_path / "optimizers").mkdir()
    assert not apex_fused_adam_available(finder(False))  # built without --cuda_ext
    assert apex_fused_adam_available(finder(True))


def test_has_module_never_raises_for_a_missing_parent():
    assert has_module("yaml")
    assert not has_module("tuneup_no_such_parent.child")


def test_machine_info_starts_no_cuda_and_imports_no_torch():
    code = (
        "import json, sys; from tuneup.hardware.machine import machine_info; i = machine_info(); "
        "print(json.dumps({'torch': 'torch' in sys.modules, 'cpus': i.cpus_usable}))"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True, timeout=60
    )
    report = json.loads(out.stdout)
    assert report["torch"] is False
    if hasattr(os, "sched_getaffinity"):
        assert report["cpus"] == len(os.sched_getaffinity(0))
