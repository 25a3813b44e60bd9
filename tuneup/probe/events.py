"""The worker's event stream: one JSON object per line, written, parsed and classified.

Every line carries ``"event"`` (one of :data:`EVENT_KINDS`) and ``"time"`` (the
wall clock, so the parent can join GPU telemetry to a probe's window). Lines
are flushed one by one: whatever reached the pipe before a crash is kept.
Non-finite floats are written as JSON's ``NaN``/``Infinity`` extensions, which
Python's :mod:`json` reads back, so a diverged loss stays a float; every other figure
(a rate, seconds) that is not finite reads as missing, and a line nested deeper than
any event (`tuneup.bounded`) is no event.

Reading is done here once (`parse_event`, `event_from_record`): each line
becomes a frozen value of its kind (`StartEvent`, `WarmupEvent`, `TrialEvent`,
`LossEvent`, `ResultEvent`, `ErrorEvent`), its fields checked for type (a
number that is not one, a list that is not one, reads as missing). Everything
downstream reads attributes.

Nothing here imports torch: exceptions are classified by their type names,
modules and messages.
"""

from __future__ import annotations

import json
import re
import time
from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import PurePath
from types import MappingProxyType
from typing import IO, Any, ClassVar

from tuneup.bounded import loads
from tuneup.errors import UsageError
from tuneup.probe.figures import WorkerFigures, read_figures
from tuneup.probe.jsonvalues import (
    EMPTY,
    count,
    empty,
    finite,
    finite_map,
    finite_numbers,
    number,
    text,
)
from tuneup.probe.types import ERROR_KINDS, EVENT_KINDS
from tuneup.quoting import one_line

MESSAGE_LIMIT = 2000
"""Error messages are cut to this many characters: one event line stays one
short write, so lines from several ranks sharing a pipe do not interleave."""


@dataclass(frozen=True, kw_only=True)
class Event:
    """What every event carries.

    Attributes:
        event: the kind, one of EVENT_KINDS (a class constant).
        time: the worker's wall clock when it wrote the line; None when absent.
        raw: the whole line as read (read-only), for fields this version does
            not model (a newer worker's, a test stand-in's).
    """

    event: ClassVar[str] = ""
    time: float | None = None
    raw: Mapping[str, Any] = field(default_factory=empty, compare=False, repr=False)


@dataclass(frozen=True, kw_only=True)
class StartEvent(Event):
    """The worker is up: versions, device, ranks, the config it runs."""

    event: ClassVar[str] = "start"
    tuneup: str = ""
    torch: str = ""
    cuda: str | None = None
    device: str = ""
    device_type: str = ""
    world_size: int | None = None
    pid: int | None = None
    startup_s: float | None = None
    config: Mapping[str, Any] = field(default_factory=empty)
    served: int | None = None  # probes this process ran before (a serving worker's)
    mended: str = ""  # what the worker removed from a compile cache before it, in words


@dataclass(frozen=True, kw_only=True)
class WarmupEvent(Event):
    """Warm-up ended: how long, how many steps, one-time costs and their break-even."""

    event: ClassVar[str] = "warmup"
    seconds: float | None = None
    steps: int | None = None
    steady_step_s: float | None = None
    stable: bool | None = None
    one_time_s: Mapping[str, float] = field(default_factory=empty)
    break_even_steps: float | None = None


@dataclass(frozen=True, kw_only=True)
class TrialEvent(Event):
    """One timed trial of a phase; `index` counts from 1, dropped trials included."""

    event: ClassVar[str] = "trial"
    phase: str = ""
    index: int | None = None
    samples_per_s: float | None = None
    batches: int | None = None
    seconds: float | None = None
    rank_seconds: tuple[float, ...] = ()

    @property
    def span(self) -> tuple[float, float] | None:
        """(start, end) on the wall clock; None without a time or a duration."""
        if self.time is None or self.seconds is None or self.seconds < 0:
            return None
        return self.time - self.seconds, self.time


@dataclass(frozen=True, kw_only=True)
class LossEvent(Event):
    """The loss at one recorded step (1-based), from the fixed seed."""

    event: ClassVar[str] = "loss"
    step: int | None = None
    value: float | None = None


@dataclass(frozen=True, kw_only=True)
class ResultEvent(WorkerFigures, Event):
    """The probe's measurements (phases.run_probe's result): its figures, declared once in
    `ProbeFigures` (and the warm-up facts only the event carries, in `WorkerFigures`)."""

    event: ClassVar[str] = "result"


