"""Read NVIDIA GPUs through NVML (nvidia-ml-py).

Every NVML call goes through `NvmlBackend._call`, which turns "not
supported", any other NVML error and a function this pynvml release lacks
into None. So a reading a GPU does not have is None, a GPU that falls off
the bus mid-run gives samples with only its index and time, and a machine
without a driver gives zero GPUs: the monitor never sees an NVML exception.
`read_driver_facts` is the one-shot reading `tuneup doctor` makes: the
driver's versions and each GPU's name, memory and MIG mode.
"""

from __future__ import annotations

import contextlib
import importlib
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from tuneup.hardware.devices import VisibleGpus, parse_visible_devices
from tuneup.hardware.types import GpuDevice, GpuProcess, GpuSample

_MIB = 2**20  # NVML counts bytes; we report MB as nvidia-smi does (MiB)

# NVML's clock event ("throttle") reason bits, as in nvml.h. The bits are the
# driver's ABI, so the table does not depend on the pynvml release.
THROTTLE_REASON_BITS: tuple[tuple[int, str], ...] = (
    (0x001, "idle"),
    (0x002, "applications_clocks_setting"),
    (0x004, "sw_power_cap"),
    (0x008, "hw_slowdown"),
    (0x010, "sync_boost"),
    (0x020, "sw_thermal"),
    (0x040, "hw_thermal"),
    (0x080, "hw_power_brake"),
    (0x100, "display_clocks"),
    (0x200, "board_limit"),
    (0x400, "reliability"),
)


def decode_throttle_reasons(mask: int) -> tuple[str, ...]:
    """Names of the bits set in an NVML clock-reason mask; () when the clocks run free.

    Bits this table does not know appear as "unknown_0x...", so a newer
    driver's reason is shown rather than dropped.
    """
    names = [name for bit, name in THROTTLE_REASON_BITS if mask & bit]
    known = 0
    for bit, _ in THROTTLE_REASON_BITS:
        known |= bit
    if mask & ~known:
        names.append(f"unknown_{mask & ~known:#x}")
    return tuple(names)


def _number(value: Any, scale: float = 1.0) -> float | None:
    return None if value is None else float(value) / scale


def _text(value: Any) -> str | None:
    # Older nvidia-ml-py returns bytes.
    if value is None:
        return None
    return value.decode(errors="replace") if isinstance(value, bytes) else str(value)


@dataclass(frozen=True)
class DriverGpu:
    """One GPU as the driver lists it; None where NVML does not say."""

    index: int
    name: str | None = None
    memory_total_mb: float | None = None
    mig: bool | None = None  # MIG mode (current); None: the GPU has no MIG


@dataclass(frozen=True)
class DriverFacts:
    """What the driver says through NVML, with no CUDA context (as nvidia-smi reads it)."""

    gpus: tuple[DriverGpu, ...] = ()
    driver: str | None = None
    cuda_driver: str | None = None  # the newest CUDA the driver supports, e.g. "12.4"
    nvml_version: str | None = None
    error: str | None = None  # why NVML could not be read, in one line; None when it was


@dataclass
class _Gpm:
    """Two GPM sample buffers of one GPU; rates need a previous sample."""

    previous: Any
    current: Any
    primed: bool = False


