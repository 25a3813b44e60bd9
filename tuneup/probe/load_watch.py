"""The host-load watch around a trainer's backend: each probe's load, judged as it ends.

Every probe gets the `Contention` of its window (its FULL trials, else its whole run):
what other processes took of the CPUs, whether that held steady with its neighbours'
(a steady load is measured through), and, where it came in bursts, whether the bursts
moved the probe's own trials. Once, after the first probe, the load it saw decides
whether later probes run on fewer threads (confine.py): that first probe is then
measured again, like every later one, on the confined count.
"""

from __future__ import annotations

import dataclasses
import threading
import time
from collections import deque
from typing import Any

from tuneup.probe.backend import Backend, ProbeBackend, as_backend
from tuneup.probe.confine import THREADS_KNOB, threads_for_load, threads_words
from tuneup.probe.events import Event, TrialEvent
from tuneup.probe.hostload import (
    STEADY_PROBES,
    STEAL_PCT,
    HostLoadSampler,
    burst_moved_nothing,
    steady_load,
    with_gpu_processes,
)
from tuneup.probe.types import Candidate, Contention, ProbeResult


class ContentionWatch(ProbeBackend):
    """Wraps a trainer backend: each result gets what else used the host while it was timed.

    The window is the probe's FULL phase when the worker's trial events say
    when it ran (`on_event`), else the probe's whole run (a `command` trainer).
    Other processes on the probe's GPUs, where telemetry found them, are kept.

    `running_threads` is the intra-op thread count a probe runs on when its config leaves
    it to torch (None: not known, and probes are never confined).
    """

    def __init__(
        self,
        backend: Backend | ProbeBackend,
        sampler: HostLoadSampler,
        running_threads: int | None = None,
    ) -> None:
        self.backend = as_backend(backend)
        self.sampler = sampler
        self.running_threads = running_threads
        self.confined: int | None = None  # the threads later probes run on (confine.py)
        self._decided = False
        self._lock = threading.Lock()
        self._full: list[tuple[float, float]] = []
        self._rates: list[tuple[tuple[float, float], float]] = []  # FULL trials: span, rate
        self._recent: deque[float] = deque(maxlen=STEADY_PROBES)  # ok probes' other CPUs

    def on_event(self, event: Event) -> None:
        """Remember FULL trial windows and rates (called from the runner's reader thread;
        never raises)."""
        if not isinstance(event, TrialEvent) or event.phase != "full":
            return
        span = event.span
        if span is not None:
            with self._lock:
                self._full.append(span)
                if event.samples_per_s is not None:
                    self._rates.append((span, event.samples_per_s))

    def _by_trial(self) -> list[tuple[float, float]]:
        """Each FULL trial of the probe just run: others' CPUs during it, its samples/s."""
        with self._lock:
            rates = list(self._rates)
        found = []
        for (start, end), rate in rates:
            held = self.sampler.contention(start, end)
            if held is not None and held.other_cpus is not None:
                found.append((held.other_cpus, rate))
        return found

    def __call__(self, stage: str, candidate: Candidate, values: dict[str, Any]) -> ProbeResult:
        with self._lock:
            self._full, self._rates = [], []
        self.sampler.sample()  # a reading at the very start, whatever the thread's phase
        began = time.time()
        result = self.backend(stage, candidate, values)
        ended = time.time()
        self.sampler.sample()
        if not result.ok:
            return result
        with self._lock:
            full = list(self._full)
        start, end = (min(s for s, _ in full), max(e for _, e in full)) if full else (began, ended)
        host = self.sampler.contention(start, end)
        if host is None or (result.contended and not host.contended):
            return result  # nothing read, or the backend's own note says more
        if result.contention is not None and result.contention.confined_threads:
            host = dataclasses.replace(host, confined_threads=result.contention.confined_threads)
        first = self._confine(values, host)
        gpu = result.contention.gpu_processes if result.contention is not None else None
        if host.other_cpus is not None:
            self._recent.append(host.other_cpus)
        cpus_only = not gpu and (host.steal_pct or 0.0) < STEAL_PCT
        if host.contended and cpus_only:
            steady = steady_load(list(self._recent), host.spread)
            host = dataclasses.replace(host, under_load=steady)
            unmoved = None if steady else burst_moved_nothing(self._by_trial(), host.usable_cpus)
            if unmoved is not None:  # measured through it: its trials say it moved nothing
                note = (
                    f"{host.note}; its trials under the bursts ({unmoved[0]:.1f} CPUs) ran "
                    f"as fast as those between ({100 * unmoved[1]:+.1f}%)"
                )
                host = dataclasses.replace(host, under_load=True, note=note)
        if first is not None:  # measured on torch's count; the rest on the confined one
            note = f"{first.note}; measured before tuneup confined its probes to {first.threads}"
            host = dataclasses.replace(host, under_load=False, note=note)
        return dataclasses.replace(
            result, contention=with_gpu_processes(host, gpu) if gpu else host
        )

    def _confine(self, values: dict[str, Any], seen: Contention) -> _Confined | None:
        """After the first probe: fewer threads for the later ones where the load its window
        saw holds cores torch's count needs, and the backend can apply it; what that probe
        saw when it does (None: nothing confined)."""
        if self._decided:
            return None
        self._decided = True
        running = self.running_threads
        if running is None or not seen.note or seen.other_cpus is None:
            return None
        if seen.gpu_processes or (seen.steal_pct or 0.0) >= STEAL_PCT:
            return None  # not a CPU load fewer threads could step around
        threads = threads_for_load(seen.other_cpus, seen.usable_cpus or running, running)
        if threads is None or not self.backend.confine_threads(threads):
            return None
        self.confined = threads
        torch_chose = not int(values.get(THREADS_KNOB) or 0)
        return _Confined(seen.note, threads_words(threads)) if torch_chose else None

    @property
    def limit_s(self) -> float | None:
        """The wrapped backend's per-probe limit, where it has its own."""
        return self.backend.limit_s

    def interrupt(self) -> None:
        self.backend.interrupt()

    def close(self) -> None:
        """Give back what the wrapped backend keeps between probes (a serving worker)."""
        self.backend.close()

    def replayed(self, stage: str, candidate: Candidate, values: dict[str, Any]) -> None:
        """Tell a backend that keeps count (the sim) that a journaled probe stood in for one."""
        self.backend.replayed(stage, candidate, values)


@dataclasses.dataclass(frozen=True)
class _Confined:
    note: str
    threads: str
