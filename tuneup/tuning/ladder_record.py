"""What ladders cost on this machine, kept for the next estimate before any probe has run.

A session measures its probes' costs as it goes (probe.estimate.measured_costs)
and what its stages' decisions took in pairs (pairs_seen); at its end both are
kept here, by trainer and preset, with the budget they were measured under.
The app's setup screen estimates a new ladder from them (carried to another
budget by the step model's ratio), and says so; without a record it guesses.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from pathlib import Path

from tuneup.bundled import read_cache_record, write_cache_record
from tuneup.probe.estimate import ProbeCosts
from tuneup.probe.types import Budget

FILE = "ladder-costs.json"


@dataclass(frozen=True)
class LadderCosts:
    """One trainer and preset's measured costs: per probe, per decision, and under what budget."""

    costs: ProbeCosts
    pairs_per_stage: float
    budget: Budget
    when: str = ""  # the day it was measured, YYYY-MM-DD


class LadderRecord:
    """The JSON file of LadderCosts by "trainer|preset"; unreadable reads as empty."""

    def __init__(self, folder: Path) -> None:
        self.path = Path(folder) / FILE

    def recall(self, trainer: str, preset: str) -> LadderCosts | None:
        entry = read_cache_record(self.path).get(f"{trainer}|{preset}")
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

    def remember(self, trainer: str, preset: str, measured: LadderCosts) -> None:
        """Keep `measured` for (trainer, preset)."""
        data = read_cache_record(self.path)
        data[f"{trainer}|{preset}"] = {
            "fresh_s": round(measured.costs.fresh_s, 3),
            "served_s": round(measured.costs.served_s, 3),
            "pairs_per_stage": round(measured.pairs_per_stage, 2),
            "budget": measured.budget.to_dict(),
            "when": measured.when or time.strftime("%Y-%m-%d"),
        }
        write_cache_record(self.path, data)
