"""How a GPU reading reads as text, shared by the panels and the `--once` table.

Pure and Textual-free. A reading the GPU does not report (None) reads as a
dash, never as zero: zero watts and "no power sensor" are different facts.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence

from tuneup.hardware.types import NOT_THROTTLING, GpuDevice, GpuSample

MISSING = "–"
_MIB_PER_GIB = 1024.0


NO_GPU = "no NVIDIA GPU visible"


def no_gpu_message(reason: str) -> str:
    """The one line shown when no GPU can be read, e.g. reason "NVML: driver not loaded".

    A reason that already is such a line (the "none" backend's) is kept as it is.
    """
    if reason.startswith(NO_GPU):
        return reason
    return f"{NO_GPU} ({reason})" if reason else NO_GPU


def job_text(job_id: str | None, visible_gpus: Sequence[int] | None) -> str:
    """ "SLURM job 123 · GPUs 0,1": what the job may use, which is not always every GPU."""
    parts = [f"SLURM job {job_id}" if job_id else "no SLURM job"]
    if visible_gpus is not None:
        shown = ",".join(str(i) for i in visible_gpus) if visible_gpus else "none"
        parts.append(f"GPUs {shown}")
    return " · ".join(parts)


def pct(value: float | None) -> str:
    return MISSING if value is None else f"{value:.0f} %"


def memory(used_mb: float | None, total_mb: float | None) -> str:
    """Used/total in GiB, the unit `nvidia-smi` users compare against the card's size."""
    if used_mb is None:
        return MISSING
    used = used_mb / _MIB_PER_GIB
    if total_mb is None:
        return f"{used:.1f} GiB"
    return f"{used:.1f}/{total_mb / _MIB_PER_GIB:.1f} GiB"


def power(watts: float | None, limit_w: float | None) -> str:
    if watts is None:
        return MISSING
    if limit_w is None:
        return f"{watts:.0f} W"
    return f"{watts:.0f}/{limit_w:.0f} W"


def temperature(celsius: float | None) -> str:
    return MISSING if celsius is None else f"{celsius:.0f} °C"


def clock(mhz: float | None) -> str:
    return MISSING if mhz is None else f"{mhz:.0f} MHz"


def throttle_reasons(reasons: Iterable[str] | None) -> tuple[str, ...] | None:
    """The reasons that mean the GPU was slowed (idle and app clocks are not); None if unknown."""
    if reasons is None:
        return None
    return tuple(r for r in reasons if r not in NOT_THROTTLING)


def throttle(reasons: Iterable[str] | None) -> str:
    slowed = throttle_reasons(reasons)
    if slowed is None:
        return MISSING
    return ", ".join(slowed) if slowed else "none"


def gpu_title(device: GpuDevice) -> str:
    name = device.name or "unknown GPU"
    return f"GPU {device.index} · {name}"


def total_memory_mb(device: GpuDevice | None, sample: GpuSample | None) -> float | None:
    """The card's memory size: the sample's own when it has one, else the device's."""
    if sample is not None and sample.memory_total_mb is not None:
        return sample.memory_total_mb
    return device.memory_total_mb if device is not None else None


def power_limit_w(device: GpuDevice | None, sample: GpuSample | None) -> float | None:
    if sample is not None and sample.power_limit_w is not None:
        return sample.power_limit_w
    return device.power_limit_w if device is not None else None


def process_name(name: str | None, pid: int) -> str:
    return name if name else f"pid {pid}"


def process_rows(samples: Sequence[GpuSample]) -> list[tuple[str, str, str, str]]:
    """One row per process per GPU, the biggest memory users of each GPU first."""
    rows: list[tuple[int, float, tuple[str, str, str, str]]] = []
    for sample in samples:
        for proc in sample.processes:
            used = proc.used_memory_mb
            cells = (
                str(sample.index),
                str(proc.pid),
                process_name(proc.name, proc.pid),
                MISSING if used is None else f"{used:,.0f} MiB",
            )
            rows.append((sample.index, -(used or 0.0), cells))
    rows.sort(key=lambda r: (r[0], r[1], r[2][1]))
    return [cells for _, _, cells in rows]
