"""Metrics sinks: JSON lines written as they arrive (a crash or Ctrl-C loses nothing),
and a fan-out so one run feeds several sinks (JSONL, TensorBoard) alike."""

from __future__ import annotations

import json
import math
from collections.abc import Iterable
from pathlib import Path
from typing import IO, Any, Protocol


class MetricsSink(Protocol):
    """Anything the training loop can hand its records to."""

    def write(self, record: dict[str, Any]) -> None: ...

    def close(self) -> None: ...


class MetricsWriter:
    """Append one JSON object per line and flush it at once; a no-op without a path."""

    def __init__(self, path: Path | None) -> None:
        self._file: IO[str] | None = None
        if path is not None:
            path.parent.mkdir(parents=True, exist_ok=True)
            self._file = path.open("a", encoding="utf-8")

    def write(self, record: dict[str, Any]) -> None:
        if self._file is None:
            return
        clean = {
            k: (None if isinstance(v, float) and not math.isfinite(v) else v)
            for k, v in record.items()
        }
        self._file.write(json.dumps(clean) + "\n")
        self._file.flush()

    def close(self) -> None:
        if self._file is not None:
            self._file.close()
            self._file = None


class FanOut:
    """Hand each record to every sink; close them all even when one fails to close."""

    def __init__(self, sinks: Iterable[MetricsSink]) -> None:
        self._sinks = list(sinks)

    def write(self, record: dict[str, Any]) -> None:
        for sink in self._sinks:
            sink.write(record)

    def close(self) -> None:
        error: BaseException | None = None
        for sink in self._sinks:
            try:
                sink.close()
            except BaseException as exc:  # close the others, then report the first failure
                error = error or exc
        if error is not None:
            raise error
