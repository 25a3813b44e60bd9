"""The headless monitor: one `--once` table, or one `--json` object per interval.

Imports no Textual, so scripts and batch jobs that print a reading pay only
for rich.
"""

from __future__ import annotations

import json
import math
import time
from collections.abc import Callable, Mapping, Sequence
from typing import Any, TextIO

from rich.console import Console, JustifyMethod
from rich.table import Table

from tuneup.hardware.types import GpuBackend, GpuDevice, GpuSample
from tuneup.telemetry import readings


def snapshot_table(
    devices: Sequence[GpuDevice], samples: Sequence[GpuSample], *, title: str
) -> Table:
    """One row per GPU: the readings `nvidia-smi` users look for, and its processes."""
    by_index = {d.index: d for d in devices}
    table = Table(title=title, title_justify="left", expand=False)
    columns: tuple[tuple[str, JustifyMethod], ...] = (
        ("GPU", "right"),
        ("name", "left"),
        ("util", "right"),
        ("memory", "right"),
        ("power", "right"),
        ("temp", "right"),
        ("SM clock", "right"),
        ("mem clock", "right"),
        ("throttle", "left"),
    )
    for header, justify in columns:
        table.add_column(header, justify=justify)
    for sample in sorted(samples, key=lambda s: s.index):
        device = by_index.get(sample.index)
        slowed = readings.throttle_reasons(sample.throttle_reasons)
        table.add_row(
            str(sample.index),
            (device.name if device else None) or readings.MISSING,
            readings.pct(sample.util_gpu_pct),
            readings.memory(sample.memory_used_mb, readings.total_memory_mb(device, sample)),
            readings.power(sample.power_w, readings.power_limit_w(device, sample)),
            readings.temperature(sample.temperature_c),
            readings.clock(sample.sm_clock_mhz),
            readings.clock(sample.mem_clock_mhz),
            readings.throttle(sample.throttle_reasons),
            style="red" if slowed else None,
        )
    return table


def process_table(samples: Sequence[GpuSample]) -> Table | None:
    """The compute processes of every GPU, biggest memory users first; None if there are none."""
    rows = readings.process_rows(samples)
    if not rows:
        return None
    table = Table(title="processes", title_justify="left")
    process_columns: tuple[tuple[str, JustifyMethod], ...] = (
        ("GPU", "right"),
        ("PID", "right"),
        ("process", "left"),
    )
    for header, justify in process_columns:
        table.add_column(header, justify=justify)
    table.add_column("GPU memory", justify="right")
    for row in rows:
        table.add_row(*row)
    return table


def snapshot_record(
    devices: Sequence[GpuDevice],
    samples: Sequence[GpuSample],
    *,
    when: float,
    error: str | None = None,
    train: Mapping[str, Any] | None = None,
) -> dict[str, Any]:
    """One `--json` object: the time, each GPU's reading with its name, and any error.

    Each GPU is its `GpuSample.to_dict()` plus the device's `name`, `uuid` and
    `bus_id`, so a line is readable on its own.
    """
    by_index = {d.index: d for d in devices}
    gpus = []
    for sample in sorted(samples, key=lambda s: s.index):
        device = by_index.get(sample.index)
        gpu = {
            "name": device.name if device else None,
            "uuid": device.uuid if device else None,
            "bus_id": device.bus_id if device else None,
        }
        gpu.update(sample.to_dict())
        gpus.append(gpu)
    record: dict[str, Any] = {"time": when, "gpus": gpus}
    if error is not None:
        record["error"] = error
    if train is not None:
        record["train"] = dict(train)
    return record


def json_line(record: Mapping[str, Any]) -> str:
    """The record as one line of strict JSON (a NaN reading becomes null)."""
    return json.dumps(_finite(record), separators=(",", ":"), allow_nan=False)


def _finite(value: Any) -> Any:
    if isinstance(value, float) and not math.isfinite(value):
        return None
    if isinstance(value, Mapping):
        return {k: _finite(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_finite(v) for v in value]
    return value


def _round_key(samples: Sequence[GpuSample]) -> tuple[tuple[int, float], ...]:
    return tuple((s.index, s.time) for s in samples)


def print_once(backend: GpuBackend, *, title: str, console: Console) -> None:
    """One reading of every GPU as a table, or the line saying why there is none."""
    ok, why = backend.available()
    devices = backend.devices() if ok else []
    if not ok or not devices:
        console.print(readings.no_gpu_message(why or "none visible to this process"))
        return
    samples = backend.sample()
    console.print(snapshot_table(devices, samples, title=title))
    processes = process_table(samples)
    if processes is not None:
        console.print(processes)


def stream_json(
    backend: GpuBackend,
    *,
    interval_s: float,
    out: TextIO,
    once: bool = False,
    train: Callable[[], Mapping[str, Any] | None] | None = None,
    sleep: Callable[[float], None] = time.sleep,
    clock: Callable[[], float] = time.time,
) -> int:
    """Print one JSON object per interval; returns how many were printed.

    Stops after one with `once`, when no GPU can be read (one object with an
    "error"), and when the source repeats its last round: a replayed trace at
    its end. `train` gives the newest training record to add, if any.
    """
    ok, why = backend.available()
    devices = backend.devices() if ok else []
    if not ok or not devices:
        error = readings.no_gpu_message(why or "none visible to this process")
        out.write(json_line(snapshot_record([], [], when=clock(), error=error)) + "\n")
        out.flush()
        return 1
    printed = 0
    previous: tuple[tuple[int, float], ...] | None = None
    while True:
        started = time.monotonic()
        samples = backend.sample()
        key = _round_key(samples)
        if printed and (not samples or key == previous):  # nothing new: the trace ended
            return printed
        when = max((s.time for s in samples), default=clock())
        record = snapshot_record(devices, samples, when=when, train=train() if train else None)
        out.write(json_line(record) + "\n")
        out.flush()
        printed += 1
        if once:
            return printed
        previous = key
        # The time spent reading and printing comes off the nap, so a slow
        # driver call does not stretch the interval.
        sleep(max(0.0, interval_s - (time.monotonic() - started)))
