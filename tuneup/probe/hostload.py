"""Who else is using the machine while a probe is timed: CPU time that is not tuneup's.

A probe's numbers are only as good as the machine was quiet. The kernel
counts every CPU's busy time (/proc/stat) and every process's CPU time
(/proc/PID/stat); the busy time on the CPUs tuneup may use, minus the time
tuneup and everything it started used (its processes' own time plus that of
their children already reaped), is what other processes took. /proc/stat's
`steal` column is what the hypervisor gave to other guests of a shared VM.

Pure: parsing (`parse_cpu_times`), the arithmetic between two readings
(`between`), the verdict (`contention_note`) and whether a load held steady
(`steady_load`). Side effects: `read_host` reads /proc, and `HostLoadSampler`
does so from a thread every half second, keeping which other processes took
the CPU time (`busiest`). `load_watch.ContentionWatch` joins a probe's window
(its FULL trials, else its whole run) to the readings and puts a `Contention` on
its result. Off Linux (no /proc) nothing is read and no probe is ever called
contended.

A steady load (two busy loops beside the ladder, a neighbour's long job) slows
both probes of an interleaved pair alike, so they still compare fairly: a
contended probe whose load matched its neighbours' and held steady within its
window is kept, marked `under_load`, and every verdict it enters says so. A
bursty load does not slow a pair alike: such a probe stays contended, and the
search measures it again (within its bounds, tuning/search/load.py).
"""

from __future__ import annotations

import dataclasses
import os
import statistics
import threading
import time
from collections import deque
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from tuneup.cluster.proctree import PROC, descendants, read_processes
from tuneup.probe.types import Contention, ProbeResult

# Other processes taking this share of the usable CPUs (and at least half a CPU)
# slow a probe that needs them all: its figures say more about them than about it.
OTHER_CPU_SHARE = 0.25
OTHER_CPU_MIN = 0.5
STEAL_PCT = 10.0  # hypervisor steal above this: the VM's neighbours were busy
MIN_WINDOW_S = 0.4  # a shorter window has too few clock ticks to judge
# A load is steady when its figure over a probe and its neighbours (STEADY_PROBES in all,
# two at the start), and its per-second figures within the probe's window, stay within a
# band of STEADY_BAND CPUs or STEADY_SHARE of the load, whichever is wider: the share
# other processes get moves a little with tuneup's own demand (one loader worker or
# two) even when theirs is constant.
STEADY_PROBES = 3
STEADY_BAND = 0.5
STEADY_SHARE = 0.35
SPREAD_STEP_S = 1.0  # per-second figures: readings grouped over at least this long
SPREAD_CONTEXT_S = 3.0  # a shorter window's spread is read over the seconds up to its end
BUSIEST = 3  # other processes named in a note


@dataclass(frozen=True)
class CpuTimes:
    """Clock ticks of a set of CPUs since boot: busy (not idle, iowait or steal), steal, all."""

    busy: int
    steal: int
    total: int


@dataclass(frozen=True)
class HostReading:
    """One reading: when, the usable CPUs' ticks, and the ticks of tuneup's process tree.

    `tasks` is every other process's CPU ticks as read ((pid, start) -> (name, ticks));
    the sampler turns it into `others`, the ticks each name took since the reading before,
    and keeps only that.
    """

    time: float
    cpus: CpuTimes
    own_ticks: int
    own_pids: frozenset[int] = frozenset()
    tasks: Mapping[tuple[int, int], tuple[str, int]] | None = field(default=None, repr=False)
    others: Mapping[str, int] = field(default_factory=dict)