@dataclass(frozen=True, kw_only=True)
class ErrorEvent(Event):
    """A failure: its kind (ERROR_KINDS, or whatever the line said), message and rank."""

    event: ClassVar[str] = "error"
    kind: str = "other"
    message: str = ""
    rank: int | None = None
    kept: bool = False  # a serving worker found itself sound after it and serves on


EventHandler = Callable[[Event], None]
"""Hears each event of a running probe (the runner calls it from its reader thread)."""


def encode_event(kind: str, fields: dict[str, Any], *, now: float | None = None) -> str:
    """One event as a JSON line (no newline); refuses kinds outside EVENT_KINDS."""
    if kind not in EVENT_KINDS:
        raise ValueError(f"unknown event kind {kind!r}: expected one of {', '.join(EVENT_KINDS)}")
    record = {"event": kind, "time": time.time() if now is None else now, **fields}
    return json.dumps(record)


def parse_event(line: str) -> Event | None:
    """The event on ``line``, or None when the line is not one (blank, a stray print)."""
    text = line.strip()
    if not text.startswith("{"):
        return None
    try:
        record = loads(text, finite=False)  # a diverged loss is NaN; depth and size bounded
    except ValueError:
        return None
    if not isinstance(record, dict):
        return None
    return event_from_record(record)


def parse_events(lines: Iterator[str] | Iterable[str]) -> list[Event]:
    """Every event among ``lines``, in order, skipping lines that are not events."""
    return [event for line in lines if (event := parse_event(line)) is not None]


def event_from_record(record: Mapping[str, Any]) -> Event | None:
    """The typed event of one decoded line; None when its ``event`` is no known kind.

    A field of the wrong type reads as missing (its default): a worker's bug
    or a stray line costs that field, never the parent.
    """
    reader = _READERS.get(str(record.get("event")))
    if reader is None:
        return None
    common: dict[str, Any] = {
        "time": finite(record.get("time")),
        "raw": MappingProxyType(dict(record)),
    }
    return reader(record.get, common)


_Get = Callable[..., Any]  # the decoded line's dict.get


def _start_event(get: _Get, common: dict[str, Any]) -> Event:
    config = get("config")
    cuda = get("cuda")
    return StartEvent(
        **common,
        tuneup=text(get("tuneup")),
        torch=text(get("torch")),
        cuda=cuda if isinstance(cuda, str) else None,
        device=text(get("device")),
        device_type=text(get("device_type")),
        world_size=count(get("world_size")),
        pid=count(get("pid")),
        startup_s=finite(get("startup_s")),
        config=MappingProxyType(dict(config)) if isinstance(config, dict) else EMPTY,
        served=count(get("served")),
        mended=one_line(text(get("mended"))),
    )


def _warmup_event(get: _Get, common: dict[str, Any]) -> Event:
    stable = get("stable")
    return WarmupEvent(
        **common,
        seconds=finite(get("seconds")),
        steps=count(get("steps")),
        steady_step_s=finite(get("steady_step_s")),
        stable=stable if isinstance(stable, bool) else None,
        one_time_s=finite_map(get("one_time_s")),
        break_even_steps=finite(get("break_even_steps")),
    )


def _trial_event(get: _Get, common: dict[str, Any]) -> Event:
    return TrialEvent(
        **common,
        phase=text(get("phase")),
        index=count(get("index")),
        samples_per_s=finite(get("samples_per_s")),
        batches=count(get("batches")),
        seconds=finite(get("seconds")),
        rank_seconds=finite_numbers(get("rank_seconds")),
    )


def _loss_event(get: _Get, common: dict[str, Any]) -> Event:
    return LossEvent(**common, step=count(get("step")), value=number(get("value")))


def _result_event(get: _Get, common: dict[str, Any]) -> Event:
    return ResultEvent(**common, **read_figures(get))


def _error_event(get: _Get, common: dict[str, Any]) -> Event:
    message = get("message")
    return ErrorEvent(
        **common,
        kind=str(get("kind", "other")),
        message="" if message is None else str(message),
        rank=count(get("rank")),
        kept=get("kept") is True,
    )


_READERS: dict[str, Callable[[_Get, dict[str, Any]], Event]] = {
    "start": _start_event,
    "warmup": _warmup_event,
    "trial": _trial_event,
    "loss": _loss_event,
    "result": _result_event,
    "error": _error_event,
}


