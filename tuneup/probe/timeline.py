"""Where a profiled step's time goes, read from the profiler's Chrome trace.

A probe's profile (worker/profile.py) exports `torch.profiler`'s trace; this
reads it back into the figures the tutorial reads off its Nsight timeline, the
way HTA and torch-tb-profiler summarise one:

* the step split into its named parts (unet/ranges.py: data, h2d, forward,
  backward, optimizer, allreduce; a CUDA graph's replay as `graph`), from the
  ranges' spans on the host, and what no range covers (`other`);
* on a GPU: its busy time (the union of kernels and copies), its idle time
  split as HTA splits it (short gaps between kernels, where the GPU waited on
  launches, against longer ones, where it waited on the host), the time in
  tensor-core kernels, kernels per step and their mean length, and copies
  from pageable memory;
* the top kernels (on a GPU) or operators (on a CPU) by self time, with their
  share, and the share of convolutions.

Trace events are the Chrome trace format's complete events (`"ph": "X"`, `ts`
and `dur` in microseconds, `cat`, `name`, `tid`). Pure: values in, values out.
"""

from __future__ import annotations

import re
from collections import defaultdict
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

PARTS = ("data", "h2d", "forward", "backward", "optimizer", "allreduce", "graph")
HOST_RANGES = ("user_annotation",)
CPU_OPS = ("cpu_op",)
DEVICE_WORK = ("kernel", "gpu_memcpy", "gpu_memset")
KERNEL_GAP_US = 50.0  # a shorter idle gap waits on launches; a longer one on the host
TOP = 5
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
    parts = _parts(found, steps)
    named = sum(parts.values())
    parts["other"] = max(0.0, step_s - named)
    figures: dict[str, Any] = {
        "steps": steps,
        "step_s": step_s,
        "parts_s": parts,
        "covered": named / step_s if step_s > 0 else None,
        "device": device,
    }
    work = [e for e in found if e.get("cat") in DEVICE_WORK]
    if device == "cuda" and work:
        figures["gpu"] = _gpu(work, steps)
        figures["top"] = _top(_own_times(work), TOP)
        figures["conv_share"] = _share(_own_times(work), CONVOLUTION)
    else:
        figures["gpu"] = None
        own = _own_times([e for e in found if e.get("cat") in CPU_OPS])
        figures["top"] = _top(own, TOP)
        figures["conv_share"] = _share(own, CONVOLUTION)
    return figures


def _parts(events: Sequence[Mapping[str, Any]], steps: int) -> dict[str, float]:
    """Seconds per step in each named range, and in the all-reduce where DDP ran one."""
    spans: defaultdict[str, float] = defaultdict(float)
    for event in events:
        name = str(event.get("name", ""))
        if event.get("cat") in HOST_RANGES and name in PARTS:
            spans[name] += float(event["dur"])
    if "allreduce" not in spans:  # DDP's own collective ops, where no range marks them
        reduce = [e for e in events if e.get("cat") in CPU_OPS and ALLREDUCE.search(str(e["name"]))]
        if reduce:
            spans["allreduce"] = sum(float(e["dur"]) for e in _outermost(reduce))
    return {name: spans[name] / 1e6 / steps for name in PARTS if spans.get(name)}


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


def _own_times(events: Sequence[Mapping[str, Any]]) -> dict[str, float]:
    """Self time by name, in seconds: an event's length less its children's on its thread."""
    own: defaultdict[str, float] = defaultdict(float)
    by_thread: defaultdict[Any, list[Mapping[str, Any]]] = defaultdict(list)
    for event in events:
        by_thread[(event.get("pid"), event.get("tid"))].append(event)
    for thread in by_thread.values():
        stack: list[list[Any]] = []  # [end, name, own]
        for event in sorted(thread, key=lambda e: (e["ts"], -e["dur"])):
            start, length = float(event["ts"]), float(event["dur"])
            while stack and stack[-1][0] <= start:
                _end, name, mine = stack.pop()
                own[name] += mine
            if stack:
                stack[-1][2] -= min(length, stack[-1][0] - start)
            stack.append([start + length, str(event["name"]), length])
        for _end, name, mine in stack:
            own[name] += mine
    return {name: max(0.0, us) / 1e6 for name, us in own.items()}


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


def _gpu(work: Sequence[Mapping[str, Any]], steps: int) -> dict[str, Any]:
    """The device's busy and idle time over the profiled window, per step."""
    spans = sorted((float(e["ts"]), float(e["ts"]) + float(e["dur"])) for e in work)
    busy = 0.0
    gaps_short = gaps_long = 0.0
    reach = spans[0][0]
    for start, end in spans:
        if start > reach:
            gap = start - reach
            if gap < KERNEL_GAP_US:
                gaps_short += gap
            else:
                gaps_long += gap
        busy += max(0.0, end - max(start, reach))
        reach = max(reach, end)
    kernels = [e for e in work if e.get("cat") == "kernel"]
    tensor = sum(float(e["dur"]) for e in kernels if TENSOR_CORE.search(str(e["name"])))
    pageable = sum(
        1 for e in work if e.get("cat") == "gpu_memcpy" and "pageable" in str(e.get("args", {}))
    )
    mean_us = sum(float(e["dur"]) for e in kernels) / len(kernels) if kernels else 0.0
    return {
        "busy_s": busy / 1e6 / steps,
        "idle_gaps_s": gaps_short / 1e6 / steps,
        "idle_host_s": gaps_long / 1e6 / steps,
        "tensor_core_s": tensor / 1e6 / steps,
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
