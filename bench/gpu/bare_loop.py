"""An independent training loop: the honesty step's yardstick for the probe worker.

Builds the model, optimizer and loader of a config with tuneup's
`build_training` (so both sides train the same thing), then runs its own loop
with none of tuneup's step, phase or timing code: it applies the precision
(torch.autocast, a GradScaler for fp16), the memory format and, for
`cuda_graphs`, captures its own graph the way PyTorch's documentation shows.
Times `steps` steps after `warm` with perf_counter and prints one JSON line.

    python bench/gpu/bare_loop.py '{"device": "cuda", "amp_mode": "bf16", ...}' 30 10
"""

from __future__ import annotations

import json
import sys
import time
from collections.abc import Callable, Iterator
from contextlib import nullcontext

import torch
import torch.nn.functional as F
from torch import Tensor

from tuneup.config import build_config
from tuneup.unet.build import build_training
from tuneup.unet.distributed import DistEnv

DTYPES = {"bf16": torch.bfloat16, "fp16": torch.float16}


def main() -> None:
    values, steps, warm = json.loads(sys.argv[1]), int(sys.argv[2]), int(sys.argv[3])
    cfg = build_config(values)
    setup = build_training(cfg, DistEnv())
    model, opt, dev = setup.model, setup.optimizer, setup.device
    assert setup.train_loader is not None
    loader = setup.train_loader
    layout = torch.channels_last_3d if cfg.channels_last else torch.contiguous_format
    dtype = DTYPES.get(cfg.amp_mode)
    scaler = torch.amp.GradScaler(dev.type) if cfg.amp_mode == "fp16" else None

    def batches() -> Iterator[tuple[Tensor, Tensor]]:
        while True:
            yield from loader

    source = batches()

    def next_batch() -> tuple[Tensor, Tensor]:
        x, y = next(source)
        cuda = dev.type == "cuda"
        return (
            x.to(dev, non_blocking=cuda, memory_format=layout),
            y.to(dev, non_blocking=cuda, memory_format=layout),
        )

    def loss_of(x: Tensor, y: Tensor) -> Tensor:
        cast = torch.autocast(dev.type, dtype=dtype) if dtype is not None else nullcontext()
        with cast:
            return F.l1_loss(model(x), y)

    def eager() -> Tensor:
        x, y = next_batch()
        opt.zero_grad(set_to_none=True)
        loss = loss_of(x, y)
        if scaler is None:
            loss.backward()
            opt.step()
        else:
            scaler.scale(loss).backward()
            scaler.step(opt)
            scaler.update()
        return loss.detach()

    step: Callable[[], Tensor] = eager
    mode, note = "eager", ""
    if cfg.cuda_graphs and dev.type == "cuda":
        try:
            step = _graphed(next_batch, loss_of, opt)
            mode = "graphed"
        except Exception as exc:  # report it and time eager: the step marks it informational
            note = f"capture failed, timed eager: {type(exc).__name__}: {exc}"
            torch.cuda.synchronize()

    for _ in range(warm):
        step()
    if dev.type == "cuda":
        torch.cuda.synchronize()
    start = time.perf_counter()
    loss = None
    for _ in range(steps):
        loss = step()
    assert loss is not None
    loss.item()
    if dev.type == "cuda":
        torch.cuda.synchronize()
    seconds = time.perf_counter() - start
    print(
        json.dumps(
            {
                "bare_sps": steps * setup.global_batch / seconds,
                "mode": mode,
                "note": note,
                "steps": steps,
                "seconds": seconds,
            }
        ),
        flush=True,
    )


def _graphed(
    next_batch: Callable[[], tuple[Tensor, Tensor]],
    loss_of: Callable[[Tensor, Tensor], Tensor],
    opt: torch.optim.Optimizer,
) -> Callable[[], Tensor]:
    """Whole-step capture (forward, backward, optimizer step), replayed on copied batches."""
    static_x, static_y = next_batch()
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        for _ in range(3):
            opt.zero_grad(set_to_none=True)
            loss_of(static_x, static_y).backward()
            opt.step()
    torch.cuda.current_stream().wait_stream(side)
    graph = torch.cuda.CUDAGraph()
    opt.zero_grad(set_to_none=True)
    with torch.cuda.graph(graph, capture_error_mode="thread_local"):
        static_loss = loss_of(static_x, static_y)
        static_loss.backward()
        opt.step()
    torch.cuda.synchronize()

    def replay() -> Tensor:
        x, y = next_batch()
        static_x.copy_(x, non_blocking=True)
        static_y.copy_(y, non_blocking=True)
        graph.replay()
        return static_loss.detach()

    return replay


if __name__ == "__main__":
    main()
