"""The loader's stages, judged on IO: how many workers, and which loader feeds the model."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from tuneup.config import LOADERS, loader
from tuneup.hardware.types import MachineInfo
from tuneup.probe.stages import Stage, current, runs_on_cuda
from tuneup.probe.types import Candidate


@dataclass(frozen=True)
class WorkersStage(Stage):
    """Loader workers, capped by the CPUs each rank may use (each rank has its own loader)."""

    def candidates_for(self, machine: MachineInfo, base: Mapping[str, Any]) -> list[Candidate]:
        cap = machine.cpus_per_rank
        return [c for c in self.candidates if c.values.get("num_data_workers", 0) <= cap]

    def incumbent_reason(self, machine: MachineInfo, base: Mapping[str, Any]) -> str | None:
        kind = loader(str(current(base, "data_loader_config")))
        if not kind.takes_workers:
            # (a ladder that picks its loader first: on the second H200 ladder the workers
            # stage took 12 probes and 284 s before the GPU-resident loader made them moot)
            return f"the incumbent's loader ({kind.name}) has no workers to tune"
        if self.candidates_for(machine, base):
            return None
        share = ""
        if machine.ranks_per_node > 1:
            share = f" ({machine.cpus_usable} usable over {machine.ranks_per_node} ranks per node)"
        return (
            f"CPUs per GPU/rank: only {machine.cpus_per_rank}{share}; "
            "no room for more loader workers"
        )


WORKERS = WorkersStage(
    name="workers",
    order=10,
    title="Data loader workers",
    description=(
        "More DataLoader worker processes per rank, as the tutorial's first step (2 -> 4 -> 8 "
        "-> 16). Counts above the CPUs per GPU/rank (this process's affinity shared among "
        "the ranks of its node) are not tried."
    ),
    knobs=("num_data_workers",),
    judged_on="io",
    expected_gain=1.0,
    candidates=tuple(Candidate(f"{n} workers", {"num_data_workers": n}) for n in (2, 4, 8, 16)),
)


# --- data: which loader feeds the model -------------------------------------------------

_DALI_REASON = "needs NVIDIA DALI (pip install 'tuneup[dali]')"
_GPU_ON_CPU_REASON = "same as inmem without CUDA"


@dataclass(frozen=True)
class DataStage(Stage):
    """The loader kind; lowmem is tried with the incumbent's worker count."""

    def candidate_reason(
        self, cand: Candidate, machine: MachineInfo, base: Mapping[str, Any]
    ) -> str | None:
        """Why this machine cannot try ``cand``; None when it can."""
        kind = loader(str(cand.values.get("data_loader_config")))
        if kind.dali and not machine.dali:
            return _DALI_REASON
        if kind.on_gpu and not runs_on_cuda(machine, base):
            return _GPU_ON_CPU_REASON
        return None

    def skipped_candidates(
        self, machine: MachineInfo, base: Mapping[str, Any]
    ) -> list[tuple[str, str]]:
        """(label, reason) of each declared candidate this machine cannot try."""
        skipped = []
        for cand in self.candidates:
            reason = self.candidate_reason(cand, machine, base)
            if reason is not None:
                skipped.append((cand.label, reason))
        return skipped

    def incumbent_reason(self, machine: MachineInfo, base: Mapping[str, Any]) -> str | None:
        if not loader(str(current(base, "data_loader_config"))).reads_files:
            return "the incumbent trains on synthetic data: there is no file to load"
        return None

    def candidates_for(self, machine: MachineInfo, base: Mapping[str, Any]) -> list[Candidate]:
        if self.incumbent_reason(machine, base) is not None:
            return []
        workers = current(base, "num_data_workers")
        proposed = []
        for cand in self.candidates:
            if self.candidate_reason(cand, machine, base) is not None:
                continue
            if loader(str(cand.values.get("data_loader_config"))).paced_by_workers:
                # The workers stage's winner, kept: such a loader is compared at its best.
                cand = Candidate(cand.label, {**cand.values, "num_data_workers": workers})
            proposed.append(cand)
        return proposed


DATA = DataStage(
    name="data",
    order=20,
    title="Data loader",
    description=(
        "Where crops are cut: from the HDF5 file per sample (lowmem, with the incumbent's "
        "workers), from the box in host memory (inmem), by NVIDIA DALI (dali-lowmem), or "
        "from the box resident in GPU memory (gpu). The gpu loader needs both boxes to fit "
        "in free GPU memory."
    ),
    knobs=("data_loader_config", "num_data_workers"),
    judged_on="io",
    expected_gain=0.4,
    candidates=tuple(
        Candidate(kind.name, {"data_loader_config": kind.name}) for kind in LOADERS if kind.proposed
    ),
)
