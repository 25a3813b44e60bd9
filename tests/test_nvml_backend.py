"""The NVML backend against the scripted fake pynvml, and one check on a real GPU."""

from __future__ import annotations

import dataclasses
import subprocess
import sys
from pathlib import Path

import pytest

from tuneup.hardware.backends import NoneBackend, choose_backend
from tuneup.hardware.nvml import NvmlBackend, decode_throttle_reasons, read_driver_facts
from tuneup.hardware.types import NOT_THROTTLING, GpuDevice, GpuProcess, GpuSample
from tuneup.testing import (
    NOT_SUPPORTED,
    FakeGpu,
    FakeNvml,
    FakeProcess,
    NVMLError_LibraryNotFound,
    counter,
)

POWER_CAP = FakeNvml.nvmlClocksEventReasonSwPowerCap
HW_THERMAL = FakeNvml.nvmlClocksEventReasonHwThermalSlowdown
IDLE = FakeNvml.nvmlClocksEventReasonGpuIdle


def backend(*gpus: FakeGpu, **kwargs: object) -> tuple[NvmlBackend, FakeNvml]:
    nvml = FakeNvml(devices=gpus)
    return NvmlBackend(nvml, clock=lambda: 1000.0, **kwargs), nvml  # type: ignore[arg-type]


def test_every_reading_reaches_the_sample_in_the_units_the_monitor_shows(tmp_path: Path) -> None:
    (tmp_path / "4242").mkdir()
    (tmp_path / "4242" / "comm").write_text("python\n")
    gpu = FakeGpu(
        name="NVIDIA H100",
        uuid="GPU-1234",
        bus_id="00000000:1B:00.0",
        util=87,
        util_mem=41,
        memory_used_mb=40960.5,
        memory_total_mb=81559.0,
        power_w=612.25,
        power_limit_w=700.0,
        energy_mj=123_456_789,
        temperature_c=71,
        sm_clock_mhz=1755,
        mem_clock_mhz=2619,
        throttle=POWER_CAP | HW_THERMAL,
        pcie_rx_kbs=2048,
        pcie_tx_kbs=512,
        processes=[FakeProcess(4242, 40000.0), FakeProcess(99999999, None)],
    )
    nvml_backend, _ = backend(gpu, proc_root=tmp_path)

    assert nvml_backend.available() == (True, "")
    assert nvml_backend.devices() == [
        GpuDevice(
            index=0,
            name="NVIDIA H100",
            uuid="GPU-1234",
            bus_id="00000000:1B:00.0",
            memory_total_mb=81559.0,
            power_limit_w=700.0,
        )
    ]
    [sample] = nvml_backend.sample()
    assert sample == GpuSample(
        index=0,
        time=1000.0,
        util_gpu_pct=87,
        util_mem_pct=41,
        memory_used_mb=40960.5,
        memory_total_mb=81559.0,
        power_w=612.25,
        power_limit_w=700.0,
        energy_mj=123_456_789,
        temperature_c=71,
        sm_clock_mhz=1755,
        mem_clock_mhz=2619,
        throttle_reasons=("sw_power_cap", "hw_thermal"),
        pcie_rx_kbs=2048,
        pcie_tx_kbs=512,
        processes=(
            GpuProcess(pid=4242, name="python", used_memory_mb=40000.0),
            GpuProcess(pid=99999999, name=None, used_memory_mb=None),
        ),
    )


def test_readings_move_on_between_samples() -> None:
    times = iter([10.0, 10.5, 11.0])
    nvml = FakeNvml(devices=[FakeGpu(util=[5, 60, 95], energy_mj=counter(1000.0, 250.0))])
    nvml_backend = NvmlBackend(nvml, clock=lambda: next(times))

    samples = [nvml_backend.sample()[0] for _ in range(3)]

    assert [s.time for s in samples] == [10.0, 10.5, 11.0]
    assert [s.util_gpu_pct for s in samples] == [5, 60, 95]
    assert [s.energy_mj for s in samples] == [1000.0, 1250.0, 1500.0]


