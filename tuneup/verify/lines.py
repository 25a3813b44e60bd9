"""A run's figures read from its own log lines, in the tutorial's wording, which both
`tuneup train` and the tutorial's train.py write ("Time taken for epoch N is X sec, avg Y
samples/sec", "Total validation time: X sec"), whatever their logger puts before them.
Pure: lines in, figures out."""

from __future__ import annotations

import math
import re
from collections.abc import Iterable
from dataclasses import dataclass

_NUMBER = r"([-+0-9.eE]+|nan|inf)"
EPOCH_LINE = re.compile(rf"Time taken for epoch (\d+) is {_NUMBER} sec, avg {_NUMBER} samples/sec")
VAL_LINE = re.compile(rf"Total validation time: {_NUMBER} sec")


@dataclass(frozen=True)
class LoggedFigures:
    """What a run logged: (seconds, samples/s) of each epoch, each validation's seconds."""

    epochs: tuple[tuple[float, float], ...] = ()
    val_s: tuple[float, ...] = ()


def read_figures(lines: Iterable[str]) -> LoggedFigures:
    """The epochs and validations in `lines`; a line whose figures are not finite numbers
    is left out (a run cut off mid-line, a zero-second epoch)."""
    epochs: list[tuple[float, float]] = []
    val_s: list[float] = []
    for line in lines:
        found = EPOCH_LINE.search(line)
        if found:
            seconds, rate = _float(found.group(2)), _float(found.group(3))
            if seconds is not None and rate is not None:
                epochs.append((seconds, rate))
            continue
        found = VAL_LINE.search(line)
        if found:
            seconds = _float(found.group(1))
            if seconds is not None:
                val_s.append(seconds)
    return LoggedFigures(epochs=tuple(epochs), val_s=tuple(val_s))


def _float(text: str) -> float | None:
    try:
        value = float(text)
    except ValueError:
        return None
    return value if math.isfinite(value) and value >= 0 else None
