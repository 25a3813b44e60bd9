"""`tuneup monitor`: watch the GPUs full-screen, or print them once or as JSON lines.

Textual is imported only on the full-screen path: `--once` and `--json`
must answer quickly in scripts and batch jobs.
"""

from __future__ import annotations

import itertools
import json
import os
import statistics
import sys
import time
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any, TextIO

from rich.console import Console

from tuneup.cluster.job import read_job_env
from tuneup.commands.app_deps import require_app, require_terminal
from tuneup.errors import ExitCode, UsageError
from tuneup.hardware.backends import choose_backend
from tuneup.hardware.devices import cuda_visible_devices
from tuneup.hardware.nvml import NvmlBackend
from tuneup.hardware.replay import RecordingBackend, TraceRecorder
from tuneup.hardware.types import GpuBackend
from tuneup.paths import output_file
from tuneup.telemetry.once import print_once, stream_json
from tuneup.telemetry.readings import job_text
from tuneup.telemetry.sampler import Sampler

MIN_INTERVAL_S = 0.1
DEFAULT_INTERVAL_S = 0.5
SAMPLER_ROUNDS = 64


class TrainMetricsTail:
    """The records a training run appends to its `--metrics` JSON-lines file, as they come.

    The file may not exist yet (the run has not started), may end in half a
    line (being written), or may start over (a new run truncated it): each
    call returns the whole lines added since the last one, and never raises
    for any of these.
    """

    def __init__(self, path: Path) -> None:
        self.path = path
        self._offset = 0
        self._partial = b""
        self.latest: dict[str, Any] | None = None  # the newest "train" record

    def read_new(self) -> list[dict[str, Any]]:
        try:
            with self.path.open("rb") as file:
                size = os.fstat(file.fileno()).st_size
                if size < self._offset:  # truncated: a new run writes the file again
                    self._offset, self._partial = 0, b""
                file.seek(self._offset)
                chunk = file.read()
        except OSError:
            return []
        self._offset += len(chunk)
        lines = (self._partial + chunk).split(b"\n")
        self._partial = lines.pop()
        records = []
        for line in lines:
            try:
                record = json.loads(line)
            except ValueError:  # a stray line (a log message, a torn write): skipped
                continue
            if isinstance(record, dict):
                records.append(record)
                if record.get("kind") == "train":
                    self.latest = record
        return records

    def newest_train(self) -> dict[str, Any] | None:
        """Read what is new and return the newest "train" record so far."""
        self.read_new()
        return self.latest


def _check_args(
    interval: float | None, record: Path | None, replay: Path | None, attach: Path | None
) -> None:
    if interval is not None and not interval >= MIN_INTERVAL_S:
        raise UsageError(f"--interval {interval:g} is too short: use {MIN_INTERVAL_S} s or more")
    if record is not None and replay is not None and record.resolve() == replay.resolve():
        raise UsageError("--record FILE would overwrite the --replay trace: record to another file")
    if attach is not None and attach.is_dir():
        raise UsageError(
            f"--attach {attach} is a folder: give the file of `tuneup train --metrics FILE`"
        )
    if record is not None:
        output_file(record, "--record", "the trace file")


def _replay_interval(backend: GpuBackend) -> float:
    """The trace's own pace (the median gap between its frames), at least 0.1 s."""
    frames = getattr(backend, "frames", None)
    if not frames or len(frames) < 2:
        return DEFAULT_INTERVAL_S
    gaps = [b.time - a.time for a, b in itertools.pairwise(frames) if b.time > a.time]
    return max(MIN_INTERVAL_S, statistics.median(gaps)) if gaps else DEFAULT_INTERVAL_S


def _source_name(backend: GpuBackend, replay: Path | None) -> str:
    if replay is not None:
        return f"replay {replay.name}"
    return {"nvml": "NVML", "none": "no GPU"}.get(backend.name, backend.name)


