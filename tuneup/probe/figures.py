"""A probe's measured figures, declared once: the worker writes them, the journal keeps them.

`ProbeFigures` is the one declaration of what a probe measures, and of how a
journal line keeps it: `tuneup.probe.types.ProbeResult` (the journaled probe)
subclasses it and declares none of its fields again. The worker fills
`WorkerFigures` (the figures, and the warm-up facts its trials were sized
from; worker/phases.py) and writes it as its ``result`` event (`to_event`);
the parent reads the line back field by field, each by its declared type
(`read_figures`: a value of the wrong kind reads as missing, and a figure
other than the loss that is not finite as not measured); `build_result`
(tuneup.probe.outcome) copies every figure into the result by name
(`journal_figures`), and the sim builds the same value. A new figure is one
field here, plus where it is measured and where it is shown.

Pure: values in, values out.
"""

from __future__ import annotations

import dataclasses
import functools
import typing
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from tuneup.probe.jsonvalues import (
    as_list,
    count,
    empty,
    finite,
    finite_map,
    finite_numbers,
    frozen_map,
    number,
    numbers,
    text,
)


def _counts(value: Any) -> tuple[int, ...]:
    return tuple(n for n in map(count, as_list(value)) if n is not None)


@dataclass(frozen=True, kw_only=True)
class ProbeFigures:
    """What one probe measured (tuneup.worker.phases: how; tuneup.probe.plan: by what plan).

    Lists of figures are any sequence here (the worker's are tuples, a journal line's
    lists), mappings any mapping (a read-only one in an event, a dict in a result).

    Attributes:
        io_sps, synthetic_sps, full_sps: each phase's median samples/s (None: not measured).
            Under several ranks `full_sps` is the job's, set by the slowest rank.
        *_sps_trials: each phase's trials' samples/s, in order.
        iqr_pct: FULL's trials' interquartile range, in percent of their median.
        loss_start, loss_end, losses: the fixed-seed loss steps' losses.
        scaler_overflows: fp16 loss-scaler overflows (0 without a scaler).
        mem_peak_mb: the CUDA caching allocator's peak (tensors only).
        warmup_s: the warm-ups' seconds.
        one_time_s, break_even_steps: the costs paid once (spawn or set-up, first steps,
            capture), and them in steady steps.
        ranks, rank_sps, stragglers: the ranks it ran with, each one's own FULL rate (its
            local batch over its own trial times), the slow ones.
        trials_discarded: leading trials dropped as outliers (late one-time work) and
            replaced by more trials.
        far_trials: trials far from their siblings that stayed after being measured again
            (tuneup.worker.trials.far_trial): its figure may be off, and it says so.
        stopped_early: why the trials ended early (clearly slower than it had to be); empty
            when they did not.
        timed_s: seconds in timed trials (what measuring cost: the part of a result's
            wall_s that measured).
        compile_cache: under torch.compile, "cold" when it compiled its graphs (first_steps
            holds that), "warm" when they came from the compile cache; "" without it.
        plan: the plan as measured (tuneup.probe.plan.MeasurementPlan.to_dict): its phases,
            the one that judges it, trial length and counts, warm-up rule; with `steps`, the
            steps per trial each phase ran. Empty: an older probe.
        profile: where a profiled probe's step time went (probe/timeline.py: its parts, the
            GPU's busy and idle time, the top operators, TFLOP/s and MFU, the trace's file
            name). Empty: not profiled. PROFILE_MISSING: what it lacks and why.
    """

    io_sps: float | None = None
    synthetic_sps: float | None = None
    full_sps: float | None = None
    full_sps_trials: Sequence[float] = ()
    io_sps_trials: Sequence[float] = ()
    synthetic_sps_trials: Sequence[float] = ()
    iqr_pct: float | None = None
    loss_start: float | None = None
    loss_end: float | None = None
    losses: Sequence[float] = ()
    scaler_overflows: int = 0
    mem_peak_mb: float | None = None
    warmup_s: float | None = None
    one_time_s: Mapping[str, float] = field(default_factory=empty)
    break_even_steps: float | None = None
    ranks: int = 1
    rank_sps: Sequence[float] = ()
    stragglers: Sequence[int] = ()
    trials_discarded: int = 0
    far_trials: int = 0
    stopped_early: str = ""
    timed_s: float | None = None
    compile_cache: str = ""
    plan: Mapping[str, Any] = field(default_factory=empty)
    profile: Mapping[str, Any] = field(default_factory=empty)

    def to_event(self) -> dict[str, Any]:
        """The ``result`` event's fields, as JSON values: every figure this value holds."""
        names = reported_names()
        return {
            f.name: _plain(getattr(self, f.name))
            for f in dataclasses.fields(self)
            if f.name in names
        }

    def journal_figures(self) -> dict[str, Any]:
        """The figures a journal line (`ProbeResult`) keeps, by name, as journaled: lists and
        dicts; a number not measured (None), or an empty mapping, is left to the line's
        default (or to what the warm-up event said of it)."""
        found = {}
        for name in figure_names():
            value = getattr(self, name)
            if value is not None and value != {}:
                found[name] = _plain(value)
        return found


@dataclass(frozen=True, kw_only=True)
class WorkerFigures(ProbeFigures):
    """What the worker reports as its ``result`` event: a probe's figures, and the warm-up
    facts its trials were sized from, which no journal line keeps (the plan's `warmup_s`
    per phase and `steps` are what is kept).

    Attributes:
        warmup_steps: the warm-up's steps.
        steady_step_s: the steady step the first phase's trials were sized from.
    """

    warmup_steps: int | None = None
    steady_step_s: float | None = None


def read_figures(get: Callable[[str], Any]) -> dict[str, Any]:
    """Each figure of a decoded ``result`` line the line holds, by name, read by its declared
    type; one of another kind, or missing, is left out (its default)."""
    readers = _readers()
    found = ((name, readers[name](get(name))) for name in reported_names())
    return {name: value for name, value in found if value is not None}


@functools.cache
def figure_names() -> tuple[str, ...]:
    """The figures a journal line keeps (`ProbeFigures`'s fields)."""
    return tuple(f.name for f in dataclasses.fields(ProbeFigures))


@functools.cache
def reported_names() -> tuple[str, ...]:
    """Every figure a ``result`` event carries (`WorkerFigures`'s fields)."""
    return tuple(f.name for f in dataclasses.fields(WorkerFigures))


_BY_TYPE: dict[Any, Callable[[Any], Any]] = {
    float | None: finite,
    int | None: count,
    int: count,
    str: text,
    Sequence[float]: finite_numbers,
    Sequence[int]: _counts,
    Mapping[str, float]: finite_map,
    Mapping[str, Any]: frozen_map,
}
# A diverged loss is NaN or infinite, and the loss guard reads it so; every other figure is
# finite or missing (a rate of a trial timed at 0 s is infinite, and decides nothing).
_LOSS_READERS: dict[str, Callable[[Any], Any]] = {
    "loss_start": number,
    "loss_end": number,
    "losses": numbers,
}


@functools.cache
def _readers() -> dict[str, Callable[[Any], Any]]:
    """Each figure's reader, by its declared type (a new type needs its reader here)."""
    hints = typing.get_type_hints(WorkerFigures)
    return {name: _LOSS_READERS.get(name) or _BY_TYPE[hints[name]] for name in reported_names()}


def _plain(value: Any) -> Any:
    if isinstance(value, tuple):
        return list(value)
    if isinstance(value, Mapping):
        return dict(value)
    return value
