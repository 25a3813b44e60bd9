"""CUDA_VISIBLE_DEVICES, read once: the machine, the monitor and the app's setup agree."""

from __future__ import annotations

import io
import os
import sys

import pytest

from tuneup.hardware.backends import NoneBackend, choose_backend
from tuneup.hardware.devices import VisibleGpus, cuda_visible_devices, parse_visible_devices
from tuneup.hardware.machine import machine_info, nvml_gpu_names
from tuneup.hardware.nvml import NvmlBackend
from tuneup.testing import FakeGpu, FakeNvml

UUIDS = ["GPU-8a3f2c1e-0000", "GPU-77b0e9d4-1111", "GPU-5c1d0a2f-2222", "GPU-0e9f8a7b-3333"]


@pytest.mark.parametrize(
    ("value", "indices", "note"),
    [
        (None, None, ""),
        ("0,2", (0, 2), ""),
        (" 3 , 1 ", (3, 1), ""),
        ("1,1,2", (1, 2), ""),  # a GPU named twice is used once
        ("GPU-77b0e9d4-1111", (1,), ""),
        ("GPU-5c1d,0", (2, 0), ""),  # a UUID's prefix, as CUDA accepts
        ("", (), "hides every GPU"),
        ("NoDevFiles", (), "hides every GPU"),
        ("GPU-ffffffff", (), "hides every GPU"),
        ("7", (), "hides every GPU (this machine has 4: indices 0-3)"),
        ("1,-1,2", (1,), "only [1]"),  # CUDA stops at the first entry naming no GPU
        ("0,7,1", (0,), "only [0]"),
    ],
)
def test_cuda_visible_devices_become_nvml_indices(
    value: str | None, indices: tuple[int, ...] | None, note: str
) -> None:
    visible = parse_visible_devices(value, UUIDS)
    assert visible.indices == indices and visible.watched == indices
    assert note in visible.note and bool(visible.note) == bool(note)
    assert visible.mig == ()


def test_a_mig_instance_counts_as_a_gpu_and_the_monitor_watches_every_gpu() -> None:
    visible = parse_visible_devices("MIG-5b0d1b2e-aaaa", UUIDS)
    assert visible == VisibleGpus((), ("MIG-5b0d1b2e-aaaa",), visible.note)
    assert "MIG" in visible.note and visible.watched is None
    assert parse_visible_devices("MIG-5b0d1b2e-aaaa", []).mig == ()  # no GPU, no instance


def test_the_variable_is_read_from_the_given_environment() -> None:
    assert cuda_visible_devices({"CUDA_VISIBLE_DEVICES": "2,3"}) == "2,3"
    assert cuda_visible_devices({}) is None


def four_gpus() -> FakeNvml:
    return FakeNvml(devices=[FakeGpu(util=25 * i, uuid=u) for i, u in enumerate(UUIDS)])


def test_by_default_the_monitor_watches_only_the_job_s_gpus() -> None:
    env = {"SLURM_JOB_ID": "1", "CUDA_VISIBLE_DEVICES": "2,3"}

    visible = cuda_visible_devices(env)
    backend = choose_backend(cuda_visible_devices=visible, nvml_module=four_gpus())

    assert [d.index for d in backend.devices()] == [2, 3]
    assert [s.util_gpu_pct for s in backend.sample()] == [50, 75]


def test_the_nvml_backend_resolves_uuids_and_keeps_the_note() -> None:
    value = "GPU-0e9f,GPU-77b0,junk"
    backend = NvmlBackend(four_gpus(), cuda_visible_devices=value)
    assert [d.index for d in backend.devices()] == [3, 1]
    assert backend.selection().note == f"CUDA_VISIBLE_DEVICES={value!r}: only [3, 1] are used"

    hidden = choose_backend(cuda_visible_devices="", nvml_module=four_gpus())
    assert isinstance(hidden, NoneBackend)
    assert "CUDA_VISIBLE_DEVICES='' hides every GPU" in hidden.available()[1]

    with pytest.raises(ValueError, match="not both"):
        NvmlBackend(four_gpus(), visible=[0], cuda_visible_devices="0")


def test_the_machine_counts_a_mig_instance_as_a_gpu_of_unknown_memory() -> None:
    env = {"CUDA_VISIBLE_DEVICES": "MIG-5b0d1b2e-aaaa"}
    assert nvml_gpu_names(four_gpus(), environ=env) == ["MIG MIG-5b0d1b2e-aaaa"]


def test_a_gpu_named_by_uuid_is_the_same_one_gpu_everywhere(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Machine detection, `tuneup monitor`, the app's monitor and SETUP see GPU 1 alone."""
    pytest.importorskip("textual")
    from tuneup.commands.monitor import run_monitor_command
    from tuneup.commands.tui import _gpu_memory_gib
    from tuneup.tui.app import live_gpus
    from tuneup.tui.screens.setup import machine_lines

    nvml = FakeNvml(
        devices=[
            FakeGpu(name="NVIDIA A100-SXM4-40GB", uuid=UUIDS[0], memory_total_mb=40_960.0),
            FakeGpu(name="NVIDIA H100 80GB HBM3", uuid=UUIDS[1], memory_total_mb=81_920.0),
        ]
    )
    monkeypatch.setitem(sys.modules, "pynvml", nvml)  # every NVML reader imports this one
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", UUIDS[1])
    for name in [n for n in os.environ if n.startswith("SLURM_")]:
        monkeypatch.delenv(name)

    machine = machine_info(torch_cuda=lambda: True)
    assert machine.gpu_names == ("NVIDIA H100 80GB HBM3",)

    out = io.StringIO()
    assert run_monitor_command(once=True, out=out) == 0
    rows = [line for line in out.getvalue().splitlines() if line.startswith("│ ")]
    assert [row.split("│")[1].strip() for row in rows] == ["1"]
    assert "H100" in rows[0] and "A100" not in out.getvalue()
    assert "no SLURM job · GPUs 1" in out.getvalue()

    backend, _source = live_gpus()  # what the app's `m` watches
    try:
        assert [(d.index, d.name) for d in backend.devices()] == [(1, "NVIDIA H100 80GB HBM3")]
    finally:
        backend.close()

    lines = machine_lines(machine, None, 0.0, _gpu_memory_gib())
    assert lines[0] == "GPUs: 1 x NVIDIA H100 80GB HBM3 (80 GiB)   CUDA: yes"
