"""What GPUs did between two instants: the statistics of a probe's telemetry window.

Pure functions of `GpuSample` lists: no clock, no thread, no NVML. A reading
a GPU does not report (None) is skipped; a figure no reading supports is None.
"""

from __future__ import annotations

import dataclasses
import itertools
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from tuneup.hardware.types import NOT_THROTTLING, GpuSample


@dataclass(frozen=True)
class WindowStats:
    """GPU figures over a window, for one GPU (`window_stats`) or several (`combine`).

    Energy is for the whole window: the average power over the span the
    readings cover (energy counter difference, else trapezoid-integrated
    power), times the window's length, so sparse readings do not shrink it.
    """

    gpus: tuple[int, ...]
    start: float
    end: float
    samples: int = 0  # readings in the window
    util_mean_pct: float | None = None
    util_p95_pct: float | None = None
    mem_peak_mb: float | None = None
    power_mean_w: float | None = None
    energy_j: float | None = None
    energy_source: str | None = None  # "counter", "power" or "mixed" (combined GPUs)
    energy_j_per_sample: float | None = None
    sm_clock_min_mhz: float | None = None
    throttled: bool | None = None  # None when no reading reported throttle reasons
    throttled_fraction: float | None = None  # of the readings that reported reasons
    throttle_reasons: tuple[str, ...] = ()
    pids: tuple[int, ...] = ()  # compute processes seen on these GPUs

    @property
    def seconds(self) -> float:
        return self.end - self.start

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)


def window_stats(
    samples: Iterable[GpuSample],
    start: float,
    end: float,
    samples_processed: float | None = None,
) -> dict[int, WindowStats]:
    """Per-GPU figures for the readings with start <= time <= end.

    Args:
        samples: readings of any GPUs, in any order; each GPU seen gets an
            entry, with samples=0 and None figures when none fall inside.
        start, end: the window, in the readings' clock (epoch seconds).
        samples_processed: training samples processed in the window, for
            energy per sample; None leaves that figure None.
    """
    by_gpu: dict[int, list[GpuSample]] = {}
    for sample in samples:
        inside = by_gpu.setdefault(sample.index, [])
        if start <= sample.time <= end:
            inside.append(sample)
    return {
        index: _one_gpu(index, sorted(inside, key=lambda s: s.time), start, end, samples_processed)
        for index, inside in sorted(by_gpu.items())
    }


def combine(stats: Iterable[WindowStats]) -> WindowStats | None:
    """Several GPUs' figures as one job's: None when given none.

    Utilisation is averaged over the GPUs (each counts once), memory is the
    largest peak, power and energy are summed (the job's draw; unknown if any
    GPU's is), the clock is the lowest, and throttled is true if any GPU was.
    """
    parts = list(stats)
    if not parts:
        return None
    sources = {p.energy_source for p in parts}
    energies = [p.energy_j for p in parts]
    per_sample = [p.energy_j_per_sample for p in parts]
    flags = [p.throttled for p in parts if p.throttled is not None]
    fractions = [p.throttled_fraction for p in parts if p.throttled_fraction is not None]
    return WindowStats(
        gpus=tuple(g for p in parts for g in p.gpus),
        start=min(p.start for p in parts),
        end=max(p.end for p in parts),
        samples=sum(p.samples for p in parts),
        util_mean_pct=_mean([p.util_mean_pct for p in parts]),
        util_p95_pct=_mean([p.util_p95_pct for p in parts]),
        mem_peak_mb=_max([p.mem_peak_mb for p in parts]),
        power_mean_w=_sum_all([p.power_mean_w for p in parts]),
        energy_j=_sum_all(energies),
        energy_source=None
        if None in energies
        else (sources.pop() if len(sources) == 1 else "mixed"),
        # Every part divides by the same job-wide sample count, so the parts add up.
        energy_j_per_sample=_sum_all(per_sample),
        sm_clock_min_mhz=_min([p.sm_clock_min_mhz for p in parts]),
        throttled=any(flags) if flags else None,
        throttled_fraction=max(fractions) if fractions else None,
        throttle_reasons=tuple(sorted({r for p in parts for r in p.throttle_reasons})),
        pids=tuple(sorted({pid for p in parts for pid in p.pids})),
    )


