"""`tuneup profile --trace FILE [--json]`: where a trace's steps' time goes, nothing run.

Any `torch.profiler` Chrome trace, gzipped or not: one of tuneup's own
(`probes/NNNN-stage.trace.json.gz`) or one a user took of their own training.
Its steps and their length are read off the trace (probe/trace_file.py); its
parts are, on a GPU, the device's work by the range that launched it, the host's
spans beside them (probe/timeline.py); a user's own ranges keep their names. The
rules' findings follow, quoting no ladder (none ran), and what is left. `--json`
prints one object: `parts` maps each part to its milliseconds per step, `basis`
says whose time they are ("device" or "host"); every time in it is milliseconds
per step.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from tuneup.errors import ExitCode, UsageError
from tuneup.probe.breakdown import whats_left
from tuneup.probe.profile_rules import Finding, findings
from tuneup.probe.trace_file import Window, read_events, trace_breakdown
from tuneup.tuning.results.profiles import profile_lines

GPU_MS = {  # the JSON's names for the GPU's figures in milliseconds per step
    "busy_ms": "busy_s",
    "idle_ms": "idle_s",
    "idle_host_ms": "idle_host_s",
    "idle_input_ms": "idle_input_s",
    "idle_launch_ms": "idle_gaps_s",
    "idle_other_ms": "idle_other_s",
    "tensor_core_ms": "tensor_core_s",
}


def run_trace_command(
    trace: Path | None,
    as_json: bool,
    folder: Path | None = None,
    probe: int | None = None,
    nsys: bool = False,
) -> int:
    """Read `trace` and print where its steps' time goes (as JSON with `as_json`)."""
    if trace is None:
        raise UsageError("--json goes with --trace FILE: give the trace to read")
    if folder is not None or probe is not None or nsys:
        raise UsageError(
            "--trace reads a trace alone, running nothing: leave out DIR, --probe and --nsys"
        )
    figures, span = trace_breakdown(read_events(trace))
    found = findings(figures, None, {})
    left = whats_left(figures)
    if as_json:
        print(json.dumps(trace_object(str(trace), figures, span, found, left), indent=2))
        return ExitCode.OK
    print(f"{trace}: {span.said}, {1e3 * span.step_s:.1f} ms each")
    for line in profile_lines({"baseline": figures}, ("this trace",)):
        print(line)
    for finding in found:
        print(f"finding: {finding.text}")
    print(f"left: {left}")
    return ExitCode.OK


def _ms(seconds: Mapping[str, Any]) -> dict[str, float]:
    return {
        name: round(1e3 * float(value), 4)
        for name, value in seconds.items()
        if isinstance(value, (int, float))
    }


def trace_object(
    trace: str,
    figures: Mapping[str, Any],
    span: Window,
    found: Sequence[Finding],
    left: str,
) -> dict[str, Any]:
    """The `--json` object: a trace's breakdown in milliseconds per step, its basis said."""
    gpu = figures.get("gpu")
    host = figures.get("host_parts_s") or figures.get("parts_s") or {}
    return {
        "trace": trace,
        "device": figures.get("device"),
        "basis": figures.get("basis"),
        "steps": span.steps,
        "steps_from": span.said,
        "step_ms": round(1e3 * span.step_s, 4),
        "parts": _ms(figures.get("parts_s") or {}),
        "host_parts": _ms(host),
        "gpu": (
            {
                **{name: round(1e3 * float(gpu[key]), 4) for name, key in GPU_MS.items()},
                "kernels_per_step": gpu["kernels_per_step"],
                "mean_kernel_us": gpu["mean_kernel_us"],
                "pageable_copies": gpu["pageable_copies"],
            }
            if isinstance(gpu, Mapping)
            else None
        ),
        "top": [
            {
                "name": t["name"],
                "self_ms": round(1e3 * t["self_s"] / span.steps, 4),
                "share": t["share"],
            }
            for t in figures.get("top") or []
        ],
        "conv_share": figures.get("conv_share"),
        "findings": [
            {
                "rule": f.rule,
                "measured": f.measured,
                "threshold": f.threshold,
                "stage": f.stage,
                "text": f.text,
            }
            for f in found
        ],
        "left": left,
    }
