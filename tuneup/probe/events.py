"""The worker's event stream: one JSON object per line, written, parsed and classified.

Every line carries ``"event"`` (one of :data:`EVENT_KINDS`) and ``"time"`` (the
wall clock, so the parent can join GPU telemetry to a probe's window). Lines
are flushed one by one: whatever reached the pipe before a crash is kept.
Non-finite floats are written as JSON's ``NaN``/``Infinity`` extensions, which
Python's :mod:`json` reads back, so a diverged loss stays a float.

Nothing here imports torch: exceptions are classified by their type names,
modules and messages.
"""

from __future__ import annotations

import json
import re
import time
from collections.abc import Callable, Iterator
from typing import IO, Any

from tuneup.errors import UsageError
from tuneup.probe.types import ERROR_KINDS, EVENT_KINDS

MESSAGE_LIMIT = 2000
"""Error messages are cut to this many characters: one event line stays one
short write, so lines from several ranks sharing a pipe do not interleave."""


def encode_event(kind: str, fields: dict[str, Any], *, now: float | None = None) -> str:
    """One event as a JSON line (no newline); refuses kinds outside EVENT_KINDS."""
    if kind not in EVENT_KINDS:
        raise ValueError(f"unknown event kind {kind!r}: expected one of {', '.join(EVENT_KINDS)}")
    record = {"event": kind, "time": time.time() if now is None else now, **fields}
    return json.dumps(record)


def parse_event(line: str) -> dict[str, Any] | None:
    """The event on ``line``, or None when the line is not one (blank, a stray print)."""
    text = line.strip()
    if not text.startswith("{"):
        return None
    try:
        record = json.loads(text)
    except ValueError:
        return None
    if not isinstance(record, dict) or record.get("event") not in EVENT_KINDS:
        return None
    return record


def parse_events(lines: Iterator[str] | list[str]) -> list[dict[str, Any]]:
    """Every event among ``lines``, in order, skipping lines that are not events."""
    return [event for line in lines if (event := parse_event(line)) is not None]


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


def _chain(exc: BaseException) -> Iterator[BaseException]:
    """The exception and those it was raised from or during, without looping."""
    seen: set[int] = set()
    current: BaseException | None = exc
    while current is not None and id(current) not in seen:
        seen.add(id(current))
        yield current
        current = current.__cause__ or current.__context__


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
        names = [name for _, name in _type_names(item)]
        if "OutOfMemoryError" in names or "out of memory" in str(item).lower():
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
    return "other"


def describe_error(exc: BaseException) -> str:
    """The error event's message: the type, then the whole message (the TUI shows line one)."""
    text = str(exc).strip()
    return f"{type(exc).__name__}: {text}" if text else type(exc).__name__
