"""What one session is built from, once resolved: four values, not twenty-seven keywords.

A new session (assembly.assemble_new) and a resumed one (resume.resume_session) resolve
the user's request against the preset, the machine and the folder differently, then
hand `build_session` the same four things: what the ladder runs (`LadderInputs`), where
it runs (`Placement`), the folder it writes (`HeldFolder`) and how the front end hears
and times it (`FrontEnd`). Nothing is rewired on the session after it is built.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from tuneup.cluster.job import JobEnv
    from tuneup.cluster.launch import LaunchPlan
    from tuneup.costs.estimate import ProbeCosts
    from tuneup.hardware.types import MachineInfo
    from tuneup.preset.load import ProbePreset
    from tuneup.probe.events import EventHandler
    from tuneup.trainers.adapters import TrainerAdapter
    from tuneup.tuning.results.journal import ResultsDir
    from tuneup.tuning.session.control import Reporter
    from tuneup.tuning.session.engine import Engine
    from tuneup.tuning.session.lock import ResultsLock
    from tuneup.tuning.session.setting import Setting


@dataclass(frozen=True)
class LadderInputs:
    """What the ladder runs: the preset, trainer and stages resolved, the base config, and
    the terms a resume keeps (`baseline_again`: why its baseline is measured again)."""

    preset: ProbePreset
    adapter: TrainerAdapter
    stages: tuple[str, ...]
    base: dict[str, Any]
    search: str = "staged"
    seed: int = 0
    fresh_processes: bool = False
    time_budget_s: float | None = None
    shortest_trial_s: float | None = None
    retry_failed: bool = False
    baseline_again: str = ""
    setting: Setting | None = None


@dataclass(frozen=True)
class Placement:
    """Where the ladder runs: the machine (its ranks set from `plan`), the layout, the job."""

    machine: MachineInfo
    plan: LaunchPlan
    job: JobEnv


@dataclass(frozen=True)
class HeldFolder:
    """The results folder, its lock already taken, and whether it is this run's own."""

    results: ResultsDir
    lock: ResultsLock
    resumed: bool
    made_folder: bool = False


@dataclass(frozen=True)
class FrontEnd:
    """How the caller hears and times the session. `engine_factory` builds what probes
    (the twin passes its own, and `known_costs`: its probes' price); `keep_costs` False:
    a replay's session, which keeps no ladder costs."""

    reporter: Reporter | None = None
    on_event: EventHandler | None = None
    engine_factory: Callable[..., Engine] | None = None
    monotonic: Callable[[], float] = time.monotonic
    known_costs: ProbeCosts | None = None
    keep_costs: bool = True