class EventWriter:
    """Writes events to a text stream, one flushed line each.

    Args:
        stream: where lines go (a pipe, stdout, or a StringIO in tests).
        enabled: False on ranks other than 0, which speak only for errors.
        clock: wall-clock source for the ``time`` field.

    ``context`` holds fields added to every error event (the rank, under DDP).
    """

    def __init__(
        self, stream: IO[str], *, enabled: bool = True, clock: Callable[[], float] = time.time
    ) -> None:
        self.stream = stream
        self.enabled = enabled
        self.clock = clock
        self.context: dict[str, Any] = {}

    def emit(self, kind: str, **fields: Any) -> None:
        if self.enabled:
            self._write(kind, fields)

    def error(self, kind: str, message: str, **fields: Any) -> None:
        """An ``error`` event; written on every rank, since any rank may be the one failing."""
        if kind not in ERROR_KINDS:
            raise ValueError(f"unknown error kind {kind!r}: expected one of {ERROR_KINDS}")
        record = {"kind": kind, "message": message[:MESSAGE_LIMIT], **self.context, **fields}
        self._write("error", record)

    def _write(self, kind: str, fields: dict[str, Any]) -> None:
        self.stream.write(encode_event(kind, fields, now=self.clock()) + "\n")
        self.stream.flush()


_CUDA_PATTERN = re.compile(
    r"CUDA error|CUDA driver|CUDA kernel|CUDA runtime|CUBLAS_STATUS|CUDNN_STATUS|cuDNN error"
    r"|cudaError|device-side assert|illegal memory access|no kernel image|CUDA-capable device"
)
_CUDA_TYPES = ("AcceleratorError", "CudaError")
_COMPILE_MODULES = ("torch._dynamo", "torch._inductor", "triton")
_COMPILE_FRAMES = (*_COMPILE_MODULES, "torch._functorch._aot_autograd")


def _chain(exc: BaseException) -> Iterator[BaseException]:
    """The exception and those it was raised from or during, without looping."""
    seen: set[int] = set()
    current: BaseException | None = exc
    while current is not None and id(current) not in seen:
        seen.add(id(current))
        yield current
        current = current.__cause__ or current.__context__


def _raised_in_compiled_code(exc: BaseException) -> bool:
    """Raised by torch.compile's own code, whatever its type: its innermost frame is
    torch.compile's machinery or the code Inductor generated, a module in its cache (the
    H200's failure was a bare AssertionError, Inductor's stride check in a compiled
    backward). A model's own error under a compiled model is the model's."""
    tb = exc.__traceback__
    if tb is None:
        return False
    while tb.tb_next is not None:
        tb = tb.tb_next
    frame = tb.tb_frame
    if str(frame.f_globals.get("__name__", "")).startswith(_COMPILE_FRAMES):
        return True
    folders = PurePath(frame.f_code.co_filename).parts[:-1]
    return any(part == "inductor" or part.startswith("torchinductor") for part in folders)


def _type_names(exc: BaseException) -> list[tuple[str, str]]:
    return [(cls.__module__, cls.__name__) for cls in type(exc).__mro__]


def classify_error(exc: BaseException) -> str:
    """Map a failure to one of ERROR_KINDS, most specific first.

    Order matters: an OOM raised inside compiled code is still an OOM, and a
    UsageError that mentions CUDA ("device=cuda but no GPU") is the user's
    configuration, not a CUDA fault.
    """
    chain = list(_chain(exc))
    for item in chain:
        item_names = [name for _, name in _type_names(item)]
        if "OutOfMemoryError" in item_names or "out of memory" in str(item).lower():
            return "oom"
    if isinstance(exc, (UsageError, NotImplementedError)):
        return "unsupported"
    message = str(exc)
    names = _type_names(exc)
    if "NCCL" in message or any(name == "DistBackendError" for _, name in names):
        return "nccl"
    if any(module.startswith(_COMPILE_MODULES) for module, _ in names):
        return "compile"
    if any(name in _CUDA_TYPES for _, name in names) or _CUDA_PATTERN.search(message):
        return "cuda"
    if "not supported" in message.lower() or "unsupported" in message.lower():
        return "unsupported"
    if any(_raised_in_compiled_code(item) for item in chain):
        return "compile"
    return "other"


def describe_error(exc: BaseException) -> str:
    """The error event's message: the type, then the whole message (the TUI shows line one)."""
    text = str(exc).strip()
    return f"{type(exc).__name__}: {text}" if text else type(exc).__name__
