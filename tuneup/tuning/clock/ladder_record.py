"""What ladders cost on this machine, kept for the next estimate before any probe has run.

A session measures its probes' costs as it goes (tuning.time_left.measured_costs:
start-up, first steps, step times, trial counts) and how its stages' decisions
went (pairs_seen); at its end both are kept here, by trainer, preset and
machine (its GPU or CPUs, and the ranks a probe runs with: a home folder is
often shared by nodes of several kinds). The app's setup screen estimates a
new ladder from them under any budget (the model prices a probe's parts), and
says so; without a record it guesses.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from pathlib import Path

from tuneup.bundled import read_cache_record, write_cache_record
from tuneup.hardware.types import MachineInfo
from tuneup.probe.estimate import Habits, ProbeCosts

FILE = "ladder-costs.json"


def machine_tag(machine: MachineInfo) -> str:
    """The machine as ladder costs are kept for it: "1 x NVIDIA H200", "1 x 2 CPUs"."""
    where = machine.gpu_names[0] if machine.cuda and machine.gpu_names else (
        f"{machine.cpus_usable} CPUs"
    )  # fmt: skip
    return f"{machine.world_size} x {where}"


@dataclass(frozen=True)
class LadderCosts:
    """One trainer and preset's measured costs: a probe's parts, and how decisions went."""

    costs: ProbeCosts
    habits: Habits
    when: str = ""  # the day it was measured, YYYY-MM-DD


class LadderRecord:
    """The JSON file of LadderCosts by "trainer|preset|machine"; unreadable reads as empty
    (an entry of an older layout too: the next ladder measures afresh)."""

    def __init__(self, folder: Path) -> None:
        self.path = Path(folder) / FILE

    def recall(self, trainer: str, preset: str, machine: str) -> LadderCosts | None:
        entry = read_cache_record(self.path).get(f"{trainer}|{preset}|{machine}")
        if not isinstance(entry, dict):
            return None
        try:
            costs = ProbeCosts(
                spawn_s=float(entry["spawn_s"]),
                setup_s=float(entry["setup_s"]),
                first_s=float(entry["first_s"]),
                step_s={str(k): float(v) for k, v in dict(entry["step_s"]).items()},
                trials={str(k): float(v) for k, v in dict(entry["trials"]).items()},
                scale=float(entry.get("scale", 1.0)),
                measured=True,
                recorded=True,
                unsettled={str(k): float(v) for k, v in dict(entry.get("unsettled", {})).items()},
                loader_round=int(entry.get("loader_round", 1)),
                batch_exponent=float(entry.get("batch_exponent", 0.0)),
                kernel_s=float(entry["kernel_s"]) if "kernel_s" in entry else None,
            )
            habits = Habits(float(entry["pairs_per_stage"]), float(entry["adopt_rate"]))
            return LadderCosts(costs, habits, when=str(entry.get("when", "")))
        except (KeyError, TypeError, ValueError):
            return None

    def remember(self, trainer: str, preset: str, machine: str, measured: LadderCosts) -> None:
        """Keep `measured` for (trainer, preset, machine)."""
        data = read_cache_record(self.path)
        costs = measured.costs
        data[f"{trainer}|{preset}|{machine}"] = {
            "spawn_s": round(costs.spawn_s, 3),
            "setup_s": round(costs.setup_s, 3),
            "first_s": round(costs.first_s, 3),
            "step_s": {k: round(v, 6) for k, v in costs.step_s.items()},
            "trials": {k: round(v, 2) for k, v in costs.trials.items()},
            "scale": round(costs.scale, 3),
            "unsettled": {k: round(v, 3) for k, v in costs.unsettled.items()},
            "loader_round": costs.loader_round,
            "batch_exponent": round(costs.batch_exponent, 3),
            **({"kernel_s": round(costs.kernel_s, 3)} if costs.kernel_s is not None else {}),
            "pairs_per_stage": round(measured.habits.pairs_per_stage, 2),
            "adopt_rate": round(measured.habits.adopt_rate, 2),
            "when": measured.when or time.strftime("%Y-%m-%d"),
        }
        write_cache_record(self.path, data)
