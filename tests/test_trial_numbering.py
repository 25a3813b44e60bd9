"""The first trial of a probe is trial 1, in the CLI's progress bar as in the app."""

from __future__ import annotations

import io

import pytest

from tuneup.commands.progress import RichReporter
from tuneup.probe.events import EventWriter, TrialEvent, parse_events
from tuneup.probe.plan import plan_probe
from tuneup.probe.types import ProbeBudget
from tuneup.worker.phases import run_trials

pytest.importorskip("textual")
from tuneup.tui.screens.tune import phase_text


class StepClock:
    """A timer whose clock moves one second each time it is read."""

    def __init__(self) -> None:
        self.t = 0.0

    def sync(self) -> None:
        pass

    def now(self) -> float:
        self.t += 1.0
        return self.t


def first_trial() -> TrialEvent:
    """The first FULL trial as the worker writes it on its pipe and the runner reads it back."""
    stream = io.StringIO()
    writer = EventWriter(stream, clock=lambda: 100.0)
    run_trials(
        "full",
        lambda steps: steps,
        plan_probe(ProbeBudget(min_trials=1, max_trials=1)),
        steps=2,
        samples_per_batch=4,
        timer=StepClock(),
        emit=writer.emit,
    )
    (event,) = parse_events(stream.getvalue().splitlines())
    assert isinstance(event, TrialEvent)
    return event


def test_the_cli_and_the_app_both_call_the_first_trial_trial_1() -> None:
    event = first_trial()
    reporter = RichReporter()
    reporter.probe_start("baseline", "baseline")

    reporter.event(event)

    bar = next(t for t in reporter.progress.tasks if t.id == reporter.current)
    assert bar.description.startswith("full trial 1: ")
    assert (phase_text(event) or "").startswith("FULL trial 1: ")
