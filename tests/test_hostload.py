"""The host-load watch: CPU time other processes took while a probe was timed."""

from __future__ import annotations

import os

import pytest

from tuneup.probe.describe import status_text
from tuneup.probe.events import TrialEvent
from tuneup.probe.hostload import (
    CpuTimes,
    HostLoadSampler,
    HostReading,
    between,
    contention_note,
    parse_cpu_times,
    read_host,
    steady_load,
)
from tuneup.probe.load_watch import ContentionWatch
from tuneup.probe.types import Candidate, ProbeResult, Status

PROC_STAT = """\
cpu  1000 10 500 8000 100 5 5 30 0 0
cpu0 600 5 300 4000 50 3 2 20 0 0
cpu1 400 5 200 4000 50 2 3 10 0 0
intr 12345
"""


def test_the_usable_cpus_lines_are_summed():
    both = parse_cpu_times(PROC_STAT, [0, 1])
    assert both == CpuTimes(
        busy=600 + 5 + 300 + 3 + 2 + 400 + 5 + 200 + 2 + 3,
        steal=30,
        total=sum([600, 5, 300, 4000, 50, 3, 2, 20, 400, 5, 200, 4000, 50, 2, 3, 10]),
    )
    one = parse_cpu_times(PROC_STAT, [1])
    assert one is not None and one.steal == 10
    assert parse_cpu_times(PROC_STAT) == CpuTimes(busy=1520, steal=30, total=9650)
    assert parse_cpu_times("intr 1\n", [0]) is None


def reading(t: float, busy: int, own: int, steal: int = 0, total: int = 0) -> HostReading:
    return HostReading(t, CpuTimes(busy, steal, total or busy + 1000), own)


def test_other_processes_are_the_busy_time_tuneup_did_not_use():
    first = reading(10.0, busy=1000, own=500)
    last = reading(12.0, busy=1000 + 300, own=500 + 100)  # 3 CPU-s busy, 1 of them ours
    other, _steal, seconds = between(first, last, usable=2, hz=100.0)
    assert other == pytest.approx(1.0) and seconds == 2.0
    assert between(first, reading(10.1, 1010, 500), usable=2, hz=100.0) is None  # too short


def test_the_note_names_what_got_in_the_way():
    assert contention_note(0.2, 8, 0.0, 0) == ""
    assert contention_note(1.0, 2, None, None) == "other processes used 1.0 of 2 CPUs"
    assert contention_note(1.5, 8, None, None) == ""  # under a quarter of 8 CPUs
    assert "hypervisor" in contention_note(0.0, 2, 25.0, None)
    assert contention_note(None, None, None, 2) == "2 other process(es) ran on the probe's GPU"


def test_the_watch_judges_the_full_trials_window():
    script = [
        reading(99.0, busy=0, own=0),
        reading(101.0, busy=100, own=100),  # warm-up: only us
        reading(103.0, busy=500, own=200),  # FULL: 4 CPU-s busy, 1 of them ours
        reading(104.0, busy=600, own=300),
    ]
    sampler = HostLoadSampler(read=lambda: None)
    sampler.readings.extend(script)
    sampler.usable, sampler.hz = 2, 100.0

    def backend(stage: str, cand: Candidate, values: dict) -> ProbeResult:
        watch.on_event(TrialEvent(phase="io", time=100.5, seconds=0.5))
        watch.on_event(TrialEvent(phase="full", time=102.0, seconds=0.5))
        watch.on_event(TrialEvent(phase="full", time=103.0, seconds=0.5))
        return ProbeResult(stage, {}, values, Status.OK, full_sps=10.0)

    watch = ContentionWatch(backend, sampler)
    result = watch("s", Candidate("c", {}), {})
    assert result.contention is not None
    assert result.contention.other_cpus == pytest.approx(1.5)  # 3 CPU-s over 101 -> 103
    assert result.contended and "other processes used 1.5 of 2 CPUs" in result.contention.note


