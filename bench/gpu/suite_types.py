"""The values the suite's steps and driver pass around: a run's context, a finished
command, a verdict, and a step's declaration.

Kept apart from the steps themselves so each step module (suite_steps.py,
suite_ladders.py) and the driver read one definition.
"""

from __future__ import annotations

import sys
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent.parent


@dataclass
class Context:
    """What a step needs to know about this run."""

    mode: str  # "gpu" or "cpu"
    out: Path
    python: str = sys.executable
    root: Path = ROOT
    limit_s: float | None = None  # the time limit of the step about to run

    @property
    def cpu(self) -> bool:
        return self.mode == "cpu"

    def tuneup(self, *args: str) -> list[str]:
        return [self.python, "-m", "tuneup", *args]


@dataclass
class Finished:
    """A step's command after it ended (rc None: it was stopped at its time limit)."""

    rc: int | None
    stdout: str
    stderr: str
    seconds: float
    timed_out: bool = False


@dataclass
class Outcome:
    """A step's verdict: pass, fail or skipped, why, its figures and a few words for the table."""

    status: str
    why: str = ""
    figures: dict[str, Any] = field(default_factory=dict)
    key: str = ""


@dataclass(frozen=True)
class Step:
    """One ranked step of the suite.

    `greedy`: its limit is everything the run has left, not what the steps after it leave
    (the claim a window exists to test comes first; the others get what it leaves).
    `monitor`: `tuneup monitor --json` runs beside it, for exactly its duration.
    """

    name: str
    what: str
    estimate_s: dict[str, float]  # what the driver must have left to start it, per mode
    max_s: dict[str, float]  # its time limit, per mode (cut to what is left)
    command: Callable[[Context], list[str]]
    parse: Callable[[Context, Finished], Outcome]
    prepare: Callable[[Context], str | None] | None = None  # a reason to fail without running
    greedy: bool = False
    monitor: bool = False


def last_line(text: str, prefer: str = "") -> str:
    """The last non-empty line of `text` (the last one containing `prefer`, if any does)."""
    lines = [ln.strip() for ln in text.splitlines() if ln.strip()]
    if prefer:
        for line in reversed(lines):
            if prefer in line:
                return line[:300]
    return lines[-1][:300] if lines else ""


def ended(done: Finished) -> str:
    """How a command ended, in words: its time limit, or its exit status and last error."""
    if done.timed_out:
        return f"stopped at its time limit after {done.seconds:.0f}s"
    return f"exited {done.rc}: {last_line(done.stderr, 'rror') or last_line(done.stdout)}"
