"""The host-load watch: CPU time other processes took while a probe was timed."""

from __future__ import annotations

import os

import pytest

from tuneup.probe.events import TrialEvent
from tuneup.probe.hostload import (
    ContentionWatch,
    CpuTimes,
    HostLoadSampler,
    HostReading,
    between,
    contention_note,
    parse_cpu_times,
    read_host,
)
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
    spin = "import time\nend=time.time()+1.0\nwhile time.time()<end: pass\n"
    subprocess.run([sys.executable, "-c", spin], check=True)  # reaped: into our cutime
    after = read_host(usable_cpus(), os.getpid())
    assert before is not None and after is not None
    assert (after.own_ticks - before.own_ticks) / hz >= 0.7
    assert after.cpus.busy - before.cpus.busy >= after.own_ticks - before.own_ticks - 0.2 * hz