def test_a_failed_probe_is_not_judged():
    sampler = HostLoadSampler(read=lambda: None)
    watch = ContentionWatch(
        lambda stage, cand, values: ProbeResult(stage, {}, values, Status.CRASH, "boom"), sampler
    )
    assert watch("s", Candidate("c", {}), {}).contention is None


@pytest.mark.skipif(not os.path.exists("/proc/stat"), reason="reads /proc")
def test_the_cpu_time_of_tuneups_own_children_counts_as_its_own():
    import subprocess
    import sys

    from tuneup.probe.hostload import usable_cpus

    hz = float(os.sysconf("SC_CLK_TCK"))
    before = read_host(usable_cpus(), os.getpid())
    # a second of CPU time, however long a loaded machine takes to give it
    spin = "import time\nwhile time.process_time() < 1.0: pass\n"
    subprocess.run([sys.executable, "-c", spin], check=True)  # reaped: into our cutime
    after = read_host(usable_cpus(), os.getpid())
    assert before is not None and after is not None
    assert (after.own_ticks - before.own_ticks) / hz >= 0.7
    assert after.cpus.busy - before.cpus.busy >= after.own_ticks - before.own_ticks - 0.2 * hz


def steady_script(other: list[float], own: float = 1.0, step: float = 0.5) -> list[HostReading]:
    """Readings every `step` seconds from t=100: other processes take `other[i]` CPUs over
    the i-th step, tuneup `own`; each reading names who took the others' time."""
    readings, busy, mine, others = [], 0, 0, 0
    readings.append(HostReading(100.0, CpuTimes(0, 0, 10_000), 0))
    for i, cpus in enumerate(other):
        busy += round((cpus + own) * 100 * step)
        mine += round(own * 100 * step)
        others += round(cpus * 100 * step)
        took = {"python3": round(cpus * 100 * step)}
        readings.append(
            HostReading(100.0 + step * (i + 1), CpuTimes(busy, 0, 10_000 + busy), mine, others=took)
        )
    return readings


def watched(
    readings: list[HostReading],
    windows: list[tuple[float, float]],
    trials: tuple[float, ...] = (),
) -> list[ProbeResult]:
    """A probe per FULL window (its FULL trials `trials`), judged in turn by one watch over
    `readings`."""
    sampler = HostLoadSampler(read=lambda: None)
    sampler.readings.extend(readings)
    sampler.usable, sampler.hz = 2, 100.0
    spans = iter(windows)

    def backend(stage: str, cand: Candidate, values: dict) -> ProbeResult:
        start, end = next(spans)
        watch.on_event(TrialEvent(phase="full", time=end, seconds=end - start))
        return ProbeResult(
            stage, {}, values, Status.OK, full_sps=10.0, full_sps_trials=list(trials)
        )

    watch = ContentionWatch(backend, sampler)
    return [watch("s", Candidate("c", {}), {}) for _ in windows]


