"""Pick the GPU backend: a replayed trace, NVML, or "none" with the reason."""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from tuneup.hardware.nvml import NvmlBackend
from tuneup.hardware.replay import ReplayBackend
from tuneup.hardware.types import GpuBackend, GpuDevice, GpuSample


class NoneBackend:
    """No GPU to read: zero devices and a reason to show, never an error."""

    name = "none"

    def __init__(self, reason: str) -> None:
        self.reason = reason

    def available(self) -> tuple[bool, str]:
        return (False, self.reason)

    def devices(self) -> list[GpuDevice]:
        return []

    def sample(self) -> list[GpuSample]:
        return []

    def close(self) -> None:
        pass


def choose_backend(
    replay: Path | None = None,
    visible: Sequence[int] | None = None,
    *,
    cuda_visible_devices: str | None = None,
    nvml_module: Any = None,
    clock: Callable[[], float] = time.time,
) -> GpuBackend:
    """The backend for this run: the `replay` trace when given, else NVML when it
    sees a GPU, else a NoneBackend saying why.

    Args:
        replay: a trace recorded with `--record` (malformed: UsageError).
        visible: NVML indices to watch; None watches every GPU (or those of
            `cuda_visible_devices`).
        cuda_visible_devices: CUDA_VISIBLE_DEVICES' value (see
            `tuneup.hardware.devices.cuda_visible_devices`), applied to NVML's GPUs.
        nvml_module: a pynvml stand-in for tests.
        clock: the NVML samples' clock.
    """
    if replay is not None:
        return ReplayBackend(replay)
    nvml = NvmlBackend(nvml_module, visible, cuda_visible_devices=cuda_visible_devices, clock=clock)
    ok, reason = nvml.available()
    if ok:
        return nvml
    nvml.close()
    return NoneBackend(f"no NVIDIA GPU visible ({reason})")