class NvmlBackend:
    """GPU readings from NVML, for every GPU or only the visible ones.

    NVML is started lazily (on the first `available`, `devices`, `sample`
    or `selection`), never on import or construction.

    Args:
        nvml_module: a module with pynvml's API; `pynvml` is imported when
            None (tests pass `tuneup.testing.FakeNvml`).
        visible: NVML indices to watch; None watches all (or those of
            `cuda_visible_devices`).
        cuda_visible_devices: CUDA_VISIBLE_DEVICES' value, applied to NVML's
            GPUs by index or UUID (`tuneup.hardware.devices`); None: unset.
        clock: the samples' clock, epoch seconds.
        proc_root: where process names are read (`<proc_root>/<pid>/comm`).

    Raises:
        ValueError: both `visible` and `cuda_visible_devices` are given.
    """

    name = "nvml"

    def __init__(
        self,
        nvml_module: Any = None,
        visible: Sequence[int] | None = None,
        *,
        cuda_visible_devices: str | None = None,
        clock: Callable[[], float] = time.time,
        proc_root: Path = Path("/proc"),
    ) -> None:
        if visible is not None and cuda_visible_devices is not None:
            raise ValueError("watch GPUs by indices or by CUDA_VISIBLE_DEVICES, not both")
        self._nvml = nvml_module
        self._visible = None if visible is None else list(visible)
        self._cuda_visible = cuda_visible_devices
        self._selection = VisibleGpus(None)
        self._clock = clock
        self._proc_root = proc_root
        self._lock = threading.Lock()
        self._started = False
        self._initialized = False  # nvmlInit succeeded and nvmlShutdown is owed
        self._reason = ""
        self._failure: tuple[str, Exception] | None = None  # ("import" | "init", why)
        self._handles: list[tuple[int, Any]] = []
        self._devices: list[GpuDevice] | None = None
        self._gpm: dict[int, _Gpm | None] = {}

    # -- the one door to NVML ---------------------------------------------------
    def _call(self, function: str, *args: Any) -> Any:
        """`nvml.<function>(*args)`, or None when it is missing or raises an NVML error."""
        return self._attempt(function, *args)[0]

    def _attempt(self, function: str, *args: Any) -> tuple[Any, Exception | None]:
        """`_call`, also saying why there was no answer: (value, None) or (None, the error)."""
        nvml = self._nvml
        try:
            target = getattr(nvml, function)
        except AttributeError as exc:  # a pynvml release without this function
            return None, exc
        if target is None:
            return None, AttributeError(f"pynvml's {function} is None")
        error = getattr(nvml, "NVMLError", None) or Exception
        try:
            return target(*args), None
        except (error, AttributeError) as exc:
            return None, exc

    def _answer(self, function: str, *args: Any) -> Any:
        """`nvml.<function>(*args)` for a reading that must be there: its error is raised."""
        value, error = self._attempt(function, *args)
        if error is not None:
            raise error
        return value

    # -- GpuBackend ---------------------------------------------------------------
    def available(self) -> tuple[bool, str]:
        with self._lock:
            self._start()
            return (bool(self._handles), self._reason)

    def devices(self) -> list[GpuDevice]:
        if self._devices is not None:  # fixed once read: no wait behind a running sample()
            return list(self._devices)
        with self._lock:
            self._start()
            if self._devices is None:
                self._devices = [self._describe(i, h) for i, h in self._handles]
            return list(self._devices)

    def sample(self) -> list[GpuSample]:
        with self._lock:
            self._start()
            now = self._clock()
            return [self._read(index, handle, now) for index, handle in self._handles]

    def selection(self) -> VisibleGpus:
        """What CUDA_VISIBLE_DEVICES chose, with its note; every GPU when it was not given."""
        with self._lock:
            self._start()
            return self._selection

    def driver_facts(self) -> DriverFacts:
        """The driver's versions and every GPU it lists (not only the watched ones).

        Never raises. When NVML does not start, or a GPU does not give its
        count, handle or name (a GPU fallen off the bus), `error` says why in
        one line and the rest is empty: a node NVML cannot fully list is not
        described as healthy. Memory and MIG mode a GPU lacks are None.
        """
        with self._lock:
            try:
                return self._read_driver_facts()
            except Exception as exc:  # NVML, or a pynvml that breaks our reading of it
                return DriverFacts(error=f"NVML failed: {type(exc).__name__}: {exc}")

    def _read_driver_facts(self) -> DriverFacts:
        self._start()
        if not self._initialized:
            return DriverFacts(error=self._failure_text())
        driver = _text(self._call("nvmlSystemGetDriverVersion"))
        nvml_version = _text(self._call("nvmlSystemGetNVMLVersion"))
        cuda_driver = _cuda_version(self._call("nvmlSystemGetCudaDriverVersion"))
        count = self._answer("nvmlDeviceGetCount")
        gpus = tuple(self._driver_gpu(index) for index in range(count))
        return DriverFacts(gpus, driver, cuda_driver, nvml_version)

    def _driver_gpu(self, index: int) -> DriverGpu:
        handle = self._answer("nvmlDeviceGetHandleByIndex", index)
        memory = self._call("nvmlDeviceGetMemoryInfo", handle)
        mig = self._call("nvmlDeviceGetMigMode", handle)  # (current, pending)
        return DriverGpu(
            index=index,
            name=_text(self._answer("nvmlDeviceGetName", handle)),
            memory_total_mb=_number(getattr(memory, "total", None), _MIB),
            mig=None if mig is None else bool(mig[0]),
        )

    def _failure_text(self) -> str:
        if self._failure is None:
            return self._reason or "NVML: not started"
        stage, exc = self._failure
        if stage == "import":
            return f"nvidia-ml-py does not import: {exc}"
        return f"NVML did not start ({type(exc).__name__}): no driver here?"

    def close(self) -> None:
        with self._lock:
            for gpm in self._gpm.values():
                if gpm is not None:
                    self._call("nvmlGpmSampleFree", gpm.previous)
                    self._call("nvmlGpmSampleFree", gpm.current)
            self._gpm.clear()
            if self._initialized:
                self._call("nvmlShutdown")
                self._initialized = False
            self._handles = []
            self._devices = None
            self._started = True
            self._reason = self._reason or "NVML: closed"

    # -- start-up -------------------------------------------------------------------
    def _start(self) -> None:
        if self._started:
            return
        self._started = True
        if self._nvml is None:
            try:
                # Imported on first use: a machine without the driver's library still starts.
                self._nvml = importlib.import_module("pynvml")
            except ImportError as exc:
                self._failure = ("import", exc)
                self._reason = "NVML: nvidia-ml-py is not installed (pip install nvidia-ml-py)"
                return
            except Exception as exc:  # a broken install: still "no NVML", never a crash
                self._failure = ("import", exc)
                self._reason = f"NVML: nvidia-ml-py does not import: {exc}"
                return
        try:
            self._nvml.nvmlInit()
        except Exception as exc:  # no library, no driver, no permission: all mean "no NVML"
            self._failure = ("init", exc)
            self._reason = f"NVML: {exc or type(exc).__name__}"
            return
        self._initialized = True
        count = self._call("nvmlDeviceGetCount")
        if not count:
            self._reason = "NVML: no GPU found"
            return
        wanted = self._visible
        if self._cuda_visible is not None:
            self._selection = parse_visible_devices(self._cuda_visible, self._uuids(count))
            watched = self._selection.watched
            wanted = None if watched is None else list(watched)
        for index in range(count) if wanted is None else wanted:
            handle = self._call("nvmlDeviceGetHandleByIndex", index) if index < count else None
            if handle is not None:
                self._handles.append((index, handle))
        if not self._handles:
            self._reason = self._none_selected(wanted, count)

    def _uuids(self, count: int) -> list[str]:
        """Each GPU's UUID in NVML's order; "" where NVML does not say."""
        uuids = []
        for index in range(count):
            handle = self._call("nvmlDeviceGetHandleByIndex", index)
            uuid = None if handle is None else self._call("nvmlDeviceGetUUID", handle)
            uuids.append(_text(uuid) or "")
        return uuids

    def _none_selected(self, wanted: list[int] | None, count: int) -> str:
        if wanted:
            return (
                f"NVML: none of the selected GPUs {wanted} exists "
                f"(this machine has {count}: indices 0-{count - 1})"
            )
        why = self._selection.note or "the visible GPU list is empty"
        return f"NVML: no GPU selected ({why})"

    # -- readings --------------------------------------------------------------------
    def _describe(self, index: int, handle: Any) -> GpuDevice:
        memory = self._call("nvmlDeviceGetMemoryInfo", handle)
        pci = self._call("nvmlDeviceGetPciInfo", handle)
        return GpuDevice(
            index=index,
            name=_text(self._call("nvmlDeviceGetName", handle)),
            uuid=_text(self._call("nvmlDeviceGetUUID", handle)),
            bus_id=_text(getattr(pci, "busId", None)),
            memory_total_mb=_number(getattr(memory, "total", None), _MIB),
            power_limit_w=_number(self._call("nvmlDeviceGetEnforcedPowerLimit", handle), 1000),
        )

    def _read(self, index: int, handle: Any, now: float) -> GpuSample:
        nvml = self._nvml
        call = self._call
        util = call("nvmlDeviceGetUtilizationRates", handle)
        memory = call("nvmlDeviceGetMemoryInfo", handle)
        reasons = call("nvmlDeviceGetCurrentClocksEventReasons", handle)
        if reasons is None:  # pynvml and drivers before 12.2 name it "throttle"
            reasons = call("nvmlDeviceGetCurrentClocksThrottleReasons", handle)
        sm_active, tensor_active = self._read_gpm(index, handle)
        return GpuSample(
            index=index,
            time=now,
            util_gpu_pct=_number(getattr(util, "gpu", None)),
            util_mem_pct=_number(getattr(util, "memory", None)),
            memory_used_mb=_number(getattr(memory, "used", None), _MIB),
            memory_total_mb=_number(getattr(memory, "total", None), _MIB),
            power_w=_number(call("nvmlDeviceGetPowerUsage", handle), 1000),
            power_limit_w=_number(call("nvmlDeviceGetEnforcedPowerLimit", handle), 1000),
            energy_mj=_number(call("nvmlDeviceGetTotalEnergyConsumption", handle)),
            temperature_c=_number(
                call("nvmlDeviceGetTemperature", handle, getattr(nvml, "NVML_TEMPERATURE_GPU", 0))
            ),
            sm_clock_mhz=_number(
                call("nvmlDeviceGetClockInfo", handle, getattr(nvml, "NVML_CLOCK_SM", 1))
            ),
            mem_clock_mhz=_number(
                call("nvmlDeviceGetClockInfo", handle, getattr(nvml, "NVML_CLOCK_MEM", 2))
            ),
            throttle_reasons=None if reasons is None else decode_throttle_reasons(int(reasons)),
            pcie_rx_kbs=_number(
                call(
                    "nvmlDeviceGetPcieThroughput",
                    handle,
                    getattr(nvml, "NVML_PCIE_UTIL_RX_BYTES", 1),
                )
            ),
            pcie_tx_kbs=_number(
                call(
                    "nvmlDeviceGetPcieThroughput",
                    handle,
                    getattr(nvml, "NVML_PCIE_UTIL_TX_BYTES", 0),
                )
            ),
            sm_active_pct=sm_active,
            tensor_active_pct=tensor_active,
            processes=self._processes(handle),
        )

    def _processes(self, handle: Any) -> tuple[GpuProcess, ...]:
        found = self._call("nvmlDeviceGetComputeRunningProcesses", handle) or ()
        return tuple(
            GpuProcess(
                pid=int(p.pid),
                name=self._process_name(int(p.pid)),
                used_memory_mb=_number(getattr(p, "usedGpuMemory", None), _MIB),
            )
            for p in found
        )

    def _process_name(self, pid: int) -> str | None:
        # PIDs from NVML are the host's: in a container without the host PID
        # namespace the name may be missing (None), which is fine.
        try:
            return (self._proc_root / str(pid) / "comm").read_text().strip() or None
        except (OSError, UnicodeDecodeError):
            return None

    def _read_gpm(self, index: int, handle: Any) -> tuple[float | None, float | None]:
        """SM and tensor activity over the last interval, on GPUs with GPM (Hopper on)."""
        if index not in self._gpm:
            support = self._call("nvmlGpmQueryDeviceSupport", handle)
            previous = current = None
            if getattr(support, "isSupportedDevice", 0):
                previous = self._call("nvmlGpmSampleAlloc")
                current = self._call("nvmlGpmSampleAlloc")
            ok = previous is not None and current is not None
            self._gpm[index] = _Gpm(previous, current) if ok else None
        gpm = self._gpm[index]
        if gpm is None or self._call("nvmlGpmSampleGet", handle, gpm.current) is None:
            return None, None
        values: tuple[float | None, float | None] = (None, None)
        if gpm.primed:
            values = self._gpm_metrics(gpm)
        gpm.previous, gpm.current, gpm.primed = gpm.current, gpm.previous, True
        return values

    def _gpm_metrics(self, gpm: _Gpm) -> tuple[float | None, float | None]:
        nvml = self._nvml
        request = self._call("c_nvmlGpmMetricsGet_t")
        if request is None:
            return None, None
        wanted = (
            getattr(nvml, "NVML_GPM_METRIC_SM_UTIL", 2),
            getattr(nvml, "NVML_GPM_METRIC_ANY_TENSOR_UTIL", 5),
        )
        try:
            request.version = getattr(nvml, "NVML_GPM_METRICS_GET_VERSION", 1)
            request.numMetrics = len(wanted)
            request.sample1 = gpm.previous
            request.sample2 = gpm.current
            for slot, metric_id in enumerate(wanted):
                request.metrics[slot].metricId = metric_id
        except (TypeError, ValueError, AttributeError, IndexError):
            return None, None  # a pynvml whose GPM structure differs: GPM is best effort
        if self._call("nvmlGpmMetricsGet", request) is None:
            return None, None
        sm, tensor = (
            float(m.value) if m.nvmlReturn == 0 else None for m in request.metrics[: len(wanted)]
        )
        return sm, tensor


def read_driver_facts(nvml_module: Any = None) -> DriverFacts:
    """The driver's versions and every GPU NVML lists; NVML failing is a fact, never a crash.

    NVML is started, read and shut down again.

    Args:
        nvml_module: a module with pynvml's API; `pynvml` is imported when None.
    """
    backend = NvmlBackend(nvml_module)
    try:
        return backend.driver_facts()
    finally:
        with contextlib.suppress(Exception):  # a failed shutdown does not undo the reading
            backend.close()


def _cuda_version(value: Any) -> str | None:
    """NVML's CUDA driver version (12040) as text ("12.4"); None when NVML did not say."""
    if not value:
        return None
    version = int(value)
    return f"{version // 1000}.{version % 1000 // 10}"