def parse_cpu_times(text: str, cpus: Iterable[int] | None = None) -> CpuTimes | None:
    """The `cpuN` lines of /proc/stat for `cpus` (None: the all-CPU `cpu` line), summed.

    Columns (proc(5)): user nice system idle iowait irq softirq steal guest
    guest_nice; guest time is already inside user and nice.
    """
    wanted = None if cpus is None else {f"cpu{c}" for c in cpus}
    busy = steal = total = 0
    found = False
    for line in text.splitlines():
        name, _, rest = line.partition(" ")
        if not name.startswith("cpu") or (wanted is None) != (name == "cpu"):
            continue
        if wanted is not None and name not in wanted:
            continue
        try:
            cols = [int(x) for x in rest.split()]
        except ValueError:
            continue
        cols += [0] * (10 - len(cols))
        user, nice, system, idle, iowait, irq, softirq, stolen = cols[:8]
        busy += user + nice + system + irq + softirq
        steal += stolen
        total += user + nice + system + idle + iowait + irq + softirq + stolen
        found = True
    return CpuTimes(busy, steal, total) if found else None


def between(
    first: HostReading, last: HostReading, usable: int, hz: float
) -> tuple[float, float | None, float] | None:
    """(CPUs' worth other processes used, steal %, seconds) between two readings."""
    seconds = last.time - first.time
    if seconds < MIN_WINDOW_S or hz <= 0:
        return None
    busy = (last.cpus.busy - first.cpus.busy) / hz / seconds
    own = (last.own_ticks - first.own_ticks) / hz / seconds
    other = min(float(usable), max(0.0, busy - own))
    total = last.cpus.total - first.cpus.total
    steal = 100.0 * (last.cpus.steal - first.cpus.steal) / total if total > 0 else None
    return other, steal, seconds


def contention_note(
    other_cpus: float | None,
    usable: int | None,
    steal_pct: float | None,
    gpu_processes: int | None,
) -> str:
    """Why a probe counts as contended, in words; empty when nothing else was in its way."""
    parts = []
    if (
        other_cpus is not None
        and usable
        and other_cpus >= max(OTHER_CPU_MIN, OTHER_CPU_SHARE * usable)
    ):
        parts.append(f"other processes used {other_cpus:.1f} of {usable} CPUs")
    if steal_pct is not None and steal_pct >= STEAL_PCT:
        parts.append(f"the hypervisor gave {steal_pct:.0f}% of the CPU time to other guests")
    if gpu_processes:
        parts.append(f"{gpu_processes} other process(es) ran on the probe's GPU")
    return "; ".join(parts)


def with_gpu_processes(contention: Contention | None, count: int) -> Contention:
    """The contention with the other processes seen on the probe's GPUs added (another
    process on the probe's GPU is never a steady load: the GPU is not shared fairly)."""
    base = contention or Contention()
    note = contention_note(base.other_cpus, base.usable_cpus, base.steal_pct, count)
    steady = base.under_load and not count
    return dataclasses.replace(base, gpu_processes=count, note=note, under_load=steady)


BURST_SAME = 0.03  # trials under a burst within this of those between: the burst moved none
BURST_TRIALS = 2  # the fewest trials on each side of that comparison


def burst_moved_nothing(
    trials: Sequence[tuple[float, float]], usable: int | None
) -> tuple[float, float] | None:
    """Judged on the probe's own step times, not on the load's share of the CPUs: its
    FULL trials, each (others' CPUs during it, its samples/s), split into those a burst
    overlapped and those between bursts; where each side has BURST_TRIALS and their
    medians agree within BURST_SAME, the load moved none of them: (the bursts' CPUs, the
    two medians' ratio less 1). None where it cannot say (a load over every trial: its
    steadiness decides) or the bursts slowed the trials."""
    if not usable:
        return None
    floor = max(OTHER_CPU_MIN, OTHER_CPU_SHARE * usable)
    loaded = [(cpus, rate) for cpus, rate in trials if cpus >= floor]
    quiet = [rate for cpus, rate in trials if cpus < floor / 2]
    if len(loaded) < BURST_TRIALS or len(quiet) < BURST_TRIALS:
        return None
    moved = statistics.median(r for _, r in loaded) / statistics.median(quiet) - 1.0
    if abs(moved) > BURST_SAME:
        return None
    return statistics.median(c for c, _ in loaded), moved


