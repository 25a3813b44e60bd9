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

import math
import re
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from tuneup.bundled import checked_cache_record, read_cache_record, write_cache_record
from tuneup.costs.estimate import SCALE_BOUNDS, Habits, ProbeCosts
from tuneup.hardware.types import MachineInfo

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


# What a kept figure may be, (low, high): outside it (negative, NaN, 1e300) the entry is
# damaged, and a ladder planned on it would say "estimated -2517 s".
DAY_S = 86_400.0
SECONDS = (0.0, DAY_S)  # a probe's start, set-up, first steps, a step
TRIALS = (0.0, 10_000.0)
SHARE = (0.0, 1.0)
PAIRS = (0.0, 1_000.0)
LOADER_ROUND = (1, 1_000_000)
BATCH_EXPONENT = (0.0, 2.0)  # as a preset's probe.costs.batch_exponent


AFRESH = "left out; the next ladder measures afresh"
_DAY = re.compile(r"\d{4}-\d{2}-\d{2}")


class Damaged(ValueError):
    """A kept figure out of its range: the entry is left out, and said."""


class LadderRecord:
    """The JSON file of LadderCosts by "trainer|preset|machine"; unreadable reads as empty
    (an entry of an older layout too: the next ladder measures afresh). A file or an entry
    that is damaged (a figure out of range, not finite, of the wrong type) reads as empty
    too, and says why once, in `damage`."""

    def __init__(self, folder: Path) -> None:
        self.path = Path(folder) / FILE
        self._damage: dict[str, str] = {}

    @property
    def damage(self) -> list[str]:
        """What was found damaged and left out, one line for each file or entry, however
        often it was read: for the caller to say once."""
        return list(self._damage.values())

    def recall(self, trainer: str, preset: str, machine: str) -> LadderCosts | None:
        key = f"{trainer}|{preset}|{machine}"
        data, why = checked_cache_record(self.path)
        if why is not None:
            self._damage[""] = f"{self.path} {why}: {AFRESH}"
        entry = data.get(key)
        if not isinstance(entry, dict):
            return None
        try:
            return _costs_of(entry)
        except KeyError:
            return None  # an older layout, not damage
        except (TypeError, ValueError) as exc:
            self._damage[key] = f"{self.path}: the costs of {key} are damaged ({exc}): {AFRESH}"
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


def _costs_of(entry: dict[str, Any]) -> LadderCosts:
    """An entry's figures, each checked in its range.

    Raises:
        KeyError: a figure missing (an older layout).
        Damaged, TypeError, ValueError: a figure of the wrong type or out of its range.
    """
    costs = ProbeCosts(
        spawn_s=_figure(entry["spawn_s"], "spawn_s", SECONDS),
        setup_s=_figure(entry["setup_s"], "setup_s", SECONDS),
        first_s=_figure(entry["first_s"], "first_s", SECONDS),
        step_s=_phases(dict(entry["step_s"]), "step_s", SECONDS),
        trials=_phases(dict(entry["trials"]), "trials", TRIALS),
        scale=_figure(entry.get("scale", 1.0), "scale", SCALE_BOUNDS),
        measured=True,
        recorded=True,
        unsettled=_phases(dict(entry.get("unsettled", {})), "unsettled", SHARE),
        loader_round=int(_figure(entry.get("loader_round", 1), "loader_round", LOADER_ROUND)),
        batch_exponent=_figure(entry.get("batch_exponent", 0.0), "batch_exponent", BATCH_EXPONENT),
        kernel_s=_figure(entry["kernel_s"], "kernel_s", SECONDS) if "kernel_s" in entry else None,
    )
    habits = Habits(
        _figure(entry["pairs_per_stage"], "pairs_per_stage", PAIRS),
        _figure(entry["adopt_rate"], "adopt_rate", SHARE),
    )
    when = str(entry.get("when", ""))
    return LadderCosts(costs, habits, when=when if _DAY.fullmatch(when) else "")


def _phases(block: dict[str, Any], name: str, bounds: tuple[float, float]) -> dict[str, float]:
    return {str(k): _figure(v, f"{name}.{k}", bounds) for k, v in block.items()}


def _figure(value: Any, name: str, bounds: tuple[float, float]) -> float:
    low, high = bounds
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise Damaged(f"{name} is {value!r}, not a number")
    if not (math.isfinite(value) and low <= value <= high):
        raise Damaged(f"{name} is {value!r}, not from {low:g} to {high:g}")
    return float(value)
