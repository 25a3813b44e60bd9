"""Where a profiled step's time goes, read from the profiler's Chrome trace.

A probe's profile (worker/profile.py) exports `torch.profiler`'s trace; this
reads it back into the figures the tutorial reads off its Nsight timeline, the
way HTA and torch-tb-profiler summarise one:

* on a GPU, the step's named parts (unet/ranges.py: data, h2d, forward,
  backward, optimizer, allreduce; a CUDA graph's replay as `graph`; a user's own
  ranges as named) as the device work each launched (probe/device_time.py:
  `basis` "device"); the ranges' spans on the host stay beside them as the host's
  view (`host_parts_s`). Under asynchronous CUDA the host waits inside whichever
  range synchronises, so its spans say where the CPU waited, not where the GPU worked;
* on a CPU (or a GPU trace whose launches cannot be found), the parts as the
  ranges' spans on the host, and what no range covers (`other`): `basis` "host";
* on a GPU: its busy time (the union of kernels, copies and memsets), its idle
  time split as HTA splits it (waiting on the host, of which on input; waiting on
  launches; other), the time in tensor-core kernels, kernels per step and their
  mean length, and copies from pageable memory;
* the top kernels (on a GPU) or operators (on a CPU) by self time, with their
  share, and the share of convolutions.

Trace events are the Chrome trace format's complete events (`"ph": "X"`, `ts`
and `dur` in microseconds, `cat`, `name`, `tid`). Pure: values in, values out.
"""

from __future__ import annotations

import re
from collections import defaultdict
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any

from tuneup.probe.device_time import (
    DEVICE_WORK,
    HOST_RANGES,
    OUTSIDE,
    TUNEUP_PARTS,
    DeviceTime,
    device_time,
    part_of,
)

PARTS = TUNEUP_PARTS
CPU_OPS = ("cpu_op",)
DEVICE = "device"  # the parts are the device work each launched
HOST = "host"  # the parts are the ranges' spans on the host
TOP = 5
Labeller = Callable[[str, "str | None"], "str | None"]  # (name, parent's label) -> label
TENSOR_CORE = re.compile(
    r"xmma|hmma|imma|wgmma|tensorop|s16816|s1688|h16816|bf16gemm|_tc_|cutlass|sm80_|sm90_",
    re.IGNORECASE,
)
CONVOLUTION = re.compile(r"conv|cudnn|wgrad|dgrad|fprop|implicit_gemm", re.IGNORECASE)
ALLREDUCE = re.compile(r"all_?reduce", re.IGNORECASE)


def complete(events: Iterable[Mapping[str, Any]]) -> list[Mapping[str, Any]]:
    """The trace's complete events with a start and a length."""
    return [
        e
        for e in events
        if e.get("ph") == "X" and isinstance(e.get("ts"), (int, float)) and "dur" in e
    ]


def breakdown(
    events: Iterable[Mapping[str, Any]], *, steps: int, step_s: float, device: str
) -> dict[str, Any]:
    """The profile's figures (the module docstring), per step.

    Args:
        events: the trace's events (its "traceEvents").
        steps: the profiled steps.
        step_s: their measured wall time, per step.
        device: "cpu" or "cuda".
    """
    found = complete(events)
    steps = max(1, steps)
    host = _parts(found, steps)
    named = sum(host.values())
    host["other"] = max(0.0, step_s - named)
    figures: dict[str, Any] = {
        "steps": steps,
        "step_s": step_s,
        "basis": HOST,
        "parts_s": host,
        "covered": named / step_s if step_s > 0 else None,
        "device": device,
    }
    work = [e for e in found if e.get("cat") in DEVICE_WORK]
    seen = device_time(found, window_start=min(float(e["ts"]) for e in found)) if work else None
    if device == "cuda" and seen is not None:
        figures["gpu"] = _gpu(work, seen, steps, step_s)
        if seen.attributed:
            figures["basis"] = DEVICE
            figures["parts_s"] = device_parts(seen, steps)
            figures["host_parts_s"] = host
        own = _own_times(work)
        figures["top"] = _top(own, TOP)
        figures["conv_share"] = _share(own, CONVOLUTION)
    else:
        figures["gpu"] = None
        own = _own_times([e for e in found if e.get("cat") in CPU_OPS])
        figures["top"] = _top(own, TOP)
        figures["conv_share"] = _share(own, CONVOLUTION)
    return figures


def device_parts(seen: DeviceTime, steps: int) -> dict[str, float]:
    """Seconds per step of device work by part: tuneup's in the step's order, then a user's
    own ranges by size, then what no range launched."""
    spent = seen.parts_us
    own = sorted((p for p in spent if p not in PARTS and p != OUTSIDE), key=lambda p: -spent[p])
    order = [*(p for p in PARTS if p in spent), *own, *([OUTSIDE] if OUTSIDE in spent else [])]
    return {part: spent[part] / 1e6 / steps for part in order}


