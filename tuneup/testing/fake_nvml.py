"""A scripted stand-in for the `pynvml` module, so NVML code is tested without a GPU.

Pass a `FakeNvml` wherever a module with pynvml's API is expected (for
example `NvmlBackend(nvml_module=FakeNvml(...))`). Each `FakeGpu` holds its
readings in friendly units (MB, W, %); the fake converts them to what NVML
returns (bytes, mW, mJ, bitmasks).

A reading is one of:
  - a value: returned on every call;
  - a sequence: one item per call, the last repeated when it runs out;
  - a callable: called with the call number (0, 1, ...), e.g. `counter()`;
  - `NOT_SUPPORTED`: the call raises `NVMLError_NotSupported`, as on GPUs
    that lack the sensor.

Example:
    nvml = FakeNvml(devices=[
        FakeGpu(name="NVIDIA H100", util=[10, 90], power_w=[120.0, 650.0]),
        FakeGpu(name="NVIDIA A100", power_w=NOT_SUPPORTED, lost_after=20),
    ])
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any


class _NotSupported:
    def __repr__(self) -> str:
        return "NOT_SUPPORTED"


NOT_SUPPORTED: Any = _NotSupported()

_MIB = 2**20


def counter(start: float = 0.0, step: float = 1.0) -> Callable[[int], float]:
    """A reading that grows by `step` per call, like NVML's energy counter."""
    return lambda call: start + step * call


# NVML error classes, named as in pynvml (hence the underscores): one per error code.
class NVMLError(Exception):
    """Base of every fake NVML error; `value` is NVML's error code."""

    value = 999

    def __init__(self, value: int | None = None) -> None:
        if value is not None:
            self.value = value
        super().__init__(self._text())

    def _text(self) -> str:
        return _ERROR_TEXT.get(self.value, f"NVML Error with code {self.value}")


class NVMLError_Uninitialized(NVMLError):
    value = 1


class NVMLError_InvalidArgument(NVMLError):
    value = 2


class NVMLError_NotSupported(NVMLError):
    value = 3


class NVMLError_NoPermission(NVMLError):
    value = 4


class NVMLError_DriverNotLoaded(NVMLError):
    value = 9


class NVMLError_LibraryNotFound(NVMLError):
    value = 12


class NVMLError_FunctionNotFound(NVMLError):
    value = 13


class NVMLError_GpuIsLost(NVMLError):
    value = 15


_ERROR_TEXT = {
    1: "Uninitialized",
    2: "Invalid Argument",
    3: "Not Supported",
    4: "Insufficient Permissions",
    9: "Driver Not Loaded",
    12: "NVML Shared Library Not Found",
    13: "Function Not Found",
    15: "GPU is lost",
}


@dataclass
class FakeProcess:
    """A compute process as NVML lists it; `used_memory_mb` None is "not available"."""

    pid: int
    used_memory_mb: float | None = None


@dataclass
class FakeGpu:
    """One scripted GPU. Readings are in MB, W, mJ, %, MHz, KB/s (see the module doc)."""

    name: Any = "NVIDIA H100 80GB HBM3"
    uuid: Any = None  # None: "GPU-fake-<index>"
    bus_id: Any = None  # None: "00000000:<index+1>:00.0"
    util: Any = 50
    util_mem: Any = 20
    memory_used_mb: Any = 1024.0
    memory_total_mb: Any = 81559.0
    power_w: Any = 300.0
    power_limit_w: Any = 700.0
    energy_mj: Any = field(default_factory=lambda: counter(1_000_000.0, 150_000.0))
    temperature_c: Any = 45
    sm_clock_mhz: Any = 1980
    mem_clock_mhz: Any = 2619
    throttle: Any = 0  # a bitmask of nvmlClocksEventReason* bits
    pcie_rx_kbs: Any = 1000
    pcie_tx_kbs: Any = 500
    processes: Any = ()  # a sequence of FakeProcess (or a reading of them)
    mig: Any = False  # MIG mode (current); NOT_SUPPORTED on GPUs without MIG
    sm_active_pct: Any = NOT_SUPPORTED  # GPM; NOT_SUPPORTED: the GPU has no GPM
    tensor_active_pct: Any = NOT_SUPPORTED
    lost_after: int | None = None  # NVML calls on this GPU before it is lost
    lost: bool = False
    calls: int = 0  # NVML calls made on this GPU so far
    _reads: dict[str, int] = field(default_factory=dict, repr=False)

    def read(self, reading: str) -> Any:
        """The next value of one reading, raising NotSupported where it is scripted so."""
        script = getattr(self, reading)
        call = self._reads.get(reading, 0)
        self._reads[reading] = call + 1
        if callable(script):
            value = script(call)
        elif _is_script(reading, script):
            value = script[min(call, len(script) - 1)]
        else:
            value = script
        if value is NOT_SUPPORTED:
            raise NVMLError_NotSupported()
        return value

    def touch(self) -> None:
        """Count one NVML call on this GPU; raise GPU-is-lost once it is gone."""
        self.calls += 1
        if self.lost or (self.lost_after is not None and self.calls > self.lost_after):
            self.lost = True
            raise NVMLError_GpuIsLost()


