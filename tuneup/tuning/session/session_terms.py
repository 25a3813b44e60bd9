"""The terms a probe session runs on, grouped as values: how it searches, what bounds its
time, how its probes are laid out, and what a resume measures again.

`ProbeSession` takes each group as one field (assembly.build_session fills them from what
it resolved), so the session's own fields stay the things it works with.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from tuneup.tuning.clock.planner import LadderPlan
from tuneup.tuning.session.time_gate import BUDGET


@dataclass(frozen=True)
class SearchTerms:
    """How the ladder searches. `fresh_processes` is recorded, so a resume runs probes
    alike. Two baseline probes: their pooled trials carry the probe-to-probe noise (a new
    process, new allocations), not only the trial-to-trial noise."""

    search: str = "staged"
    seed: int = 0
    fresh_processes: bool = False
    confirm_pairs: int = 2
    baseline_repeats: int = 2


@dataclass(frozen=True)
class TimeTerms:
    """What bounds the ladder's time.

    Attributes:
        budget_s: the ladder's time budget in seconds from start() (the user's --budget,
            or the allocation's time left; None: none).
        limit_by: whose it is (time_gate.BUDGET or ALLOCATION).
        plan: the plan fitted to it (planner.py): stages left out before the first probe,
            and kept to as the ladder goes.
        shortest_trial_s: trials are never shortened below it (None: the plan's floor of
            the session's budget).
        allocation_left: seconds left in the allocation (None: no limit known); a probe
            that could not finish in them is not started (OutOfTime).
        monotonic: the clock the budget is kept on.
    """

    budget_s: float | None = None
    limit_by: str = BUDGET
    plan: LadderPlan | None = None
    shortest_trial_s: float | None = None
    allocation_left: Callable[[], float | None] | None = None
    monotonic: Callable[[], float] = time.monotonic


@dataclass(frozen=True)
class Layout:
    """How the probes run on several GPUs, for session.json and the reporter: the
    scheduler's job (JobEnv.to_dict()) and the launch, e.g. {"nproc": 4, "nodes": 1,
    "world_size": 4, "launcher": "torchrun"}. None: not known."""

    job: dict[str, Any] | None = None
    launch: dict[str, Any] | None = None


@dataclass(frozen=True)
class ResumeTerms:
    """What a resume measures again: every journaled failure (`retry_failed`; else only
    those whose cause may be gone), and the journaled baseline when the setting changed
    (`baseline_again`: its differences; "": replayed as it was)."""

    retry_failed: bool = False
    baseline_again: str = ""