def _parts(events: Sequence[Mapping[str, Any]], steps: int) -> dict[str, float]:
    """Seconds per step on the host in each part's ranges (a range's own time, less the
    ranges inside it of another part), and in the all-reduce where DDP ran one."""
    ranges = [e for e in events if e.get("cat") in HOST_RANGES]
    spans = _own_times(ranges, part_of)
    if "allreduce" not in spans:  # DDP's own collective ops, where no range marks them
        reduce = [e for e in events if e.get("cat") in CPU_OPS and ALLREDUCE.search(str(e["name"]))]
        if reduce:
            spans["allreduce"] = sum(float(e["dur"]) for e in _outermost(reduce)) / 1e6
    own = sorted((p for p in spans if p not in PARTS), key=lambda p: -spans[p])
    return {name: spans[name] / steps for name in (*PARTS, *own) if spans.get(name)}


def _outermost(events: Sequence[Mapping[str, Any]]) -> list[Mapping[str, Any]]:
    """The events not inside another of them on the same thread (nested ops count once)."""
    kept: list[Mapping[str, Any]] = []
    for event in sorted(events, key=lambda e: (e.get("tid"), e["ts"], -e["dur"])):
        last = kept[-1] if kept else None
        inside = (
            last is not None
            and last.get("tid") == event.get("tid")
            and event["ts"] + event["dur"] <= last["ts"] + last["dur"]
        )
        if not inside:
            kept.append(event)
    return kept


def _named(name: str, _parent: str | None) -> str | None:
    return name


def _own_times(events: Sequence[Mapping[str, Any]], label: Labeller = _named) -> dict[str, float]:
    """Self time by label (the name, unless told), in seconds: an event's length less its
    children's on its thread; time under no label (a step marker's own) counts nowhere."""
    own: defaultdict[str, float] = defaultdict(float)
    by_thread: defaultdict[Any, list[Mapping[str, Any]]] = defaultdict(list)
    for event in events:
        by_thread[(event.get("pid"), event.get("tid"))].append(event)
    for thread in by_thread.values():
        stack: list[list[Any]] = []  # [end, label, own]
        for event in sorted(thread, key=lambda e: (e["ts"], -e["dur"])):
            start, length = float(event["ts"]), float(event["dur"])
            while stack and stack[-1][0] <= start:
                _end, name, mine = stack.pop()
                own[name] += mine
            if stack:
                stack[-1][2] -= min(length, stack[-1][0] - start)
            parent = stack[-1][1] if stack else None
            stack.append([start + length, label(str(event["name"]), parent), length])
        for _end, name, mine in stack:
            own[name] += mine
    return {name: max(0.0, us) / 1e6 for name, us in own.items() if name is not None}


def _top(own: Mapping[str, float], count: int) -> list[dict[str, Any]]:
    total = sum(own.values())
    ranked = sorted(own.items(), key=lambda item: -item[1])[:count]
    return [
        {"name": name, "self_s": seconds, "share": seconds / total if total else 0.0}
        for name, seconds in ranked
    ]


def _share(own: Mapping[str, float], pattern: re.Pattern[str]) -> float | None:
    total = sum(own.values())
    if not total:
        return None
    return sum(s for name, s in own.items() if pattern.search(name)) / total


def _gpu(
    work: Sequence[Mapping[str, Any]], seen: DeviceTime, steps: int, step_s: float
) -> dict[str, Any]:
    """The device's busy and idle time over the profiled window, per step: the idle split
    by cause sums to the step less the busy time (the window's edges: the lead as its first
    work waited, what follows the last work as other)."""
    per_step = 1e6 * steps
    busy = seen.busy_us / per_step
    idle = max(0.0, step_s - busy)
    lead = seen.lead_us / per_step
    host = seen.idle_host_us / per_step + (lead if seen.lead_host else 0.0)
    waiting_input = seen.idle_input_us / per_step + (lead if seen.lead_input else 0.0)
    launches = seen.idle_launch_us / per_step
    kernels = [e for e in work if e.get("cat") == "kernel"]
    tensor = sum(float(e["dur"]) for e in kernels if TENSOR_CORE.search(str(e["name"])))
    pageable = sum(
        1 for e in work if e.get("cat") == "gpu_memcpy" and "pageable" in str(e.get("args", {}))
    )
    mean_us = sum(float(e["dur"]) for e in kernels) / len(kernels) if kernels else 0.0
    return {
        "busy_s": busy,
        "idle_s": idle,
        "idle_host_s": host,
        "idle_input_s": waiting_input,
        "idle_gaps_s": launches,
        "idle_other_s": max(0.0, idle - host - launches),
        "tensor_core_s": tensor / per_step,
        "kernels_per_step": len(kernels) / steps,
        "mean_kernel_us": mean_us,
        "pageable_copies": pageable / steps,
    }


def rounded(figures: Mapping[str, Any], digits: int = 6) -> dict[str, Any]:
    """The figures with floats rounded, for the journal."""

    def walk(value: Any) -> Any:
        if isinstance(value, float):
            return round(value, digits)
        if isinstance(value, Mapping):
            return {k: walk(v) for k, v in value.items()}
        if isinstance(value, list):
            return [walk(v) for v in value]
        return value

    return walk(figures)  # type: ignore[no-any-return]