@dataclass(frozen=True)
class _Handle:
    index: int


class _Struct:
    """An attribute bag standing in for pynvml's ctypes structures."""

    def __init__(self, **values: Any) -> None:
        self.__dict__.update(values)


class _GpmSample:
    def __init__(self) -> None:
        self.values: tuple[Any, Any] | None = None
        self.freed = False


class _GpmMetric:
    def __init__(self) -> None:
        self.metricId = 0
        self.nvmlReturn = 0
        self.value = 0.0


class c_nvmlGpmMetricsGet_t:
    """Stand-in for pynvml's GPM request structure."""

    def __init__(self) -> None:
        self.version = 0
        self.numMetrics = 0
        self.sample1: _GpmSample | None = None
        self.sample2: _GpmSample | None = None
        self.metrics = [_GpmMetric() for _ in range(8)]


# The module-level names, for annotations inside FakeNvml (whose attributes shadow them).
_NvmlError = NVMLError
_GpmRequest = c_nvmlGpmMetricsGet_t


class FakeNvml:
    """A pynvml-like module object over scripted GPUs.

    Args:
        devices: the GPUs, index 0 first.
        init_error: raised by nvmlInit (e.g. NVMLError_LibraryNotFound) to
            play a machine without a driver.
        missing: names of functions this "pynvml" lacks (an older release).
    """

    # The constants a caller reads from the module (pynvml's values).
    NVML_TEMPERATURE_GPU = 0
    NVML_CLOCK_SM = 1
    NVML_CLOCK_MEM = 2
    NVML_PCIE_UTIL_TX_BYTES = 0
    NVML_PCIE_UTIL_RX_BYTES = 1
    NVML_GPM_METRIC_SM_UTIL = 2
    NVML_GPM_METRIC_ANY_TENSOR_UTIL = 5
    NVML_GPM_METRICS_GET_VERSION = 1
    NVML_SUCCESS = 0
    nvmlClocksEventReasonGpuIdle = 0x1
    nvmlClocksEventReasonApplicationsClocksSetting = 0x2
    nvmlClocksEventReasonSwPowerCap = 0x4
    nvmlClocksEventReasonHwSlowdown = 0x8
    nvmlClocksEventReasonSyncBoost = 0x10
    nvmlClocksEventReasonSwThermalSlowdown = 0x20
    nvmlClocksEventReasonHwThermalSlowdown = 0x40
    nvmlClocksEventReasonHwPowerBrakeSlowdown = 0x80
    nvmlClocksEventReasonDisplayClockSetting = 0x100

    NVMLError = NVMLError
    NVMLError_Uninitialized = NVMLError_Uninitialized
    NVMLError_InvalidArgument = NVMLError_InvalidArgument
    NVMLError_NotSupported = NVMLError_NotSupported
    NVMLError_NoPermission = NVMLError_NoPermission
    NVMLError_DriverNotLoaded = NVMLError_DriverNotLoaded
    NVMLError_LibraryNotFound = NVMLError_LibraryNotFound
    NVMLError_FunctionNotFound = NVMLError_FunctionNotFound
    NVMLError_GpuIsLost = NVMLError_GpuIsLost
    c_nvmlGpmMetricsGet_t = c_nvmlGpmMetricsGet_t

    def __init__(
        self,
        devices: Sequence[FakeGpu] = (),
        *,
        init_error: type[_NvmlError] | _NvmlError | None = None,
        missing: Sequence[str] = (),
        driver: str = "550.54.15",
        cuda_driver: int = 12040,
    ) -> None:
        self.devices = list(devices)
        self.driver = driver
        self.cuda_driver = cuda_driver
        self.init_error = init_error
        self.missing = frozenset(missing)
        self.initialized = 0  # nvmlInit calls minus nvmlShutdown calls
        self.shutdowns = 0

    def __getattribute__(self, name: str) -> Any:
        if name.startswith("nvml") and name in object.__getattribute__(self, "missing"):
            raise AttributeError(f"module 'pynvml' has no attribute {name!r}")
        return object.__getattribute__(self, name)

    def lose(self, index: int) -> None:
        """Make GPU `index` fail every call from now on, as a GPU that fell off the bus."""
        self.devices[index].lost = True

    # -- library ---------------------------------------------------------------
    def nvmlInit(self) -> None:
        if self.init_error is not None:
            error = self.init_error
            raise error() if isinstance(error, type) else error
        self.initialized += 1

    def nvmlShutdown(self) -> None:
        self._check_init()
        self.initialized -= 1
        self.shutdowns += 1

    def nvmlDeviceGetCount(self) -> int:
        self._check_init()
        return len(self.devices)

    def nvmlDeviceGetHandleByIndex(self, index: int) -> _Handle:
        self._check_init()
        if not 0 <= index < len(self.devices):
            raise NVMLError_InvalidArgument()
        return _Handle(index)

    def nvmlSystemGetDriverVersion(self) -> str:
        self._check_init()
        return self.driver

    def nvmlSystemGetCudaDriverVersion(self) -> int:
        self._check_init()
        return self.cuda_driver

    def nvmlSystemGetNVMLVersion(self) -> str:
        self._check_init()
        return f"{self.cuda_driver // 1000}.{self.driver}"  # e.g. 12.550.54.15, as pynvml says

    # -- static ---------------------------------------------------------------
    def nvmlDeviceGetMigMode(self, handle: _Handle) -> tuple[int, int]:
        mode = int(bool(self._gpu(handle).read("mig")))
        return mode, mode

    def nvmlDeviceGetName(self, handle: _Handle) -> str:
        return self._gpu(handle).read("name")

    def nvmlDeviceGetUUID(self, handle: _Handle) -> str:
        gpu = self._gpu(handle)
        value = gpu.read("uuid")
        return f"GPU-fake-{handle.index:04d}" if value is None else value

    def nvmlDeviceGetPciInfo(self, handle: _Handle) -> _Struct:
        gpu = self._gpu(handle)
        value = gpu.read("bus_id")
        bus_id = f"00000000:{handle.index + 1:02X}:00.0" if value is None else value
        return _Struct(busId=bus_id, bus=handle.index + 1, domain=0, device=0)

    # -- readings ---------------------------------------------------------------
    def nvmlDeviceGetUtilizationRates(self, handle: _Handle) -> _Struct:
        gpu = self._gpu(handle)
        return _Struct(gpu=gpu.read("util"), memory=gpu.read("util_mem"))

    def nvmlDeviceGetMemoryInfo(self, handle: _Handle) -> _Struct:
        gpu = self._gpu(handle)
        used = round(gpu.read("memory_used_mb") * _MIB)
        total = round(gpu.read("memory_total_mb") * _MIB)
        return _Struct(used=used, total=total, free=total - used)

    def nvmlDeviceGetPowerUsage(self, handle: _Handle) -> int:
        return round(self._gpu(handle).read("power_w") * 1000)

    def nvmlDeviceGetEnforcedPowerLimit(self, handle: _Handle) -> int:
        return round(self._gpu(handle).read("power_limit_w") * 1000)

    def nvmlDeviceGetTotalEnergyConsumption(self, handle: _Handle) -> int:
        return round(self._gpu(handle).read("energy_mj"))

    def nvmlDeviceGetTemperature(self, handle: _Handle, sensor: int) -> int:
        if sensor != self.NVML_TEMPERATURE_GPU:
            raise NVMLError_InvalidArgument()
        return self._gpu(handle).read("temperature_c")

    def nvmlDeviceGetClockInfo(self, handle: _Handle, clock: int) -> int:
        readings = {self.NVML_CLOCK_SM: "sm_clock_mhz", self.NVML_CLOCK_MEM: "mem_clock_mhz"}
        if clock not in readings:
            raise NVMLError_InvalidArgument()
        return self._gpu(handle).read(readings[clock])

    def nvmlDeviceGetCurrentClocksEventReasons(self, handle: _Handle) -> int:
        return self._gpu(handle).read("throttle")

    def nvmlDeviceGetCurrentClocksThrottleReasons(self, handle: _Handle) -> int:
        return self._gpu(handle).read("throttle")

    def nvmlDeviceGetPcieThroughput(self, handle: _Handle, counter: int) -> int:
        readings = {
            self.NVML_PCIE_UTIL_RX_BYTES: "pcie_rx_kbs",
            self.NVML_PCIE_UTIL_TX_BYTES: "pcie_tx_kbs",
        }
        if counter not in readings:
            raise NVMLError_InvalidArgument()
        return self._gpu(handle).read(readings[counter])

    def nvmlDeviceGetComputeRunningProcesses(self, handle: _Handle) -> list[_Struct]:
        processes = self._gpu(handle).read("processes")
        return [
            _Struct(
                pid=p.pid,
                usedGpuMemory=None if p.used_memory_mb is None else round(p.used_memory_mb * _MIB),
            )
            for p in processes
        ]

    # -- GPM ----------------------------------------------------------------------
    def nvmlGpmQueryDeviceSupport(self, handle: _Handle) -> _Struct:
        gpu = self._gpu(handle)
        supported = gpu.sm_active_pct is not NOT_SUPPORTED
        return _Struct(version=1, isSupportedDevice=int(supported))

    def nvmlGpmSampleAlloc(self) -> _GpmSample:
        self._check_init()
        return _GpmSample()

    def nvmlGpmSampleFree(self, sample: _GpmSample) -> None:
        sample.freed = True

    def nvmlGpmSampleGet(self, handle: _Handle, sample: _GpmSample) -> _GpmSample:
        gpu = self._gpu(handle)
        if gpu.sm_active_pct is NOT_SUPPORTED:
            raise NVMLError_NotSupported()
        sample.values = (_soft_read(gpu, "sm_active_pct"), _soft_read(gpu, "tensor_active_pct"))
        return sample

    def nvmlGpmMetricsGet(self, request: _GpmRequest) -> _GpmRequest:
        # The real call computes rates between sample1 and sample2; the fake
        # reports the readings taken at sample2.
        self._check_init()
        if request.sample1 is None or request.sample2 is None or request.sample2.values is None:
            raise NVMLError_InvalidArgument()
        sm, tensor = request.sample2.values
        by_id = {self.NVML_GPM_METRIC_SM_UTIL: sm, self.NVML_GPM_METRIC_ANY_TENSOR_UTIL: tensor}
        for metric in request.metrics[: request.numMetrics]:
            value = by_id.get(metric.metricId, NOT_SUPPORTED)
            metric.nvmlReturn = 3 if value is NOT_SUPPORTED else 0
            metric.value = 0.0 if value is NOT_SUPPORTED else float(value)
        return request

    # -- helpers ------------------------------------------------------------------
    def _check_init(self) -> None:
        if self.initialized <= 0:
            raise NVMLError_Uninitialized()

    def _gpu(self, handle: _Handle) -> FakeGpu:
        self._check_init()
        gpu = self.devices[handle.index]
        gpu.touch()
        return gpu


def _is_script(reading: str, script: Any) -> bool:
    """Whether `script` is one value per call rather than one constant value."""
    if not isinstance(script, (list, tuple)) or not script:
        return False
    if reading == "processes":  # a constant is a list of processes; a script, a list of lists
        return not isinstance(script[0], FakeProcess)
    return True


def _soft_read(gpu: FakeGpu, reading: str) -> Any:
    try:
        return gpu.read(reading)
    except NVMLError_NotSupported:
        return NOT_SUPPORTED