def steady_load(recent: Sequence[float], spread: float | None) -> bool:
    """Whether other processes' load held steady: over the latest probes' figures (`recent`,
    CPUs' worth, the probe judged last; STEADY_PROBES of them, or two at the start) and
    within the latest probe's window (`spread`, None: not known)."""
    window = list(recent[-STEADY_PROBES:])
    if len(window) < 2 or spread is None:
        return False
    middle = sorted(window)[len(window) // 2]
    band = max(STEADY_BAND, STEADY_SHARE * middle)
    return max(window) - min(window) <= band and spread <= band


def busiest_text(ticks: Mapping[str, int], hz: float, seconds: float) -> str:
    """The other processes that took the most CPU time, with their CPUs' worth
    ("python3 1.0, pytest 0.3"); those under a tenth of a CPU are left out."""
    if hz <= 0 or seconds <= 0:
        return ""
    shares = sorted(((t / hz / seconds, name) for name, t in ticks.items()), reverse=True)
    return ", ".join(f"{name} {cpus:.1f}" for cpus, name in shares[:BUSIEST] if cpus >= 0.1)


def under_load_text(results: Iterable[ProbeResult]) -> str:
    """ "measured under load (other processes used 0.9-1.2 of 2 CPUs)" for the probes that
    ran under a steady load; "" when none did."""
    loads = [r.contention for r in results if r.under_load and r.contention is not None]
    figures = sorted(c.other_cpus for c in loads if c.other_cpus is not None)
    if not figures:
        return ""
    usable = next((c.usable_cpus for c in loads if c.usable_cpus), None)
    low, high = figures[0], figures[-1]
    used = f"{low:.1f}" if f"{low:.1f}" == f"{high:.1f}" else f"{low:.1f}-{high:.1f}"
    of = f" of {usable} CPUs" if usable else " CPUs"
    threads = next((c.confined_threads for c in loads if c.confined_threads), None)
    on = f"; tuneup's probes ran on {threads} thread(s)" if threads else ""
    return f"measured under load (other processes used {used}{of}{on})"


def usable_cpus() -> list[int]:
    """The CPUs this process may run on (its affinity), else all of them."""
    try:
        return sorted(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        return list(range(os.cpu_count() or 1))


def read_host(cpus: Iterable[int], root: int, proc: Path = PROC) -> HostReading | None:
    """A reading now: the CPUs' ticks and the CPU ticks of `root` and its descendants."""
    try:
        text = (proc / "stat").read_text(encoding="ascii", errors="replace")
    except OSError:
        return None
    times = parse_cpu_times(text, cpus)
    if times is None:
        return None
    processes = read_processes(proc)
    tree = [processes[root]] if root in processes else []
    tree += descendants(root, processes)
    own = frozenset(p.pid for p in tree)
    tasks = {
        (p.pid, p.start_ticks): (p.comm, p.self_ticks)  # a reaped child's time is its own
        for p in processes.values()
        if p.pid not in own
    }
    return HostReading(time.time(), times, sum(p.cpu_ticks for p in tree), own, tasks)


def _took(
    before: Mapping[tuple[int, int], tuple[str, int]],
    now: Mapping[tuple[int, int], tuple[str, int]],
) -> dict[str, int]:
    """The CPU ticks each name took between two readings of the other processes (a process
    born between them took all of its own)."""
    took: dict[str, int] = {}
    for key, (name, ticks) in now.items():
        earlier = before.get(key)
        spent = ticks - earlier[1] if earlier is not None else ticks
        if spent > 0:
            took[name] = took.get(name, 0) + spent
    return took


class HostLoadSampler:
    """Reads the host every `interval_s` in a thread, keeping the last `keep` readings.

    Args:
        read: returns a reading (tests pass a script); defaults to /proc.
        interval_s: seconds between readings.
        keep: readings kept (at 0.5 s, 2400 is 20 minutes: longer than any probe).
    """

    def __init__(
        self,
        read: Callable[[], HostReading | None] | None = None,
        interval_s: float = 0.5,
        keep: int = 2400,
    ) -> None:
        cpus = usable_cpus()
        root = os.getpid()
        self.usable = len(cpus)
        self.hz = float(os.sysconf("SC_CLK_TCK")) if hasattr(os, "sysconf") else 100.0
        self.read = read or (lambda: read_host(cpus, root))
        self.interval_s = interval_s
        self.readings: deque[HostReading] = deque(maxlen=keep)
        self._tasks: Mapping[tuple[int, int], tuple[str, int]] | None = None
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def start(self) -> None:
        if self._thread is not None:
            return
        self._thread = threading.Thread(target=self._loop, name="tuneup-hostload", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=2.0)
            self._thread = None

    def sample(self) -> None:
        """Take one reading now (the thread does this; tests call it directly)."""
        reading = self.read()
        if reading is None:
            return
        with self._lock:
            if reading.tasks is not None:  # kept as who took what since the last reading
                took = _took(self._tasks, reading.tasks) if self._tasks is not None else {}
                self._tasks = reading.tasks
                reading = dataclasses.replace(reading, tasks=None, others=took)
            self.readings.append(reading)

    def _loop(self) -> None:
        while not self._stop.is_set():
            self.sample()
            self._stop.wait(self.interval_s)

    def contention(self, start: float, end: float) -> Contention | None:
        """What other processes took between `start` and `end` (epoch seconds); None: unknown.

        The window widens to the readings just outside it, so it is never
        narrower than asked.
        """
        with self._lock:
            readings = list(self.readings)
        before = [r for r in readings if r.time <= start]
        after = [r for r in readings if r.time >= end]
        if not before or not after:
            return None
        first, last = before[-1], after[0]
        found = between(first, last, self.usable, self.hz)
        if found is None:
            return None
        other, steal, seconds = found
        inside = [r for r in readings if first.time <= r.time <= last.time]
        # a short window's load is steady when the seconds around its end were: a probe of
        # a second on 1 thread holds too few readings of its own to say
        context = [r for r in readings if last.time - SPREAD_CONTEXT_S <= r.time <= last.time]
        took: dict[str, int] = {}
        for r in inside[1:]:
            for name, ticks in r.others.items():
                took[name] = took.get(name, 0) + ticks
        return Contention(
            other_cpus=round(other, 2),
            usable_cpus=self.usable,
            steal_pct=None if steal is None else round(steal, 1),
            seconds=round(seconds, 2),
            note=contention_note(other, self.usable, steal, None),
            busiest=busiest_text(took, self.hz, seconds),
            spread=self._spread(inside if len(inside) >= len(context) else context),
        )

    def _spread(self, readings: Sequence[HostReading]) -> float | None:
        """The largest less the smallest of other processes' per-second figures over
        `readings` (None: fewer than two seconds to compare)."""
        figures, start = [], readings[0] if readings else None
        for r in readings[1:]:
            if start is None or r.time - start.time < SPREAD_STEP_S:
                continue
            found = between(start, r, self.usable, self.hz)
            if found is not None:
                figures.append(found[0])
            start = r
        return round(max(figures) - min(figures), 2) if len(figures) >= 2 else None

    def now(
        self, seconds: float = 1.5, sleep: Callable[[float], None] = time.sleep
    ) -> Contention | None:
        """What other processes take of the usable CPUs over the next `seconds`, read now
        (`tuneup doctor`; no thread); None where nothing can be read."""
        self.sample()
        steps = max(2, round(2 * seconds / SPREAD_STEP_S))
        for _ in range(steps):
            sleep(seconds / steps)
            self.sample()
        with self._lock:
            readings = list(self.readings)
        if len(readings) < 2:
            return None
        return self.contention(readings[0].time, readings[-1].time)
