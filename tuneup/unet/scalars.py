"""TensorBoard scalars of `tuneup train`, under the tutorial's tags, so its notebooks
and TensorBoard layouts read a tuneup run as they read the tutorial's.

The mapping from metrics records to scalars is pure (testable without
tensorboard); the writer imports torch's SummaryWriter only when it is opened.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, NamedTuple

# tag -> the record field it plots, per record kind; x is always the global step.
EPOCH_TAGS = (
    ("Loss/train", "loss"),
    ("Learning Rate", "lr"),
    ("Avg iters per sec", "iters_per_s"),
    ("Samples per sec", "samples_per_s"),
)
VAL_TAGS = (("Loss/valid", "loss"),)


class Scalar(NamedTuple):
    """One TensorBoard point: add_scalar(tag, value, step)."""

    tag: str
    value: float
    step: int


def scalars_for(record: dict[str, Any]) -> list[Scalar]:
    """The scalars one metrics record adds: per epoch and per validation, as the tutorial.

    Per-window "train" records give none (the tutorial plots epochs only); a
    field that is missing or None is left out rather than plotted as zero.
    """
    tags = {"epoch": EPOCH_TAGS, "val": VAL_TAGS}.get(str(record.get("kind")), ())
    step = int(record.get("step", 0))
    out: list[Scalar] = []
    for tag, key in tags:
        value = record.get(key)
        if isinstance(value, (int, float)) and not isinstance(value, bool):
            out.append(Scalar(tag, float(value), step))
    return out


class TensorBoardSink:
    """A metrics sink writing `scalars_for` each record to a SummaryWriter, flushed per
    epoch so an interrupted run keeps its curves."""

    def __init__(self, writer: Any) -> None:
        self._writer: Any | None = writer

    def write(self, record: dict[str, Any]) -> None:
        if self._writer is None:
            return
        scalars = scalars_for(record)
        for s in scalars:
            self._writer.add_scalar(s.tag, s.value, s.step)
        if scalars:
            self._writer.flush()

    def close(self) -> None:
        if self._writer is not None:
            self._writer.close()
            self._writer = None


def open_tensorboard(log_dir: Path) -> TensorBoardSink | None:
    """A sink writing event files to `log_dir`, or None when tensorboard is not installed."""
    try:
        from torch.utils.tensorboard import SummaryWriter  # tensorboard: optional
    except ImportError:
        return None
    return TensorBoardSink(SummaryWriter(log_dir=str(log_dir)))
