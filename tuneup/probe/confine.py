"""Fewer threads for tuneup's probes when others' load is there: the choice and its words.

torch runs one intra-op thread per core and every op waits for the slowest of them. When
another process holds a core, the thread that shares it stalls the rest at each op, so
the probe runs several times slower and its figures jump with the other process's
bursts. On a 2-core machine beside a busy loop (one core, 80% of each second) the
cpu-smoke baseline ran 85 samples/s on torch's 2 threads and 340-410 on 1 thread, where a
quiet machine gives 541 and 426 (`tuneup probe --stages threads`, 2026-11-28). So when
others use a share of the CPUs as the ladder begins, the probes run on the threads the
load leaves (`threads_for_load`): both sides of every pair alike, the threads stage left
out (what it would measure is the load, not the knob), and the line says so.

Pure. load_watch.ContentionWatch decides; the trainer backend applies it to each probe
whose config leaves the count to torch (`THREADS_KNOB` 0; a script's, through
`THREADS_VARIABLE` where neither the user's environment nor the section sets it).
"""

from __future__ import annotations

import math
from collections.abc import Iterable

from tuneup.probe.types import Candidate, Contention, ProbeResult

THREADS_KNOB = "intra_op_threads"  # 0: torch's own count (one a core)
THREADS_VARIABLE = "OMP_NUM_THREADS"  # how a script's torch is told (the command trainer)
SPARE = 0.5  # others' load is rounded to whole cores: half a core or less leaves it to the probe


def threads_for_load(other_cpus: float, usable: int, running: int) -> int | None:
    """The intra-op threads that leave the cores others' load holds (at least one), where
    fewer than the `running` count; None: no fewer (nothing to confine)."""
    held = max(0, math.ceil(other_cpus - SPARE))
    threads = max(1, usable - held)
    return threads if threads < running else None


def confined_of(results: Iterable[ProbeResult]) -> int | None:
    """The thread count the latest confined probe among `results` ran on; None: none was."""
    found = None
    for result in results:
        held = result.contention
        if held is not None and held.confined_threads:
            found = held.confined_threads
    return found


def sets_threads(candidates: Iterable[Candidate]) -> bool:
    """Whether a stage's candidates set the thread count (what confinement holds fixed)."""
    return any(THREADS_KNOB in c.values for c in candidates)


def threads_words(threads: int) -> str:
    return f"{threads} thread{'s' if threads != 1 else ''}"


def confinement_line(held: Contention) -> str:
    """What tuneup did about the load it found, said once as the ladder begins."""
    threads = held.confined_threads or 1
    others = held.other_cpus or 0.0
    of = f" of {held.usable_cpus}" if held.usable_cpus else ""
    busiest = f" ({held.busiest})" if held.busiest else ""
    return (
        f"other processes used {others:.1f}{of} CPUs as the ladder began{busiest}: tuneup "
        f"runs its probes on {threads_words(threads)} (torch's own count would fight the "
        "load), both sides of every pair alike; the threads stage is left out (measure it "
        "on a quiet node)"
    )


def left_out_line(threads: int) -> str:
    """Why a stage that sets the thread count is not measured while probes are confined."""
    return (
        f"left out: the machine was too busy: tuneup ran its probes on "
        f"{threads_words(threads)} under others' load, where a thread count would measure "
        "the load, not the knob; measure it on a quiet node"
    )
