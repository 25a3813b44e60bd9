"""Named ranges around each part of a training step, as the tutorial reads its Nsight timeline.

SC22's profiling sections wrap the loop in NVTX ranges and read one iteration:
the wait for the loader, the host-to-device copy, forward, backward, the
optimizer (and, on several GPUs, NCCL's all-reduce). The step marks the same
parts under the same names (`PARTS`), as `torch.profiler.record_function`
ranges (they land in the profiler's trace) and, on CUDA, NVTX ranges (a user's
own `nsys` run sees them too). They are marked only while `marking()` is on:
a probe's profile, or a `--nsys` run; otherwise a part costs a flag test.

torch is imported when a range is opened, never at import: the worker imports
this module before it may start CUDA.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from typing import Any

PARTS = ("data", "h2d", "forward", "backward", "optimizer", "allreduce")
GRAPH = "graph"  # a CUDA graph's replay: forward, backward and optimizer as one
_MARKING = {"on": False, "nvtx": False}


@contextlib.contextmanager
def marking(nvtx: bool = False) -> Iterator[None]:
    """Mark the step's parts while inside (and as NVTX ranges too with `nvtx`)."""
    before = dict(_MARKING)
    _MARKING.update(on=True, nvtx=nvtx)
    try:
        yield
    finally:
        _MARKING.update(before)


def part(name: str) -> contextlib.AbstractContextManager[Any]:
    """The range of one part of the step; nothing while no profile is taken."""
    if not _MARKING["on"]:
        return contextlib.nullcontext()
    return _range(name, bool(_MARKING["nvtx"]))


@contextlib.contextmanager
def _range(name: str, nvtx: bool) -> Iterator[None]:
    import torch  # torch: only when a profile is taken, long after CUDA may start

    with torch.profiler.record_function(name):
        if nvtx:
            torch.cuda.nvtx.range_push(name)
        try:
            yield
        finally:
            if nvtx:
                torch.cuda.nvtx.range_pop()
