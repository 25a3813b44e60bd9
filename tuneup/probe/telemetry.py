"""GPU telemetry joined to a probe: the FULL phase's trials mark the window it comes from.

The worker stamps each `trial` event with the wall clock at the trial's end,
and the parent's sampler stamps GPU readings with the same clock, so the
FULL phase ran from (first trial's time - its seconds) to (last trial's time).
"""

from __future__ import annotations

import threading
from collections.abc import Iterable, Mapping, Sequence
from typing import Any, Protocol

from tuneup.monitor.window import WindowStats, busiest, combine
from tuneup.probe.hostload import with_gpu_processes
from tuneup.probe.types import ProbeResult

THROTTLED_NOTE = "(throttled: noisy)"


class WindowSource(Protocol):
    """What the join needs from a sampler."""

    def window(
        self, start: float, end: float, samples_processed: float | None = None
    ) -> dict[int, WindowStats]: ...


def full_window(trials: Iterable[Mapping[str, Any]]) -> tuple[float, float, float] | None:
    """(start, end, samples processed) of the FULL trials among `trials`; None without any."""
    full = [t for t in trials if t.get("phase") == "full" and _times(t) is not None]
    if not full:
        return None
    spans = [_times(t) for t in full]
    start = min(s[0] for s in spans if s is not None)
    end = max(s[1] for s in spans if s is not None)
    processed = sum(_number(t.get("samples_per_s")) * _number(t.get("seconds")) for t in full)
    return start, end, processed


class ProbeTelemetry:
    """Collects one probe's trial events and fills its result's GPU fields from the sampler.

    Call `reset()` before each probe, feed `on_event` every worker event (it
    is safe from the runner's reader thread and never raises), then
    `apply(result)` once the probe has ended.

    Args:
        sampler: the running sampler (anything with its `window`).
        gpus: the GPU indices the probes run on; None picks, per probe, as
            many GPUs as its `start` event's world_size, busiest first.
    """

    def __init__(self, sampler: WindowSource, gpus: Sequence[int] | None = None) -> None:
        self.sampler = sampler
        self.gpus = None if gpus is None else tuple(gpus)
        self._lock = threading.Lock()
        self._trials: list[dict[str, Any]] = []
        self._world_size: int | None = None
        self._pid: int | None = None

    def reset(self) -> None:
        with self._lock:
            self._trials = []
            self._world_size = None
            self._pid = None

    def on_event(self, event: Mapping[str, Any]) -> None:
        kind = event.get("event")
        with self._lock:
            if kind == "trial" and event.get("phase") == "full":
                self._trials.append(dict(event))
            elif kind == "start":
                size, pid = event.get("world_size"), event.get("pid")
                self._world_size = size if isinstance(size, int) and size > 0 else None
                self._pid = pid if isinstance(pid, int) else None

    def stats(self) -> WindowStats | None:
        """The probe's GPUs over its FULL phase, combined; None without FULL trials or readings."""
        with self._lock:
            trials, size, pid = list(self._trials), self._world_size, self._pid
        window = full_window(trials)
        if window is None:
            return None
        start, end, processed = window
        per_gpu = self.sampler.window(start, end, processed if processed > 0 else None)
        if self.gpus is not None:
            chosen = [per_gpu[i] for i in self.gpus if i in per_gpu]
        else:
            chosen = busiest(per_gpu, size, pid)
        stats = combine(chosen)
        return stats if stats is not None and stats.samples > 0 else None

    def apply(self, result: ProbeResult) -> WindowStats | None:
        """Fill an ok probe's GPU fields (NVML's memory next to, never over, the allocator's).

        A throttled probe gets THROTTLED_NOTE on its reason: its timings
        carry the clock changes, not only the configuration.
        """
        if not result.ok:
            return None
        stats = self.stats()
        if stats is None:
            return None
        result.gpu_util_mean = stats.util_mean_pct
        result.power_mean_w = stats.power_mean_w
        result.energy_j_per_sample = stats.energy_j_per_sample
        result.gpu_mem_used_mb = stats.mem_peak_mb
        result.throttled = stats.throttled
        with self._lock:
            pid, size = self._pid, self._world_size
        if pid is not None and (size or 1) == 1:  # other ranks' pids are not known here
            others = [p for p in stats.pids if p != pid]
            result.contention = with_gpu_processes(result.contention, len(others))
        if stats.throttled and THROTTLED_NOTE not in result.reason:
            result.reason = f"{result.reason} {THROTTLED_NOTE}".strip()
        return stats


def _times(trial: Mapping[str, Any]) -> tuple[float, float] | None:
    end, seconds = trial.get("time"), trial.get("seconds")
    if _is_number(end) and _is_number(seconds) and seconds >= 0:
        return float(end) - float(seconds), float(end)
    return None


def _is_number(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def _number(value: Any) -> float:
    return float(value) if _is_number(value) else 0.0
