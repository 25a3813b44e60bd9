"""What ladders cost on this machine, kept for the next estimate before any probe has run.

A session measures its probes' costs as it goes (probe.estimate.measured_costs)
and what its stages' decisions took in pairs (pairs_seen); at its end both are
kept here, by trainer, preset and machine (its GPU or CPUs, and the ranks a
probe runs with: a home folder is often shared by nodes of several kinds), with
the budget they were measured under.
The app's setup screen estimates a new ladder from them (carried to another
budget by the step model's ratio), and says so; without a record it guesses.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from pathlib import Path

from tuneup.bundled import read_cache_record, write_cache_record
from tuneup.hardware.types import MachineInfo
from tuneup.probe.estimate import ProbeCosts
from tuneup.probe.types import Budget

FILE = "ladder-costs.json"


def machine_tag(machine: MachineInfo) -> str:
    """The machine as ladder costs are kept for it: "1 x NVIDIA H200", "1 x 2 CPUs"."""
    where = machine.gpu_names[0] if machine.cuda and machine.gpu_names else (
        f"{machine.cpus_usable} CPUs"
    )  # fmt: skip
    return f"{machine.world_size} x {where}"


@dataclass(frozen=True)
class LadderCosts:
    """One trainer and preset's measured costs: per probe, per decision, and under what budget."""

    costs: ProbeCosts
    pairs_per_stage: float
    budget: Budget
    when: str = ""  # the day it was measured, YYYY-MM-DD


class LadderRecord:
    """The JSON file of LadderCosts by "trainer|preset|machine"; unreadable reads as empty."""

    def __init__(self, folder: Path) -> None:
        self.path = Path(folder) / FILE

    def recall(self, trainer: str, preset: str, machine: str) -> LadderCosts | None:
        entry = read_cache_record(self.path).get(f"{trainer}|{preset}|{machine}")
        if not isinstance(entry, dict):
            return None
        try:
            return LadderCosts(
                costs=ProbeCosts(float(entry["fresh_s"]), float(entry["served_s"]), measured=True),
                pairs_per_stage=float(entry["pairs_per_stage"]),
                budget=Budget(**entry["budget"]),
                when=str(entry.get("when", "")),
            )
        except (KeyError, TypeError, ValueError):
            return None

    def remember(self, trainer: str, preset: str, machine: str, measured: LadderCosts) -> None:
        """Keep `measured` for (trainer, preset, machine)."""
        data = read_cache_record(self.path)
        data[f"{trainer}|{preset}|{machine}"] = {
            "fresh_s": round(measured.costs.fresh_s, 3),
            "served_s": round(measured.costs.served_s, 3),
            "pairs_per_stage": round(measured.pairs_per_stage, 2),
            "budget": measured.budget.to_dict(),
            "when": measured.when or time.strftime("%Y-%m-%d"),
        }
        write_cache_record(self.path, data)
