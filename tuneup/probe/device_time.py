"""The GPU's side of a profiled step: the device work each part launched, and its idle time.

Under asynchronous CUDA the host runs ahead of the device and waits inside
whichever range synchronises, so the ranges' spans on the host say where the
CPU waited, not where the GPU worked. As HTA, torch-tb-profiler and Nsight do,
each kernel, copy and memset is found its launch by its correlation id among the
`cuda_runtime` and `cuda_driver` events, and is counted in the host range that
launch falls in: on the launching thread, else on the thread that marks the most
ranges (autograd's own thread launches the backward pass inside the main thread's
`backward`). A range's part is its own name where it is one of tuneup's parts
(or torch's own name for one: the DataLoader's, the optimizer's); else its
enclosing range's part; else, outermost, its own name as the user named it. A
step marker (`ProfilerStep#N`) is no part. Collective kernels (NCCL's
all-reduce) are `allreduce` wherever they were launched, and work launched
outside every range is `other`.

The GPU's idle time is split as HTA splits it (`get_idle_time_breakdown`): a gap
whose next work the host had not launched yet when the GPU went idle waits on the
host (on input where that work is `data` or `h2d`); a shorter gap than
LAUNCH_GAP_US otherwise waits on launches; the rest is other. Pure: events in,
a frozen value out.
"""

from __future__ import annotations

import re
from collections import Counter, defaultdict
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

TUNEUP_PARTS = ("data", "h2d", "forward", "backward", "optimizer", "allreduce", "graph")
INPUT_PARTS = ("data", "h2d")
LAUNCHES = ("cuda_runtime", "cuda_driver")
DEVICE_WORK = ("kernel", "gpu_memcpy", "gpu_memset")
HOST_RANGES = ("user_annotation",)
LAUNCH_GAP_US = 30.0  # HTA's consecutive_kernel_delay: a shorter gap waits on a launch
STEP_MARKER = "ProfilerStep#"
OUTSIDE = "other"
# torch's own ranges for a part tuneup names: a user's trace reads in the same words
TORCH_NAMES = (
    ("enumerate(DataLoader)", "data"),
    ("Optimizer.step#", "optimizer"),
    ("Optimizer.zero_grad#", "optimizer"),
)
COLLECTIVE = re.compile(r"nccl.*all_?reduce|all_?reduce.*nccl", re.IGNORECASE)

Event = Mapping[str, Any]
Thread = tuple[Any, Any]


@dataclass(frozen=True)
class DeviceTime:
    """The device's time over the whole profile, in microseconds (not per step).

    Attributes:
        parts_us: device work by the part that launched it (durations summed: work on
            several streams at once counts on each).
        busy_us: the union of all device work.
        first_us, last_us: when the first work began and the last ended.
        idle_host_us: gaps whose next work the host had not launched yet.
        idle_input_us: those of them whose next work was input (`data`, `h2d`).
        idle_launch_us: shorter gaps between queued work (launch overhead).
        idle_other_us: longer gaps between queued work (a dependency, a sync).
        lead_us: the gap from `window_start` to the first work.
        lead_host: whether that first work was launched after the window began (its
            launch known), so the lead waited on the host.
        lead_input: the first work was input.
        attributed: work whose launch was found by its correlation id.
        work: all device work.
    """

    parts_us: Mapping[str, float]
    busy_us: float
    first_us: float
    last_us: float
    idle_host_us: float
    idle_input_us: float
    idle_launch_us: float
    idle_other_us: float
    lead_us: float
    lead_host: bool
    lead_input: bool
    attributed: int
    work: int


def part_of(name: str, parent: str | None) -> str | None:
    """The part a range names, given its enclosing range's part (None: no part yet)."""
    if name in TUNEUP_PARTS:
        return name
    torch_part = next((part for prefix, part in TORCH_NAMES if name.startswith(prefix)), None)
    if torch_part is not None:
        return torch_part
    if parent is not None:
        return parent
    return None if name.startswith(STEP_MARKER) else name


def _labels(ranges: Sequence[Event], times: Sequence[float]) -> list[str | None]:
    """The part of the range each time falls in, on one thread (None: no range there)."""
    ordered = sorted(ranges, key=lambda e: (float(e["ts"]), -float(e["dur"])))
    found: list[str | None] = [None] * len(times)
    stack: list[tuple[float, str | None]] = []  # (end, part) of the open ranges
    taken = 0
    for index in sorted(range(len(times)), key=times.__getitem__):
        at = times[index]
        while taken < len(ordered) and float(ordered[taken]["ts"]) <= at:
            opened = ordered[taken]
            taken += 1
            start = float(opened["ts"])
            while stack and stack[-1][0] <= start:
                stack.pop()
            parent = stack[-1][1] if stack else None
            stack.append((start + float(opened["dur"]), part_of(str(opened["name"]), parent)))
        while stack and stack[-1][0] < at:
            stack.pop()
        found[index] = stack[-1][1] if stack else None
    return found