def test_readings_a_gpu_does_not_support_are_none_and_do_not_touch_other_gpus() -> None:
    not_readings = {"lost_after", "lost", "calls", "_reads"}
    readings = [f.name for f in dataclasses.fields(FakeGpu) if f.name not in not_readings]
    bare = FakeGpu(**{reading: NOT_SUPPORTED for reading in readings})
    nvml_backend, _ = backend(FakeGpu(util=33), bare)

    full, empty = nvml_backend.sample()
    assert empty == GpuSample(index=1, time=1000.0)
    assert full.util_gpu_pct == 33 and full.power_w == 300.0
    assert nvml_backend.devices()[1] == GpuDevice(index=1)


def test_a_pynvml_without_the_newer_functions_still_reads_the_rest() -> None:
    nvml = FakeNvml(
        devices=[FakeGpu(throttle=POWER_CAP)],
        missing=("nvmlDeviceGetCurrentClocksEventReasons", "nvmlDeviceGetTotalEnergyConsumption"),
    )
    [sample] = NvmlBackend(nvml).sample()

    assert sample.throttle_reasons == ("sw_power_cap",)  # from the older "throttle" call
    assert sample.energy_mj is None
    assert sample.power_w == 300.0


def test_throttle_masks_decode_to_names_and_idle_is_not_throttling() -> None:
    assert decode_throttle_reasons(0) == ()
    assert decode_throttle_reasons(POWER_CAP | HW_THERMAL) == ("sw_power_cap", "hw_thermal")
    assert set(decode_throttle_reasons(IDLE)) <= NOT_THROTTLING
    assert decode_throttle_reasons(0x10000 | IDLE) == ("idle", "unknown_0x10000")


def test_a_gpu_lost_mid_run_gives_empty_samples_and_never_raises() -> None:
    nvml_backend, nvml = backend(FakeGpu(util=50), FakeGpu(util=70))
    before = nvml_backend.sample()
    assert [s.util_gpu_pct for s in before] == [50, 70]

    nvml.lose(1)
    for _ in range(3):
        alive, lost = nvml_backend.sample()
        assert lost == GpuSample(index=1, time=1000.0)
        assert alive.util_gpu_pct == 50


def test_a_gpu_lost_after_some_calls_never_raises() -> None:
    nvml_backend, nvml = backend(FakeGpu(lost_after=25, sm_active_pct=50, tensor_active_pct=20))
    samples = [nvml_backend.sample()[0] for _ in range(5)]

    assert nvml.devices[0].lost
    assert samples[0].util_gpu_pct == 50
    assert samples[-1] == GpuSample(index=0, time=1000.0)


def test_gpm_activity_appears_from_the_second_sample_where_the_gpu_has_gpm() -> None:
    nvml_backend, _ = backend(
        FakeGpu(sm_active_pct=[40.0, 65.0, 80.0], tensor_active_pct=[10.0, 30.0, 55.0]),
        FakeGpu(),  # no GPM (e.g. an A100)
    )
    rounds = [nvml_backend.sample() for _ in range(3)]

    assert [r[0].sm_active_pct for r in rounds] == [None, 65.0, 80.0]
    assert [r[0].tensor_active_pct for r in rounds] == [None, 30.0, 55.0]
    assert [r[1].sm_active_pct for r in rounds] == [None, None, None]


def test_close_shuts_nvml_down_and_frees_gpm_buffers() -> None:
    nvml_backend, nvml = backend(FakeGpu(sm_active_pct=50, tensor_active_pct=5))
    assert nvml.initialized == 0  # nothing touches NVML before it is needed
    nvml_backend.sample()
    assert nvml.initialized == 1

    gpm = nvml_backend._gpm[0]
    nvml_backend.close()

    assert nvml.initialized == 0
    assert gpm is not None and gpm.previous.freed and gpm.current.freed
    assert nvml_backend.sample() == []


def test_nvml_init_failure_gives_the_none_backend_with_the_reason() -> None:
    nvml = FakeNvml(devices=[FakeGpu()], init_error=NVMLError_LibraryNotFound)
    nvml_backend = NvmlBackend(nvml)

    assert nvml_backend.available() == (False, "NVML: NVML Shared Library Not Found")
    assert nvml_backend.devices() == [] and nvml_backend.sample() == []

    chosen = choose_backend(nvml_module=nvml)
    assert isinstance(chosen, NoneBackend)
    assert chosen.available() == (
        False,
        "no NVIDIA GPU visible (NVML: NVML Shared Library Not Found)",
    )
    assert chosen.devices() == [] and chosen.sample() == []


