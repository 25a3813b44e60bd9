"""Metrics sinks: JSON lines written as they arrive (a crash or Ctrl-C loses nothing),
and a fan-out so one run feeds several sinks (JSONL, TensorBoard) alike."""

from __future__ import annotations

import contextlib
import errno
import json
import math
from collections.abc import Iterable
from pathlib import Path
from typing import IO, Any, Protocol

from tuneup.paths import is_storage_error, mend, storage_fault


class MetricsSink(Protocol):
    """Anything the training loop can hand its records to."""

    def write(self, record: dict[str, Any]) -> None: ...

    def close(self) -> None: ...


class MetricsWriter:
    """Append one JSON object per line and flush it at once; a no-op without a path.

    A write the storage refuses (a disk that filled mid-run) ends the run with the one
    line of tuneup.paths naming the file and its folder, not at the end of training.
    """

    def __init__(self, path: Path | None) -> None:
        self._file: IO[str] | None = None
        self.path = path
        if path is not None:
            path.parent.mkdir(parents=True, exist_ok=True)
            self._file = path.open("a", encoding="utf-8")

    def write(self, record: dict[str, Any]) -> None:
        if self._file is None or self.path is None:
            return
        clean = {
            k: (None if isinstance(v, float) and not math.isfinite(v) else v)
            for k, v in record.items()
        }
        try:
            self._file.write(json.dumps(clean) + "\n")
            self._file.flush()
        except OSError as exc:
            self._drop()  # its close would only fail the same way again
            if not is_storage_error(exc):
                raise
            raise storage_fault(
                self.path,
                exc,
                "the metrics file",
                kept="the lines before are kept",
                then=f"{_mend(exc, self.path.parent)}, or give --metrics another path",
            ) from None

    def _drop(self) -> None:
        """Let go of a file whose buffer the storage refused (its close would raise)."""
        file, self._file = self._file, None
        if file is not None:
            with contextlib.suppress(OSError):
                file.close()

    def close(self) -> None:
        if self._file is not None:
            self._file.close()
            self._file = None


def _mend(exc: OSError, folder: Path) -> str:
    """The fix, naming the metrics file's folder."""
    if exc.errno in (errno.ENOSPC, errno.EDQUOT, errno.EFBIG):
        return f"free some space in {folder}"
    return mend(exc, str(folder))


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
