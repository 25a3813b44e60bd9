"""A probe's measured figures, declared once: the worker writes them, the parent reads them.

`ProbeFigures` is the one declaration of what a probe measures. The worker
fills it (worker/phases.py) and writes it as its ``result`` event
(`to_event`); the parent reads the line back field by field, each by its
declared type (`from_record`: a value of the wrong kind reads as missing, and a
figure other than the loss that is not finite as not measured);
the runner's result copies every figure the journal keeps by name
(`journal_figures`, for `tuneup.probe.outcome.build_result`), and the sim
builds the same value. A new figure is one field here, plus where it is
measured and where it is shown.

Pure: values in, values out.
"""

from __future__ import annotations

import dataclasses
import functools
import typing
from collections.abc import Callable, Mapping
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
from tuneup.probe.types import ProbeResult


def _counts(value: Any) -> tuple[int, ...]:
    return tuple(n for n in map(count, as_list(value)) if n is not None)


@dataclass(frozen=True, kw_only=True)
class ProbeFigures:
    """What one probe measured (tuneup.worker.phases: how; tuneup.probe.plan: by what plan).

    Attributes:
        io_sps, synthetic_sps, full_sps: each phase's median samples/s (None: not measured).
        *_sps_trials: each phase's trials' samples/s, in order.
        iqr_pct: FULL's trials' interquartile range, in percent of their median.
        loss_start, loss_end, losses: the fixed-seed loss steps' losses.
        scaler_overflows: fp16 loss-scaler overflows (None: not counted).
        mem_peak_mb: the CUDA caching allocator's peak (tensors only).
        warmup_s, warmup_steps, steady_step_s: the warm-ups' seconds and steps, and the
            steady step the first phase's trials were sized from.
        one_time_s, break_even_steps: the costs paid once (spawn or set-up, first steps,
            capture), and them in steady steps.
        ranks, rank_sps, stragglers: the ranks, each one's own FULL rate, the slow ones.
        trials_discarded, far_trials: trials dropped as leading outliers; far ones kept.
        stopped_early: why the trials ended early; empty when they did not.
        timed_s: seconds in timed trials (what measuring cost).
        compile_cache: "warm" or "cold" under torch.compile; "" without it.
        plan: the plan as measured, with the steps per trial each phase ran.
        profile: its steps' breakdown, where the plan asked for one.
    """

    io_sps: float | None = None
    synthetic_sps: float | None = None
    full_sps: float | None = None
    full_sps_trials: tuple[float, ...] = ()
    io_sps_trials: tuple[float, ...] = ()
    synthetic_sps_trials: tuple[float, ...] = ()
    iqr_pct: float | None = None
    loss_start: float | None = None
    loss_end: float | None = None
    losses: tuple[float, ...] = ()
    scaler_overflows: int | None = None
    mem_peak_mb: float | None = None
    warmup_s: float | None = None
    warmup_steps: int | None = None
    steady_step_s: float | None = None
    one_time_s: Mapping[str, float] = field(default_factory=empty)
    break_even_steps: float | None = None
    ranks: int | None = None
    rank_sps: tuple[float, ...] = ()
    stragglers: tuple[int, ...] = ()
    trials_discarded: int | None = None
    far_trials: int | None = None
    stopped_early: str = ""
    timed_s: float | None = None
    compile_cache: str = ""
    plan: Mapping[str, Any] = field(default_factory=empty)
    profile: Mapping[str, Any] = field(default_factory=empty)

    def to_event(self) -> dict[str, Any]:
        """The ``result`` event's fields, as JSON values."""
        return {name: _plain(getattr(self, name)) for name in figure_names()}

    @classmethod
    def from_record(cls, get: Callable[[str], Any]) -> ProbeFigures:
        """The figures of a decoded ``result`` line (`get`: its dict's get), each read by its
        declared type: a value of another kind reads as missing (its default)."""
        return cls(**read_figures(get))

    def journal_figures(self) -> dict[str, Any]:
        """The figures a journal line (`ProbeResult`) keeps, by name, as journaled: lists and
        dicts; a number not measured (None), or an empty mapping, is left to the line's
        default (or to what the warm-up event said of it)."""
        kept = _journal_names()
        found = {}
        for name in figure_names():
            value = getattr(self, name)
            if name in kept and value is not None and value != {}:
                found[name] = _plain(value)
        return found


def read_figures(get: Callable[[str], Any]) -> dict[str, Any]:
    """Each figure of a decoded line by name, read by its declared type."""
    readers = _readers()
    return {name: readers[name](get(name)) for name in figure_names()}


@functools.cache
def _journal_names() -> frozenset[str]:
    return frozenset(f.name for f in dataclasses.fields(ProbeResult))


@functools.cache
def figure_names() -> tuple[str, ...]:
    return tuple(f.name for f in dataclasses.fields(ProbeFigures))


_BY_TYPE: dict[Any, Callable[[Any], Any]] = {
    float | None: finite,
    int | None: count,
    str: text,
    tuple[float, ...]: finite_numbers,
    tuple[int, ...]: _counts,
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
    hints = typing.get_type_hints(ProbeFigures)
    return {name: _LOSS_READERS.get(name) or _BY_TYPE[hints[name]] for name in figure_names()}


def _plain(value: Any) -> Any:
    if isinstance(value, tuple):
        return list(value)
    if isinstance(value, Mapping):
        return dict(value)
    return value
