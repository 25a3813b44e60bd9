"""A `torch.profiler` Chrome trace read from its file, and the window it profiled.

tuneup's own traces (`probes/NNNN-stage.trace.json.gz`) and one a user took of
their own training (`prof.export_chrome_trace`, gzipped or not) read the same
way: the file is read once, whole, and only its events are kept. A trace does
not say how many steps it holds nor how long they took, so they are read off it:
the profiler's step markers (`ProfilerStep#N`) where it has them, else tuneup's
own `data` range (one per step), else the whole trace as one step; their length
is the profiler's own span (its `Trace` event), else the trace's extent.
"""

from __future__ import annotations

import gzip
import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from tuneup.errors import UsageError
from tuneup.probe.device_time import DEVICE_WORK, HOST_RANGES, STEP_MARKER
from tuneup.probe.timeline import breakdown, complete

GZIP_MAGIC = b"\x1f\x8b"
STEP_RANGE = "data"  # tuneup marks one per step, whatever else the step runs


@dataclass(frozen=True)
class Window:
    """The profiled steps of a trace, as read off it.

    Attributes:
        steps: how many steps the trace holds.
        step_s: the wall time of one, in seconds.
        said: how the steps were counted, in words ("7 `data` ranges").
    """

    steps: int
    step_s: float
    said: str


def read_events(path: Path) -> list[dict[str, Any]]:
    """The trace's events (its "traceEvents", or the list it is).

    Raises:
        UsageError: the file cannot be read, or is no Chrome trace.
    """
    try:
        with open(path, "rb") as raw:
            gzipped = raw.read(2) == GZIP_MAGIC
        opener = gzip.open if gzipped else open
        with opener(path, "rt", encoding="utf-8") as text:
            document = json.load(text)
    except FileNotFoundError:
        raise UsageError(
            f"trace {path}: no such file: give a torch.profiler Chrome trace"
        ) from None
    except (OSError, UnicodeDecodeError, EOFError, json.JSONDecodeError) as exc:
        raise UsageError(
            f"trace {path}: not a readable Chrome trace ({type(exc).__name__}): give the file "
            "torch.profiler's export_chrome_trace wrote (.json or .json.gz)"
        ) from None
    events = document.get("traceEvents") if isinstance(document, dict) else document
    if not isinstance(events, list):
        raise UsageError(
            f"trace {path}: holds no trace events: give the file torch.profiler's "
            "export_chrome_trace wrote"
        )
    return [event for event in events if isinstance(event, dict)]


def window(events: Sequence[Mapping[str, Any]]) -> Window:
    """The steps a trace holds and their length (the module docstring)."""
    found = complete(events)
    if not found:
        return Window(steps=1, step_s=0.0, said="no timed events")
    ranges = [e for e in found if e.get("cat") in HOST_RANGES]
    markers = [e for e in ranges if str(e.get("name", "")).startswith(STEP_MARKER)]
    own = [e for e in ranges if e.get("name") == STEP_RANGE]
    if markers:
        steps, said = len(markers), f"{len(markers)} {STEP_MARKER}N ranges"
    elif own:
        steps, said = _per_thread(own), f"tuneup's `{STEP_RANGE}` range, once per step"
    else:
        steps, said = 1, "no step markers: the whole trace as one step"
    spans = [e for e in found if e.get("cat") == "Trace"]
    if spans:
        length = max(float(e["dur"]) for e in spans)
    else:
        length = max(float(e["ts"]) + float(e["dur"]) for e in found) - min(
            float(e["ts"]) for e in found
        )
    return Window(steps=steps, step_s=length / 1e6 / steps, said=f"{steps} steps ({said})")


def _per_thread(ranges: Sequence[Mapping[str, Any]]) -> int:
    """The most ranges one thread marks (the loop's thread: one per step)."""
    counts: dict[Any, int] = {}
    for event in ranges:
        key = (event.get("pid"), event.get("tid"))
        counts[key] = counts.get(key, 0) + 1
    return max(counts.values())


def device_of(events: Sequence[Mapping[str, Any]]) -> str:
    """ "cuda" where the trace holds device work, else "cpu"."""
    return "cuda" if any(e.get("cat") in DEVICE_WORK for e in events) else "cpu"


def trace_breakdown(events: Sequence[Mapping[str, Any]]) -> tuple[dict[str, Any], Window]:
    """Where a trace's steps' time goes (probe/timeline.py), on the window read off it."""
    span = window(events)
    figures = breakdown(events, steps=span.steps, step_s=span.step_s, device=device_of(events))
    return figures, span