def busiest(
    stats: Mapping[int, WindowStats], count: int | None, pid: int | None = None
) -> list[WindowStats]:
    """The `count` GPUs a job most likely ran on, for a node with more GPUs than the job used.

    GPUs listing the job's `pid` come first, then the higher mean
    utilisation, then the higher memory peak. count None (or at least the
    number of GPUs) keeps them all.
    """
    parts = list(stats.values())
    if count is None or count >= len(parts):
        return parts

    def rank(part: WindowStats) -> tuple[bool, float, float]:
        return (
            pid is not None and pid in part.pids,
            -1.0 if part.util_mean_pct is None else part.util_mean_pct,
            -1.0 if part.mem_peak_mb is None else part.mem_peak_mb,
        )

    chosen = sorted(parts, key=rank, reverse=True)[: max(count, 0)]
    return sorted(chosen, key=lambda p: p.gpus)


def percentile(values: Sequence[float], q: float) -> float:
    """The q-th percentile (0..100) of non-empty `values`, interpolating between ranks."""
    ordered = sorted(values)
    position = (len(ordered) - 1) * q / 100.0
    low = int(position)
    high = min(low + 1, len(ordered) - 1)
    return ordered[low] + (ordered[high] - ordered[low]) * (position - low)


def _one_gpu(
    index: int,
    inside: list[GpuSample],
    start: float,
    end: float,
    samples_processed: float | None,
) -> WindowStats:
    util = [s.util_gpu_pct for s in inside if s.util_gpu_pct is not None]
    power = [s.power_w for s in inside if s.power_w is not None]
    reported = [s.throttle_reasons for s in inside if s.throttle_reasons is not None]
    slowed = [tuple(r for r in reasons if r not in NOT_THROTTLING) for reasons in reported]
    energy, source = _energy(inside, end - start)
    per_sample = None
    if energy is not None and samples_processed is not None and samples_processed > 0:
        per_sample = energy / samples_processed
    return WindowStats(
        gpus=(index,),
        start=start,
        end=end,
        samples=len(inside),
        util_mean_pct=_mean(util),
        util_p95_pct=percentile(util, 95) if util else None,
        mem_peak_mb=_max([s.memory_used_mb for s in inside]),
        power_mean_w=_mean(power),
        energy_j=energy,
        energy_source=source,
        energy_j_per_sample=per_sample,
        sm_clock_min_mhz=_min([s.sm_clock_mhz for s in inside]),
        throttled=any(slowed) if reported else None,
        throttled_fraction=sum(1 for r in slowed if r) / len(slowed) if slowed else None,
        throttle_reasons=tuple(sorted({r for reasons in slowed for r in reasons})),
        pids=tuple(sorted({p.pid for s in inside for p in s.processes})),
    )


def _energy(inside: list[GpuSample], seconds: float) -> tuple[float | None, str | None]:
    """Joules over `seconds` from readings in time order, and which reading gave them."""
    if seconds < 0:
        return None, None
    counters = [s.energy_mj for s in inside if s.energy_mj is not None]
    span = inside[-1].time - inside[0].time if inside else 0.0
    if len(inside) >= 2 and span > 0 and len(counters) == len(inside):
        used_j = (counters[-1] - counters[0]) / 1000.0
        if used_j >= 0:  # a counter that went back was reset (driver reload): not usable
            return used_j / span * seconds, "counter"
    points = [(s.time, s.power_w) for s in inside if s.power_w is not None]
    if not points:
        return None, None
    if len(points) == 1 or points[-1][0] <= points[0][0]:
        average_w = sum(w for _, w in points) / len(points)  # no span to integrate over
    else:
        area = sum((t1 - t0) * (w0 + w1) / 2 for (t0, w0), (t1, w1) in itertools.pairwise(points))
        average_w = area / (points[-1][0] - points[0][0])
    return average_w * seconds, "power"


def _mean(values: Sequence[float | None]) -> float | None:
    known = [v for v in values if v is not None]
    return sum(known) / len(known) if known else None


def _max(values: Sequence[float | None]) -> float | None:
    known = [v for v in values if v is not None]
    return max(known) if known else None


def _min(values: Sequence[float | None]) -> float | None:
    known = [v for v in values if v is not None]
    return min(known) if known else None


def _sum_all(values: Sequence[float | None]) -> float | None:
    """The sum, or None when any part is unknown (a partial total would read as a low one)."""
    if not values or any(v is None for v in values):
        return None
    return sum(v for v in values if v is not None)
