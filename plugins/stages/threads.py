"""The threads stage: torch's intra-op threads beside the loader's workers, judged on FULL.

torch picks one intra-op thread per core it sees, while each DataLoader worker is
a process of its own: with N workers on C CPUs per rank, the step's threads and
the workers oversubscribe the CPUs, a classic cause of a slow input pipeline on
GPU nodes and of a slow step on CPU nodes (on a loaded 2-core machine the
cpu-smoke step ran 10-25x faster with one thread). The stage tries the counts
that do not oversubscribe, once the workers and the loader are chosen.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from tuneup.hardware.types import MachineInfo
from tuneup.probe.stages import Stage
from tuneup.probe.types import Candidate


def thread_counts(cpus: int, workers: int) -> list[int]:
    """One thread; the CPUs the workers leave (none oversubscribed); half the CPUs."""
    counts = [1, max(1, cpus - workers), max(1, cpus // 2)]
    return sorted(set(counts))


def running_threads(machine: MachineInfo, base: Mapping[str, Any]) -> int | None:
    """The intra-op threads the incumbent runs with: its knob's, else the count a variable
    sets (OMP_NUM_THREADS=1 makes torch's own choice one thread); None: torch's own count
    of the cores, not known before a probe runs."""
    knob = int(base.get("intra_op_threads") or 0)
    return knob if knob > 0 else machine.env_threads


@dataclass(frozen=True)
class ThreadsStage(Stage):
    """Intra-op thread counts from the CPUs per rank and the incumbent's worker count; a
    count the incumbent already runs with is not measured against itself."""

    def candidates_for(self, machine: MachineInfo, base: Mapping[str, Any]) -> list[Candidate]:
        cpus = machine.cpus_per_rank
        workers = int(base.get("num_data_workers") or 0)
        running = running_threads(machine, base)
        return [
            Candidate(f"{n} thread{'s' if n > 1 else ''}", {"intra_op_threads": n})
            for n in thread_counts(cpus, workers)
            if n != running
        ]

    def incumbent_reason(self, machine: MachineInfo, base: Mapping[str, Any]) -> str | None:
        if self.candidates_for(machine, base):
            return None
        if machine.cpus_per_rank == 1:
            return f"one CPU per rank ({machine.cpus_usable} usable): no other thread count to try"
        running = running_threads(machine, base)
        workers = int(base.get("num_data_workers") or 0)
        knob = int(base.get("intra_op_threads") or 0)
        by = f"intra_op_threads is {knob}" if knob else f"{machine.env_threads_from}={running}"
        return (
            f"the incumbent already runs {running} thread{'s' if running != 1 else ''} ({by}), "
            f"what each count the stage tries comes to here (one, the {machine.cpus_per_rank} "
            f"CPUs per rank less its {workers} worker(s), half of them): nothing else to try"
        )


THREADS = ThreadsStage(
    name="threads",
    title="Intra-op threads",
    description=(
        "torch's intra-op threads per rank beside the loader's worker processes: one, the "
        "CPUs the workers leave, and half the CPUs, against torch's own choice (one per "
        "core it sees). Judged on FULL, where the step and the workers share the CPUs."
    ),
    knobs=("intra_op_threads",),
    judged_on="full",
    expected_gain=0.05,
    order=25,  # once the workers and the loader are chosen: the CPUs they leave are known
)
