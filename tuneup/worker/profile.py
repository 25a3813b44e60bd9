"""A probe's profile: a few of its steady FULL steps under torch.profiler, after its trials.

SC22 tunes by reading a timeline at every change; a probe that is asked for a
profile (`MeasurementPlan.profile`: the baseline, an adopted configuration's
check, the recommendation) runs, in the same worker right after its timed
trials, about a trial's worth of real FULL steps (`profile_steps`: 3 to 30)
under `torch.profiler` (CPU activities, and CUDA's where the step runs there),
with the step's parts marked as the tutorial names them (unet/ranges.py). The
trace is written beside the probe's spec as `NNNN-stage.trace.json.gz`
(Chrome trace format: Perfetto and chrome://tracing open it), and read back
into where the step's time goes (probe/timeline.py), with the achieved TFLOP/s
and MFU from the model's FLOPs. The profiled steps are timed apart from the
trials: what the profiler costs them is `overhead`, against the trials' step, and what
the whole profile cost the probe (its steps, the trace written, the breakdown) is
`seconds`. `TUNEUP_PROFILE=0` in the environment takes none (bench/profile_cost.py
compares ladders with and without).

A trace that cannot be written or read (a full TMPDIR cuts the profiler's export
short) costs the probe nothing: the profile keeps what the wall clock measured (the
step, TFLOP/s, the overhead) and says, in `missing`, why it has no breakdown or no
trace file, naming TMPDIR or the folder.
"""

from __future__ import annotations

import contextlib
import gzip
import json
import os
import shutil
import tempfile
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any

from tuneup.paths import why
from tuneup.probe.timeline import breakdown, rounded
from tuneup.probe.types import PROFILE_MISSING as MISSING
from tuneup.unet.ranges import marking

if TYPE_CHECKING:
    from tuneup.worker.workload import SetupWorkload

OFF_ENV = "TUNEUP_PROFILE"
NSYS_ENV = "TUNEUP_NSYS"  # `tuneup profile --nsys`: open nsys's capture range here
STEPS = (3, 30)  # the fewest and the most steps a profile takes
NO_BREAKDOWN = "no breakdown: "  # how `missing` starts where the trace could not be read


class TraceLost(Exception):
    """A trace that could not be written or read back: why, in one line naming where."""


def profile_steps(trial_steps: int) -> int:
    """About one trial's steps, never fewer than 3 (one step says little) nor more than 30
    (the tutorial's window: more adds to the trace's size, not to what it shows)."""
    low, high = STEPS
    return max(low, min(high, trial_steps))


def take_profile(
    workload: SetupWorkload,
    steps: int,
    trace: Path | None,
    *,
    flops_per_sample: float | None = None,
    peak_tflops: float | None = None,
    steady_step_s: float | None = None,
) -> dict[str, Any]:
    """Profile `steps` FULL steps; their breakdown, the trace's file name and the overhead."""
    import torch  # torch: the worker's setup is built, CUDA is up where it is used
    from torch.profiler import ProfilerActivity, profile

    taken = time.perf_counter()
    device = workload.setup.device.type
    activities = [ProfilerActivity.CPU]
    if device == "cuda":
        activities.append(ProfilerActivity.CUDA)
    timer = workload.timer
    timer.sync()
    nvtx = device == "cuda" and torch.cuda.is_available()
    capture = nvtx and os.environ.get(NSYS_ENV) == "1"  # under nsys: its capture range
    with marking(nvtx=nvtx), profile(activities=activities) as prof:
        if capture:
            torch.cuda.profiler.start()
        began = timer.now()
        workload.full(steps)
        timer.sync()
        wall = timer.now() - began
        if capture:
            torch.cuda.profiler.stop()
    step_s = wall / max(1, steps)
    clocked: dict[str, Any] = {}  # what the wall clock measured, with or without a trace
    batch = workload.setup.global_batch
    if flops_per_sample:
        tflops = flops_per_sample * batch / step_s / 1e12
        clocked["tflops"] = tflops
        clocked["mfu"] = tflops / peak_tflops if peak_tflops else None
    if steady_step_s:
        clocked["overhead"] = step_s / steady_step_s - 1.0
    figures = _read_back(prof, steps, step_s, device, trace)
    figures.update(clocked)
    figures["seconds"] = time.perf_counter() - taken  # what the profile cost the probe
    return rounded(figures)


