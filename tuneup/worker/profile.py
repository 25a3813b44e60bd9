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
"""

from __future__ import annotations

import gzip
import json
import os
import tempfile
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any

from tuneup.probe.timeline import breakdown, rounded
from tuneup.unet.ranges import marking

if TYPE_CHECKING:
    from tuneup.worker.workload import SetupWorkload

OFF_ENV = "TUNEUP_PROFILE"
NSYS_ENV = "TUNEUP_NSYS"  # `tuneup profile --nsys`: open nsys's capture range here
STEPS = (3, 30)  # the fewest and the most steps a profile takes


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
    events = _trace_events(prof)
    step_s = wall / max(1, steps)
    figures = breakdown(events, steps=steps, step_s=step_s, device=device)
    batch = workload.setup.global_batch
    if flops_per_sample:
        tflops = flops_per_sample * batch / step_s / 1e12
        figures["tflops"] = tflops
        figures["mfu"] = tflops / peak_tflops if peak_tflops else None
    if steady_step_s:
        figures["overhead"] = step_s / steady_step_s - 1.0
    if trace is not None:
        figures["trace"] = write_trace(events, trace)
    figures["seconds"] = time.perf_counter() - taken  # what the profile cost the probe
    return rounded(figures)


def _trace_events(prof: Any) -> list[dict[str, Any]]:
    """The profiler's Chrome trace events (exported to a file: its only public form)."""
    handle, name = tempfile.mkstemp(suffix=".json", prefix="tuneup-trace-")
    os.close(handle)
    try:
        prof.export_chrome_trace(name)
        with open(name, encoding="utf-8") as exported:
            document = json.load(exported)
    finally:
        os.unlink(name)
    events = document.get("traceEvents", []) if isinstance(document, dict) else document
    return [e for e in events if isinstance(e, dict)]


def write_trace(events: list[dict[str, Any]], path: Path) -> str:
    """Write the trace gzipped, whole or not at all (a temporary file, then a rename); its
    file name, or "" where it could not be written (the profile's figures stand alone)."""
    partial = path.with_name(path.name + ".partial")
    try:
        with gzip.open(partial, "wt", encoding="utf-8") as out:
            json.dump({"traceEvents": events, "displayTimeUnit": "ms"}, out)
        os.replace(partial, path)
    except OSError:
        partial.unlink(missing_ok=True)
        return ""
    return path.name