def test_a_steady_load_is_kept_under_load_and_a_bursty_one_stays_contended():
    windows = [(101.0, 104.0), (105.0, 108.0), (109.0, 112.0)]
    steady = watched(steady_script([1.0] * 26), windows)
    first, second, third = steady
    assert first.contended  # nothing to hold it against yet: measured again
    assert second.under_load and third.under_load and not third.contended
    assert third.contention is not None and third.contention.busiest == "python3 1.0"
    assert "under a steady load: other processes used 1.0 of 2 CPUs" in status_text(third)
    bursts = [(0.1 if (i // 2) % 2 else 1.9) for i in range(26)]  # 1.9 and 0.1 CPUs by turns
    bursty = watched(steady_script(bursts), windows)
    assert all(r.contended and not r.under_load for r in bursty)
    assert bursty[-1].contention is not None and (bursty[-1].contention.spread or 0) > 1.0


def test_a_burst_is_judged_by_what_it_did_to_the_probes_own_trials():
    """Judged on the effect, not on the load's share of the CPUs: trials a burst overlapped
    that ran as fast as those between bursts were not moved by it (measured under that
    load, and paired only with a probe under a load like it); trials it slowed spoil the
    probe, as before. A load over every trial gives nothing to compare: its steadiness
    decides (the bursty case of the test above)."""
    bursts = [(0.1 if (i // 2) % 2 else 1.9) for i in range(40)]  # 1.9, 0.1 CPUs a second

    def probe(rate_under_burst: float) -> ProbeResult:
        sampler = HostLoadSampler(read=lambda: None)
        sampler.readings.extend(steady_script(bursts))
        sampler.usable, sampler.hz = 2, 100.0

        def backend(stage: str, cand: Candidate, values: dict) -> ProbeResult:
            for k in range(8):  # a trial a second from 101 s; the bursts fill 102-103, ...
                start = 101.0 + k
                loaded = k % 2 == 1
                rate = rate_under_burst if loaded else 10.0
                watch.on_event(
                    TrialEvent(phase="full", time=start + 0.9, seconds=0.8, samples_per_s=rate)
                )
            return ProbeResult(stage, {}, values, Status.OK, full_sps=10.0)

        watch = ContentionWatch(backend, sampler)
        return watch("s", Candidate("c", {}), {})

    unmoved = probe(10.1)
    assert unmoved.under_load and not unmoved.contended
    assert "ran as fast as those between" in (unmoved.contention.note or "")  # type: ignore[union-attr]
    slowed = probe(6.0)
    assert slowed.contended and not slowed.under_load


def test_steadiness_needs_neighbours_that_agree_and_a_window_that_held():
    assert steady_load([1.0, 1.2, 0.9], spread=0.3)
    assert steady_load([1.0, 1.3], spread=0.2)  # two at the start
    assert not steady_load([1.1], spread=0.0)  # alone: nothing to pair it with
    assert not steady_load([0.2, 1.5], spread=0.1)  # a neighbour ran under another load
    assert not steady_load([1.0, 1.0, 1.0], spread=1.2)  # bursts within its window
    assert not steady_load([1.0, 1.0], spread=None)
    assert steady_load([12.0, 14.0, 15.0], spread=3.0)  # a big machine's band is its share


def test_the_busiest_other_processes_are_named_from_what_they_took():
    first = HostReading(10.0, CpuTimes(0, 0, 1000), 0, tasks={(7, 1): ("pytest", 100)})
    second = HostReading(
        12.0,
        CpuTimes(500, 0, 1500),
        100,
        tasks={(7, 1): ("pytest", 140), (8, 5): ("python3", 200), (9, 5): ("python3", 160)},
    )
    script = iter([first, second])
    sampler = HostLoadSampler(read=lambda: next(script))
    sampler.usable, sampler.hz = 2, 100.0
    sampler.sample()
    sampler.sample()
    found = sampler.contention(10.0, 12.0)
    assert found is not None and found.busiest == "python3 1.8, pytest 0.2"
    assert all(r.tasks is None for r in sampler.readings)  # only what each took is kept


@pytest.mark.skipif(not os.path.exists("/proc/stat"), reason="reads /proc")
def test_a_busy_loop_beside_tuneup_is_measured_and_named_now():
    import os
    import signal
    import subprocess
    import sys

    # another process's loop, not this one's child (a child's time is tuneup's own): the
    # shell starts it in the background and leaves, so it is no descendant of this test
    started = subprocess.run(
        ["sh", "-c", f"{sys.executable} -c 'while True: pass' >/dev/null 2>&1 & echo $!"],
        capture_output=True,
        text=True,
        timeout=60,
    )
    spin = int(started.stdout.strip())
    try:
        found = HostLoadSampler().now(seconds=1.5)
    finally:
        os.kill(spin, signal.SIGKILL)
    assert found is not None and (found.other_cpus or 0.0) >= 0.5, found
    assert "python" in found.busiest, found
