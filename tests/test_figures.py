"""A probe's figures are declared once (tuneup.probe.figures): whatever the worker measures
reaches the journal line by name, and the journaled probe declares none of them again."""

from __future__ import annotations

import dataclasses
import inspect
import json
import typing
from collections.abc import Mapping, Sequence
from types import MappingProxyType
from typing import Any

from tuneup.probe.events import ResultEvent, StartEvent, encode_event, parse_event
from tuneup.probe.figures import ProbeFigures, WorkerFigures, figure_names, reported_names
from tuneup.probe.outcome import build_result
from tuneup.probe.plan import ProbeSpec, plan_probe
from tuneup.probe.types import ProbeBudget, ProbeResult, Status


def every_figure_set() -> WorkerFigures:
    """Figures with no field at its default, each of its declared kind."""
    values: dict[str, Any] = {}
    hints = typing.get_type_hints(WorkerFigures)
    for index, name in enumerate(reported_names(), start=1):
        hint = hints[name]
        if hint == float | None:
            values[name] = 1.5 + index
        elif hint in (int | None, int):
            values[name] = index + 1
        elif hint is str:
            values[name] = f"text {index}"
        elif hint == Sequence[float]:
            values[name] = (float(index), index + 0.25)
        elif hint == Sequence[int]:
            values[name] = (index,)
        else:  # a mapping
            values[name] = {"a": float(index), "b": 2.0}
    return WorkerFigures(**values)


def test_every_figure_crosses_the_pipe_as_written() -> None:
    figures = every_figure_set()
    line = encode_event("result", figures.to_event(), now=1.0)
    event = parse_event(json.dumps(json.loads(line)))  # through JSON, as the pipe carries it
    assert isinstance(event, ResultEvent)
    for name in reported_names():
        read, written = getattr(event, name), getattr(figures, name)
        assert (dict(read) if isinstance(read, typing.Mapping) else read) == written, name


def test_a_figure_of_the_wrong_kind_reads_as_missing_not_as_a_crash() -> None:
    line = '{"event": "result", "full_sps": "fast", "stragglers": [1, "x", 2], "far_trials": "2"}'
    event = parse_event(line)
    assert isinstance(event, ResultEvent)
    assert event.full_sps is None and event.stragglers == (1, 2)
    assert event.far_trials == 0 and event.ranks == 1  # missing or of another kind: defaults


def test_no_figure_is_declared_again_on_the_journaled_probe() -> None:
    again = set(inspect.get_annotations(ProbeResult)) & set(figure_names())
    assert not again, (
        f"{sorted(again)} declared on ProbeResult (tuneup/probe/types.py) as well as on "
        "ProbeFigures (tuneup/probe/figures.py): declare a figure once, in ProbeFigures"
    )
    assert issubclass(ProbeResult, ProbeFigures)
    assert [f.name for f in dataclasses.fields(ProbeFigures)] == list(figure_names())


def test_a_result_built_from_a_worker_result_event_carries_every_figure() -> None:
    figures = every_figure_set()
    event = ResultEvent(**{n: getattr(figures, n) for n in reported_names()})
    spec = ProbeSpec(config={"num_data_workers": 2}, plan=plan_probe(ProbeBudget()))
    result = build_result("workers", {}, spec, [event], Status.OK, "", 3.0)
    for name in figure_names():
        value = getattr(figures, name)
        expected = list(value) if isinstance(value, tuple) else value
        kept = getattr(result, name)
        assert (dict(kept) if isinstance(kept, Mapping) else kept) == expected, name
    line = result.to_journal()
    assert set(figure_names()) <= set(line)
    assert ProbeResult.from_journal(json.loads(json.dumps(line))) == result
    # The warm-up facts the trials were sized from are the event's alone.
    event_only = set(reported_names()) - set(figure_names())
    assert event_only == {"warmup_steps", "steady_step_s"}
    assert not event_only & set(line)
    assert not event_only & {f.name for f in dataclasses.fields(ProbeResult)}


def test_a_result_holds_its_figures_as_its_journal_line_does() -> None:
    """Tuples and read-only mappings handed to a result are kept as lists and dicts: the line
    it writes reads back equal to it."""
    result = ProbeResult(
        "amp",
        {},
        {"amp": True},
        Status.OK,
        full_sps=10.0,
        full_sps_trials=(9.0, 11.0),
        stragglers=(1,),
        profile=MappingProxyType({"trace": "t.json"}),
    )
    assert result.full_sps_trials == [9.0, 11.0] and result.stragglers == [1]
    assert type(result.profile) is dict and type(result.plan) is dict
    line = json.loads(json.dumps(result.to_journal()))
    assert list(line)[:5] == ["stage", "variant", "config", "status", "reason"]
    assert ProbeResult.from_journal(line) == result


def test_a_line_written_before_the_figures_were_declared_apart_reads_as_it_did() -> None:
    line = {
        "stage": "amp",
        "variant": {"amp": True},
        "config": {"amp": True},
        "status": "ok",
        "reason": "",
        "full_sps": 100.0,
        "full_sps_trials": [99.0, 101.0],
        "one_time_s": {"spawn": 1.5},
        "scaler_overflows": 0,
        "ranks": 2,
        "stragglers": [1],
        "trials_discarded": 1,
        "far_trials": 0,
        "wall_s": 4.0,
    }
    result = ProbeResult.from_journal(line)
    assert result.full_sps_trials == [99.0, 101.0] and result.ranks == 2
    assert result.far_trials == 0 and result.trials_discarded == 1
    assert result.one_time_s == {"spawn": 1.5}
    assert {k: v for k, v in result.to_journal().items() if k in line} == line


def test_a_failed_probe_keeps_no_rate_whatever_its_result_line_said() -> None:
    event = ResultEvent(full_sps=500.0, full_sps_trials=(500.0,))
    spec = ProbeSpec(config={}, plan=plan_probe(ProbeBudget()))
    result = build_result("amp", {}, spec, [event], Status.OOM, "out of memory", 3.0)
    assert result.full_sps is None and result.full_sps_trials == []


def test_a_result_line_naming_no_ranks_takes_the_start_events_world_size() -> None:
    spec = ProbeSpec(config={}, plan=plan_probe(ProbeBudget()))
    start = StartEvent(world_size=4)
    quiet = build_result("ddp", {}, spec, [start, ResultEvent(full_sps=5.0)], Status.OK, "", 1.0)
    said = build_result("ddp", {}, spec, [start, ResultEvent(ranks=4)], Status.OK, "", 1.0)
    assert quiet.ranks == 4 and said.ranks == 4
    alone = build_result("ddp", {}, spec, [ResultEvent(full_sps=5.0)], Status.OK, "", 1.0)
    assert alone.ranks == 1