def run_monitor_command(
    interval: float | None = None,
    once: bool = False,
    as_json: bool = False,
    record: Path | None = None,
    replay: Path | None = None,
    attach: Path | None = None,
    *,
    backend: GpuBackend | None = None,
    environ: Mapping[str, str] | None = None,
    out: TextIO | None = None,
    sleep: Callable[[float], None] = time.sleep,
) -> int:
    """Run `tuneup monitor`; returns the exit status.

    Args:
        interval: seconds between readings (None: 0.5 s, or a replayed trace's own pace).
        once: print one reading and exit.
        as_json: print JSON lines instead of a table or the full screen.
        record: also write every reading to this trace file.
        replay: read GPUs from this trace instead of NVML.
        attach: a `tuneup train --metrics` file to chart (and add to `--json` lines).
        backend, environ, out, sleep: stand-ins for tests (the GPU source,
            os.environ, stdout, time.sleep).
    """
    _check_args(interval, record, replay, attach)
    if not (once or as_json):
        require_app("the full-screen monitor", "tuneup monitor --once / --json")
        require_terminal(
            "the live monitor",
            "--once for one table or --json for JSON lines",
            [("standard output", out or sys.stdout)],
        )
    env = os.environ if environ is None else environ
    job = read_job_env(env)
    for ignored in job.ignored:
        print(f"tuneup: warning: {ignored.line}", file=sys.stderr)
    if backend is None:
        backend = choose_backend(replay, cuda_visible_devices=cuda_visible_devices(env))
    if interval is None:
        interval = _replay_interval(backend) if replay is not None else DEFAULT_INTERVAL_S
    source = _source_name(backend, replay)
    job_gpus = job.gpus if job.gpus is not None else _visible_gpus(backend)
    tail = TrainMetricsTail(attach) if attach is not None else None
    if record is not None:
        backend = RecordingBackend(backend, TraceRecorder(record))
    try:
        if once or as_json:
            return _headless(
                backend, interval, once, as_json, source, job.job_id, job_gpus, tail, out, sleep
            )
        return _full_screen(backend, interval, source, job.job_id, job_gpus, tail, attach)
    finally:
        backend.close()


def _visible_gpus(backend: GpuBackend) -> tuple[int, ...] | None:
    """The NVML indices CUDA_VISIBLE_DEVICES narrows the watch to; None when it does not."""
    if not isinstance(backend, NvmlBackend):
        return None
    return backend.selection().watched


def _headless(
    backend: GpuBackend,
    interval: float,
    once: bool,
    as_json: bool,
    source: str,
    job_id: str | None,
    job_gpus: Sequence[int] | None,
    tail: TrainMetricsTail | None,
    out: TextIO | None,
    sleep: Callable[[float], None],
) -> int:
    stream = out if out is not None else sys.stdout
    if as_json:
        stream_json(
            backend,
            interval_s=interval,
            out=stream,
            once=once,
            train=tail.newest_train if tail is not None else None,
            sleep=sleep,
        )
        return ExitCode.OK
    # A pipe or a file gets the table's natural width, not 80 wrapped columns.
    width = None if stream.isatty() else 200
    title = f"{source} · {job_text(job_id, job_gpus)}"
    print_once(backend, title=title, console=Console(file=stream, width=width))
    return ExitCode.OK


def _full_screen(
    backend: GpuBackend,
    interval: float,
    source: str,
    job_id: str | None,
    job_gpus: Sequence[int] | None,
    tail: TrainMetricsTail | None,
    attach: Path | None,
) -> int:
    # Textual: only the full screen needs it
    from tuneup.tui.monitor_app import MonitorApp
    from tuneup.tui.screens.monitor import MonitorScreen

    app = MonitorApp(
        MonitorScreen(
            # The screen keeps its own chart history: the sampler holds only the rounds
            # between two polls (a few seconds' worth at the shortest interval).
            Sampler(backend, interval_s=interval, capacity=SAMPLER_ROUNDS),
            source=source,
            job_id=job_id,
            visible_gpus=job_gpus,
            train_feed=tail,
            train_source=attach.name if attach is not None else None,
            close_backend=False,  # the caller closes it
        )
    )
    app.run()
    return ExitCode.OK