def test_missing_nvidia_ml_py_is_reported(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "pynvml", None)  # import pynvml -> ImportError
    ok, reason = NvmlBackend().available()
    assert not ok
    assert reason.startswith("NVML: ") and "nvidia-ml-py" in reason


def test_visible_restricts_the_watched_gpus() -> None:
    gpus = [FakeGpu(util=10 * i) for i in range(4)]
    nvml_backend = NvmlBackend(FakeNvml(devices=gpus), visible=[1, 3])

    assert [d.index for d in nvml_backend.devices()] == [1, 3]
    assert [(s.index, s.util_gpu_pct) for s in nvml_backend.sample()] == [(1, 10), (3, 30)]
    assert isinstance(choose_backend(visible=[1, 3], nvml_module=FakeNvml(gpus)), NvmlBackend)


def test_visible_gpus_that_do_not_exist_are_explained() -> None:
    nvml = FakeNvml(devices=[FakeGpu(), FakeGpu()])
    ok, reason = NvmlBackend(nvml, visible=[5]).available()
    assert not ok and "[5]" in reason and "2" in reason

    chosen = choose_backend(visible=[], nvml_module=FakeNvml(devices=[FakeGpu()]))
    assert isinstance(chosen, NoneBackend)
    assert "visible GPU list is empty" in chosen.available()[1]


def test_the_doctors_reading_lists_every_gpu_the_driver_has_not_only_the_watched() -> None:
    gpus = [FakeGpu(name=f"NVIDIA H100 #{i}") for i in range(4)]
    facts = NvmlBackend(FakeNvml(devices=gpus), visible=[1]).driver_facts()

    assert facts.error is None and facts.driver == "550.54.15" and facts.cuda_driver == "12.4"
    assert [(g.index, g.name) for g in facts.gpus] == [(i, f"NVIDIA H100 #{i}") for i in range(4)]


def test_a_lost_gpu_makes_the_doctors_reading_a_failure_not_a_healthy_node() -> None:
    nvml = FakeNvml(devices=[FakeGpu(), FakeGpu()])
    nvml.lose(1)
    facts = read_driver_facts(nvml)

    assert facts.gpus == () and facts.error is not None
    assert facts.error.startswith("NVML failed: NVMLError_GpuIsLost")
    assert nvml.initialized == 0  # started, read and shut down again


def test_no_driver_is_the_doctors_reading_with_the_reason() -> None:
    facts = read_driver_facts(FakeNvml(init_error=NVMLError_LibraryNotFound))

    assert facts.gpus == () and facts.error is not None and "NVML" in facts.error


def test_the_real_nvml_never_raises_on_this_machine() -> None:
    chosen = choose_backend()
    ok, reason = chosen.available()
    assert ok or reason.startswith("no NVIDIA GPU visible (NVML: ")
    assert len(chosen.sample()) == len(chosen.devices())
    chosen.close()


@pytest.mark.gpu
def test_a_real_gpu_reads_name_memory_and_power() -> None:
    nvml_backend = NvmlBackend()
    try:
        assert nvml_backend.available() == (True, "")
        device = nvml_backend.devices()[0]
        assert device.name and device.uuid and device.memory_total_mb
        sample = nvml_backend.sample()[0]
        assert sample.memory_used_mb is not None
        assert 0 <= sample.memory_used_mb <= device.memory_total_mb
        assert sample.util_gpu_pct is not None and 0 <= sample.util_gpu_pct <= 100
    finally:
        nvml_backend.close()


def test_importing_the_monitor_backends_loads_neither_torch_textual_nor_pynvml() -> None:
    code = (
        "import sys\n"
        "import tuneup.hardware.types, tuneup.hardware.nvml, tuneup.hardware.replay\n"
        "import tuneup.hardware.backends, tuneup.hardware.devices, tuneup.testing\n"
        "print(sorted(m for m in ('torch', 'textual', 'pynvml') if m in sys.modules))\n"
    )
    result = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True, timeout=60
    )
    assert result.stdout.strip() == "[]"
