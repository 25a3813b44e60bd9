"""Host batches onto the device, the next one copied while the model runs on this one.

A blocking copy of a 600 MB batch makes the CPU wait for it and the GPU wait for
the CPU. With pinned host memory the copy can be asynchronous, and on a stream of
its own it overlaps the previous step's compute: what PyTorch allows at best,
short of a loader that decodes on the GPU (DALI, the gpu loader).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator
from typing import TYPE_CHECKING

import torch

if TYPE_CHECKING:
    import torch
    from torch import Tensor

Batch = tuple["Tensor", "Tensor"]
Move = Callable[["Tensor", "Tensor"], Batch]


def device_batches(
    host: Iterable[Batch], move: Move, device: torch.device, *, overlap: bool
) -> Iterator[Batch]:
    """The host batches moved by `move`; on CUDA with `overlap`, one copy ahead on a side stream.

    A batch is yielded only once the compute stream waits for its copy, and its
    memory is marked as used there, so the caching allocator never hands it out
    while the step still reads it.
    """
    if device.type != "cuda" or not overlap:
        for inp, tar in host:
            yield move(inp, tar)
        return
    yield from _overlapped(iter(host), move, device)


def _overlapped(host: Iterator[Batch], move: Move, device: torch.device) -> Iterator[Batch]:
    copies = torch.cuda.Stream(device)

    def start(batch: Batch) -> tuple[Batch, torch.cuda.Event]:
        done = torch.cuda.Event()
        if batch[0].is_cuda:  # a GPU-resident loader (DALI, gpu): nothing to overlap
            moved = move(*batch)
            done.record(torch.cuda.current_stream(device))
            return moved, done
        # The copy may only overwrite memory the compute stream is done with.
        copies.wait_stream(torch.cuda.current_stream(device))
        with torch.cuda.stream(copies):
            moved = move(*batch)
            done.record(copies)
        return moved, done

    try:
        ahead = start(next(host))
    except StopIteration:
        return
    for batch in host:
        current, ahead = ahead, start(batch)
        yield _ready(current, device)
    yield _ready(ahead, device)


def _ready(pending: tuple[Batch, torch.cuda.Event], device: torch.device) -> Batch:
    (inp, tar), done = pending
    compute = torch.cuda.current_stream(device)
    compute.wait_event(done)
    inp.record_stream(compute)
    tar.record_stream(compute)
    return inp, tar
