"""A probe's figures are declared once (tuneup.probe.figures): whatever the worker measures
reaches the journal line by name, and a new figure the journal does not keep is named."""

from __future__ import annotations

import dataclasses
import json
import typing
from typing import Any

from tuneup.probe.events import ResultEvent, encode_event, parse_event
from tuneup.probe.figures import ProbeFigures, figure_names
from tuneup.probe.outcome import build_result
from tuneup.probe.plan import ProbeSpec, plan_probe
from tuneup.probe.types import ProbeBudget, ProbeResult, Status

# Figures the worker reports that a journal line does not keep: each says why.
EVENT_ONLY = {
    "warmup_steps": "the warm-up's steps: the plan's warmup_s per phase is what is kept",
    "steady_step_s": "the step the trials were sized from: the plan's steps are what is kept",
}


def every_figure_set() -> ProbeFigures:
    """Figures with no field at its default, each of its declared kind."""
    values: dict[str, Any] = {}
    hints = typing.get_type_hints(ProbeFigures)
    for index, name in enumerate(figure_names(), start=1):
        hint = hints[name]
        if hint == float | None:
            values[name] = 1.5 + index
        elif hint == int | None:
            values[name] = index
        elif hint is str:
            values[name] = f"text {index}"
        elif hint == tuple[float, ...]:
            values[name] = (float(index), index + 0.25)
        elif hint == tuple[int, ...]:
            values[name] = (index,)
        else:  # a mapping
            values[name] = {"a": float(index), "b": 2.0}
    return ProbeFigures(**values)


def test_every_figure_crosses_the_pipe_as_written() -> None:
    figures = every_figure_set()
    line = encode_event("result", figures.to_event(), now=1.0)
    event = parse_event(json.dumps(json.loads(line)))  # through JSON, as the pipe carries it
    assert isinstance(event, ResultEvent)
    for name in figure_names():
        read, written = getattr(event, name), getattr(figures, name)
        assert (dict(read) if isinstance(read, typing.Mapping) else read) == written, name


def test_a_figure_of_the_wrong_kind_reads_as_missing_not_as_a_crash() -> None:
    event = parse_event('{"event": "result", "full_sps": "fast", "stragglers": [1, "x", 2]}')
    assert isinstance(event, ResultEvent)
    assert event.full_sps is None and event.stragglers == (1, 2)


def test_every_figure_the_journal_keeps_reaches_the_line_by_name() -> None:
    figures = every_figure_set()
    event = ResultEvent(**{n: getattr(figures, n) for n in figure_names()})
    spec = ProbeSpec(config={"num_data_workers": 2}, plan=plan_probe(ProbeBudget()))
    result = build_result("workers", {}, spec, [event], Status.OK, "", 3.0)
    journaled = set(f.name for f in dataclasses.fields(ProbeResult))
    for name in figure_names():
        if name in EVENT_ONLY:
            continue
        assert name in journaled, (
            f"the figure {name} is measured but no journal line keeps it: declare it on "
            "ProbeResult (tuneup/probe/types.py), or say why in EVENT_ONLY"
        )
        value = getattr(figures, name)
        expected = list(value) if isinstance(value, tuple) else value
        kept = getattr(result, name)
        assert (dict(kept) if isinstance(kept, dict) else kept) == expected, name


def test_a_failed_probe_keeps_no_rate_whatever_its_result_line_said() -> None:
    event = ResultEvent(full_sps=500.0, full_sps_trials=(500.0,))
    spec = ProbeSpec(config={}, plan=plan_probe(ProbeBudget()))
    result = build_result("amp", {}, spec, [event], Status.OOM, "out of memory", 3.0)
    assert result.full_sps is None and result.full_sps_trials == []
