"""GPU telemetry joined to a probe: its FULL trials mark the window it comes from.

The worker stamps each `trial` event with the wall clock at the trial's end,
and the parent's sampler stamps GPU readings with the same clock, so the
FULL phase ran from (first trial's time - its seconds) to (last trial's time).
A probe that measured one phase alone (a stage's screen or pair: IO for a
loader knob, SYNTHETIC for a compute knob) is joined over that phase's trials.
"""

from __future__ import annotations

import threading
from collections.abc import Iterable, Sequence
from dataclasses import replace
from typing import Protocol

from tuneup.probe.events import Event, StartEvent, TrialEvent
from tuneup.probe.hostload import with_gpu_processes
from tuneup.probe.types import ProbeResult
from tuneup.telemetry.window import WindowStats, busiest, combine

THROTTLED_NOTE = "(throttled: noisy)"


class WindowSource(Protocol):
    """What the join needs from a sampler."""

    def window(
        self, start: float, end: float, samples_processed: float | None = None
    ) -> dict[int, WindowStats]: ...


def full_window(events: Iterable[Event]) -> tuple[float, float, float] | None:
    """(start, end, samples processed) of the FULL trials among `events` (of the one phase
    they hold, when none is FULL); None without any."""
    trials = [e for e in events if isinstance(e, TrialEvent)]
    full = [t for t in trials if t.phase == "full"]
    if not full and trials:
        full = [t for t in trials if t.phase == trials[-1].phase]
    spans = [(t, span) for t in full if (span := t.span) is not None]
    if not spans:
        return None
    start = min(span[0] for _, span in spans)
    end = max(span[1] for _, span in spans)
    processed = sum((t.samples_per_s or 0.0) * (t.seconds or 0.0) for t, _ in spans)
    return start, end, processed


class ProbeTelemetry:
    """Collects one probe's trial events and fills its result's GPU fields from the sampler.

    Call `reset()` before each probe, feed `on_event` every worker event (it
    is safe from the runner's reader thread and never raises), then
    `apply(result)` once the probe has ended, which returns the result joined.

    Args:
        sampler: the running sampler (anything with its `window`).
        gpus: the GPU indices the probes run on; None picks, per probe, as
            many GPUs as its `start` event's world_size, busiest first.
    """

    def __init__(self, sampler: WindowSource, gpus: Sequence[int] | None = None) -> None:
        self.sampler = sampler
        self.gpus = None if gpus is None else tuple(gpus)
        self._lock = threading.Lock()
        self._trials: list[TrialEvent] = []
        self._world_size: int | None = None
        self._pid: int | None = None

    def reset(self) -> None:
        with self._lock:
            self._trials = []
            self._world_size = None
            self._pid = None

    def on_event(self, event: Event) -> None:
        with self._lock:
            if isinstance(event, TrialEvent):
                self._trials.append(event)
            elif isinstance(event, StartEvent):
                size = event.world_size
                self._world_size = size if size is not None and size > 0 else None
                self._pid = event.pid

    def stats(self) -> WindowStats | None:
        """The probe's GPUs over its FULL phase (or its one phase), combined; None without
        trials or readings."""
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

    def apply(self, result: ProbeResult) -> ProbeResult:
        """An ok probe with its GPU fields (NVML's memory next to, never over, the allocator's).

        A throttled probe gets THROTTLED_NOTE on its reason: its timings
        carry the clock changes, not only the configuration. A failed probe,
        or one without FULL trials or readings, comes back as it was.
        """
        if not result.ok:
            return result
        stats = self.stats()
        if stats is None:
            return result
        contention = result.contention
        with self._lock:
            pid, size = self._pid, self._world_size
        if pid is not None and (size or 1) == 1:  # other ranks' pids are not known here
            others = [p for p in stats.pids if p != pid]
            contention = with_gpu_processes(result.contention, len(others))
        reason = result.reason
        if stats.throttled and THROTTLED_NOTE not in reason:
            reason = f"{reason} {THROTTLED_NOTE}".strip()
        return replace(
            result,
            gpu_util_mean=stats.util_mean_pct,
            power_mean_w=stats.power_mean_w,
            energy_j_per_sample=stats.energy_j_per_sample,
            gpu_mem_used_mb=stats.mem_peak_mb,
            throttled=stats.throttled,
            contention=contention,
            reason=reason,
        )
