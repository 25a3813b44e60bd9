"""A `GpuBackend` that answers with canned readings, for monitor tests and screenshots.

Rounds are handed out one per `sample()` call; after the last, `sample()`
returns [] (a replay at its end) or, with `repeat_last=True`, the last round
again. Times come from the script, never the clock, so what is drawn is the
same on every run.
"""

from __future__ import annotations

import threading
from collections.abc import Sequence

from tuneup.hardware.types import GpuDevice, GpuProcess, GpuSample

H200_MB = 143_771.0  # what NVML reports for an H200, in MiB
START_TIME = 1_700_000_000.0


class ScriptedBackend:
    """Readings from a script: `rounds[i]` is what the i-th `sample()` returns."""

    name = "scripted"

    def __init__(
        self,
        devices: Sequence[GpuDevice],
        rounds: Sequence[Sequence[GpuSample]],
        *,
        unavailable: str | None = None,
        repeat_last: bool = False,
    ) -> None:
        self._devices = list(devices)
        self._rounds = [list(r) for r in rounds]
        self._unavailable = unavailable
        self._repeat_last = repeat_last
        self._lock = threading.Lock()
        self.calls = 0
        self.closed = False

    @classmethod
    def without_gpus(cls, reason: str = "NVML: driver not loaded") -> ScriptedBackend:
        """A machine with no usable NVIDIA driver."""
        return cls([], [], unavailable=reason)

    def available(self) -> tuple[bool, str]:
        if self._unavailable is not None:
            return False, self._unavailable
        return True, ""

    def devices(self) -> list[GpuDevice]:
        return [] if self._unavailable is not None else list(self._devices)

    def sample(self) -> list[GpuSample]:
        with self._lock:
            call = self.calls
            self.calls += 1
        if self._unavailable is not None or not self._rounds:
            return []
        if call < len(self._rounds):
            return list(self._rounds[call])
        return list(self._rounds[-1]) if self._repeat_last else []

    @property
    def exhausted(self) -> bool:
        """True once every scripted round has been handed out."""
        return self.calls >= len(self._rounds)

    def close(self) -> None:
        self.closed = True


def h200s(count: int) -> list[GpuDevice]:
    """`count` H200s as NVML describes them."""
    return [
        GpuDevice(
            index=i,
            name="NVIDIA H200",
            uuid=f"GPU-00000000-0000-0000-0000-00000000000{i}",
            bus_id=f"00000000:{0x19 + 0x10 * i:02X}:00.0",
            memory_total_mb=H200_MB,
            power_limit_w=700.0,
        )
        for i in range(count)
    ]


def busy_rounds(
    devices: Sequence[GpuDevice],
    count: int,
    *,
    start: float = START_TIME,
    step_s: float = 1.0,
) -> list[list[GpuSample]]:
    """`count` rounds of a training job warming up: load, memory and power rise with time.

    GPU 0 hits its power cap from the middle on; GPUs after the first have no
    energy counter and no PCIe readings (as on some boards), so the None
    paths are exercised too.
    """
    rounds = []
    for n in range(count):
        ramp = min(1.0, (n + 1) / max(count, 1))
        samples = []
        for device in devices:
            i = device.index
            first = i == 0
            util = round(30.0 + 60.0 * ramp - 5.0 * i, 1)
            power_w = round(150.0 + 500.0 * ramp - 20.0 * i, 1)
            capped = first and n >= count // 2
            samples.append(
                GpuSample(
                    index=i,
                    time=start + n * step_s,
                    util_gpu_pct=util,
                    util_mem_pct=round(util / 2, 1),
                    memory_used_mb=round(2_000.0 + 60_000.0 * ramp + 1_000.0 * i, 1),
                    memory_total_mb=device.memory_total_mb,
                    power_w=power_w,
                    power_limit_w=device.power_limit_w,
                    energy_mj=1_000_000.0 + n * 400_000.0 if first else None,
                    temperature_c=40.0 + 25.0 * ramp + i,
                    sm_clock_mhz=1_980.0 - (300.0 if capped else 0.0),
                    mem_clock_mhz=3_201.0,
                    throttle_reasons=("power_cap",) if capped else ("idle",) if n == 0 else (),
                    pcie_rx_kbs=1_200.0 if first else None,
                    pcie_tx_kbs=800.0 if first else None,
                    processes=(
                        GpuProcess(
                            pid=4_000 + i,
                            name="python",
                            used_memory_mb=round(1_500.0 + 60_000.0 * ramp, 1),
                        ),
                    ),
                )
            )
        rounds.append(samples)
    return rounds


def busy_backend(gpus: int = 2, rounds: int = 5, *, repeat_last: bool = False) -> ScriptedBackend:
    """`gpus` H200s going through `rounds` rounds of `busy_rounds`."""
    devices = h200s(gpus)
    return ScriptedBackend(devices, busy_rounds(devices, rounds), repeat_last=repeat_last)