def _correlation(event: Event) -> Any:
    args = event.get("args")
    return args.get("correlation") if isinstance(args, Mapping) else None


def _thread(event: Event) -> Thread:
    return (event.get("pid"), event.get("tid"))


def _main_threads(ranges: Mapping[Thread, Sequence[Event]]) -> dict[Any, Thread]:
    """Per process, the thread that marks the most ranges (the training loop's)."""
    marks = Counter({thread: len(events) for thread, events in ranges.items()})
    mains: dict[Any, Thread] = {}
    for thread, _count in marks.most_common():
        mains.setdefault(thread[0], thread)
    return mains


def attribute(
    work: Sequence[Event], launches: Mapping[Any, Event], ranges: Mapping[Thread, Sequence[Event]]
) -> list[str | None]:
    """The part each work event was launched from; None where its launch is not found."""
    by_thread: defaultdict[Thread, list[int]] = defaultdict(list)
    for index, event in enumerate(work):
        launch = launches.get(_correlation(event))
        if launch is not None:
            by_thread[_thread(launch)].append(index)
    parts: list[str | None] = [None] * len(work)
    mains = _main_threads(ranges)
    for thread, indices in by_thread.items():
        times = [float(launches[_correlation(work[i])]["ts"]) for i in indices]
        found = _labels(ranges.get(thread, ()), times)
        main = mains.get(thread[0])
        missing = [k for k, part in enumerate(found) if part is None]
        if missing and main is not None and main != thread:
            seen_there = _labels(ranges[main], [times[k] for k in missing])
            for k, part in zip(missing, seen_there, strict=True):
                found[k] = part
        for index, part in zip(indices, found, strict=True):
            parts[index] = OUTSIDE if part is None else part
    for index, event in enumerate(work):
        if event.get("cat") == "kernel" and COLLECTIVE.search(str(event.get("name", ""))):
            parts[index] = "allreduce"
    return parts


def device_time(events: Iterable[Event], window_start: float | None = None) -> DeviceTime | None:
    """The device's time in `events` (complete events); None where no device work ran.

    Args:
        window_start: when the profiled window began (us); the first work when None.
    """
    launches: dict[Any, Event] = {}
    ranges: defaultdict[Thread, list[Event]] = defaultdict(list)
    work: list[Event] = []
    for event in events:
        cat = event.get("cat")
        if cat in DEVICE_WORK:
            work.append(event)
        elif cat in LAUNCHES and _correlation(event) is not None:
            launches[_correlation(event)] = event
        elif cat in HOST_RANGES:
            ranges[_thread(event)].append(event)
    if not work:
        return None
    work.sort(key=lambda e: float(e["ts"]))
    parts = attribute(work, launches, ranges)
    spent: defaultdict[str, float] = defaultdict(float)
    for event, part in zip(work, parts, strict=True):
        spent[part or OUTSIDE] += float(event["dur"])
    return _timeline(work, parts, launches, dict(spent), window_start)


def _timeline(
    work: Sequence[Event],
    parts: Sequence[str | None],
    launches: Mapping[Any, Event],
    spent: Mapping[str, float],
    window_start: float | None,
) -> DeviceTime:
    """Busy time and the idle gaps by cause, over work sorted by start."""
    idle = {"host": 0.0, "input": 0.0, "launch": 0.0, "other": 0.0}
    first = float(work[0]["ts"])
    reach, busy = first, 0.0
    for event, part in zip(work, parts, strict=True):
        start = float(event["ts"])
        end = start + float(event["dur"])
        if start > reach:
            idle[_cause(start - reach, reach, launches.get(_correlation(event)))] += start - reach
            if _waited_on_host(reach, launches.get(_correlation(event))) and part in INPUT_PARTS:
                idle["input"] += start - reach
        busy += max(0.0, end - max(start, reach))
        reach = max(reach, end)
    lead = max(0.0, first - window_start) if window_start is not None else 0.0
    opening = launches.get(_correlation(work[0]))
    lead_host = window_start is not None and _waited_on_host(window_start, opening)
    return DeviceTime(
        parts_us=spent,
        busy_us=busy,
        first_us=first,
        last_us=reach,
        idle_host_us=idle["host"],
        idle_input_us=idle["input"],
        idle_launch_us=idle["launch"],
        idle_other_us=idle["other"],
        lead_us=lead,
        lead_host=lead_host,
        lead_input=lead_host and parts[0] in INPUT_PARTS,
        attributed=sum(1 for event in work if _correlation(event) in launches),
        work=len(work),
    )


def _waited_on_host(idle_from: float, launch: Event | None) -> bool:
    """The GPU went idle before the host launched the work that ended the gap."""
    return launch is not None and float(launch["ts"]) > idle_from


def _cause(gap: float, idle_from: float, launch: Event | None) -> str:
    if _waited_on_host(idle_from, launch):
        return "host"
    return "launch" if gap < LAUNCH_GAP_US else "other"