def _read_back(
    prof: Any, steps: int, step_s: float, device: str, trace: Path | None
) -> dict[str, Any]:
    """The breakdown of the profiled steps and the trace's file name; where the trace could
    not be read, the steps alone and why (`missing`): the probe's figures stand."""
    try:
        events = _trace_events(prof)
    except TraceLost as exc:
        return {
            "steps": steps,
            "step_s": step_s,
            "device": device,
            MISSING: NO_BREAKDOWN + str(exc),
        }
    figures = breakdown(events, steps=steps, step_s=step_s, device=device)
    if trace is not None:
        try:
            figures["trace"] = write_trace(events, trace)
        except TraceLost as exc:
            figures[MISSING] = f"no trace file: {exc}"
    return figures


def _trace_events(prof: Any) -> list[dict[str, Any]]:
    """The profiler's Chrome trace events (exported to a file in TMPDIR: its only public form).

    Raises:
        TraceLost: the export could not be written whole or read back (a full TMPDIR cuts
            it short without an error from the profiler).
    """
    folder = Path(tempfile.gettempdir())
    try:
        handle, name = tempfile.mkstemp(suffix=".json", prefix="tuneup-trace-")
    except OSError as exc:
        raise TraceLost(_not_written(folder, why(folder, exc))) from None
    os.close(handle)
    try:
        prof.export_chrome_trace(name)
        with open(name, encoding="utf-8") as exported:
            document = json.load(exported)
    except OSError as exc:
        raise TraceLost(_not_written(folder, why(Path(name), exc))) from None
    except ValueError:  # JSON cut short (or not text): what a full disk leaves unsaid
        raise TraceLost(_not_written(folder, _cut_short(Path(name)))) from None
    finally:
        with contextlib.suppress(OSError):
            os.unlink(name)
    events = document.get("traceEvents", []) if isinstance(document, dict) else document
    return [e for e in events if isinstance(e, dict)]


def _not_written(folder: Path, reason: str) -> str:
    """The export's failure in one line: where (TMPDIR, or the folder tempfile chose), why,
    and the fix."""
    asked = os.environ.get("TMPDIR", "")
    where = f"{folder} (TMPDIR is not set)"
    if asked:  # tempfile passes over a TMPDIR it cannot use: the one it took is named
        same = os.path.realpath(asked) == os.path.realpath(folder)
        where = f"TMPDIR={folder}" if same else f"{folder} (TMPDIR={asked} was no use)"
    return (
        f"the profiler's trace could not be written to {where} ({reason}): point TMPDIR at "
        "a folder with room"
    )


def _cut_short(path: Path) -> str:
    """Why an exported trace did not read back: the space left beside it says whether the
    disk filled (the profiler reports no error then)."""
    try:
        size, free = path.stat().st_size, shutil.disk_usage(path.parent).free
    except OSError:
        return "it could not be read back"
    if free >= max(size // 100, 64 * 1024):
        return f"it stopped at {_size(size)} and could not be read back"
    full = "no space left on the device"  # next to nothing left: the file hit the end
    return f"{full}: it stopped at {_size(size)}" if size else full


def _size(count: int) -> str:
    if count < 2**10:
        return f"{count} bytes"
    return f"{count / 2**20:.1f} MiB" if count >= 2**20 else f"{count / 2**10:.0f} KiB"


def write_trace(events: list[dict[str, Any]], path: Path) -> str:
    """Write the trace gzipped, whole or not at all (a temporary file, then a rename); its
    file name.

    Raises:
        TraceLost: it could not be written (the folder is full or read-only): the profile's
            figures stand without it.
    """
    partial = path.with_name(path.name + ".partial")
    try:
        with gzip.open(partial, "wt", encoding="utf-8") as out:
            json.dump({"traceEvents": events, "displayTimeUnit": "ms"}, out)
        os.replace(partial, path)
    except OSError as exc:
        with contextlib.suppress(OSError):
            partial.unlink(missing_ok=True)
        raise TraceLost(
            f"the trace could not be written to {path.parent} ({why(path, exc)})"
        ) from None
    return path.name
