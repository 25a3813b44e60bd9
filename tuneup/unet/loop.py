"""The training loop of `tuneup train`: epochs or a budget, the tutorial's log lines.

The loop reads the loss back only every `log_every` steps (one device sync),
so it measures the training, not its own bookkeeping. Log lines keep the
tutorial's wording so existing log readers keep working.
"""

from __future__ import annotations

import math
import signal
import sys
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from types import FrameType

import torch
import torch.distributed as dist
from torch import Tensor

from tuneup.unet.build import TrainingSetup
from tuneup.unet.metrics import MetricsSink, MetricsWriter
from tuneup.unet.optim import set_lr

Log = Callable[[str], None]


class StopFlag:
    """Set by the first Ctrl-C; the loop stops after the step it is in."""

    def __init__(self) -> None:
        self.requested = False

    def request(self) -> None:
        self.requested = True


@contextmanager
def stop_on_interrupt(flag: StopFlag, log: Log) -> Iterator[None]:
    """First Ctrl-C asks the loop to stop cleanly; a second one aborts at once."""

    def handler(signum: int, frame: FrameType | None) -> None:
        if flag.requested:
            raise KeyboardInterrupt
        flag.request()
        log("Interrupted: stopping after the current step (Ctrl-C again to abort)")

    try:
        previous = signal.signal(signal.SIGINT, handler)
    except ValueError:  # not the main thread: no signal handling
        yield
        return
    try:
        yield
    finally:
        signal.signal(signal.SIGINT, previous)


@dataclass
class TrainResult:
    """What a run did, for the CLI's exit status and for tests."""

    steps: int = 0
    epochs: int = 0
    interrupted: bool = False
    train_losses: list[float] = field(default_factory=list)
    val_losses: list[float] = field(default_factory=list)
    epoch_samples_per_s: list[float] = field(default_factory=list)
    scaler_overflows: int = 0
    ranks_in_sync: bool | None = None


def _synchronize(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


class _Budget:
    def __init__(self, max_steps: int | None, max_seconds: float | None) -> None:
        self.max_steps = max_steps
        self.max_seconds = max_seconds
        self.start = time.perf_counter()

    def spent(self, steps: int) -> bool:
        if self.max_steps is not None and steps >= self.max_steps:
            return True
        return self.max_seconds is not None and time.perf_counter() - self.start >= self.max_seconds


def _agree(setup: TrainingSetup, stop: bool) -> bool:
    """All ranks stop together: any rank's reason to stop is everyone's."""
    if not setup.env.distributed:
        return stop

    flag = torch.tensor([1.0 if stop else 0.0], device=setup.device)
    dist.all_reduce(flag, op=dist.ReduceOp.MAX)
    return bool(flag.item() > 0)


def run_training(
    setup: TrainingSetup,
    *,
    metrics: MetricsSink | None = None,
    log: Log | None = None,
    stop: StopFlag | None = None,
) -> TrainResult:
    """Train until the epochs, the step budget or the time budget run out, or Ctrl-C."""
    cfg = setup.cfg
    metrics = metrics or MetricsWriter(None)
    say: Log = log if (log is not None and setup.env.is_main) else (lambda _msg: None)
    stop = stop or StopFlag()
    budget = _Budget(cfg.max_steps, cfg.max_seconds)
    result = TrainResult()
    for note in setup.notes:
        say(note)
    say("Starting Training Loop...")
    for epoch in range(1, cfg.num_epochs + 1):
        ended = _train_epoch(setup, epoch, result, metrics, say, stop, budget)
        result.epochs = epoch
        if setup.val_loader is not None and not result.interrupted:
            _validate(setup, epoch, result, metrics, say)
        if ended:
            break
    result.scaler_overflows = setup.step.scaler_overflows
    if setup.env.distributed:
        result.ranks_in_sync = _report_rank_sync(setup, say)
    return result


def _train_epoch(
    setup: TrainingSetup,
    epoch: int,
    result: TrainResult,
    metrics: MetricsSink,
    say: Log,
    stop: StopFlag,
    budget: _Budget,
) -> bool:
    """One epoch; returns True when the run must end after it."""
    cfg = setup.cfg
    assert setup.train_loader is not None
    setup.raw_model.train()
    pending: list[Tensor] = []
    epoch_losses: list[float] = []
    steps_in_epoch = 0
    lr: float | None = None  # the learning rate of the epoch's last step
    ended = False
    start = time.perf_counter()
    window_start, window_steps = start, 0
    for inp, tar in setup.device_batches(setup.train_loader):
        setup.ensure_graph(inp, tar)
        result.steps += 1
        lr = setup.schedule(result.steps)
        set_lr(setup.optimizer, lr)
        pending.append(setup.step(inp, tar))
        steps_in_epoch += 1
        window_steps += 1
        at_sync = result.steps % cfg.log_every == 0 or steps_in_epoch == setup.steps_per_epoch
        if at_sync:
            values = torch.stack(pending).float().cpu().tolist()  # the one sync per window
            pending.clear()
            now = time.perf_counter()
            rate = window_steps * setup.global_batch / max(now - window_start, 1e-9)
            epoch_losses.extend(values)
            metrics.write(
                {
                    "kind": "train",
                    "epoch": epoch,
                    "step": result.steps,
                    "loss": sum(values) / len(values),
                    "lr": lr,
                    "samples_per_s": rate,
                    "elapsed_s": now - budget.start,
                }
            )
            window_start, window_steps = now, 0
            if any(not math.isfinite(v) for v in values):
                say(f"Loss is not finite at step {result.steps}: stopping")
                ended = True
        if not setup.env.distributed or at_sync:
            want_stop = stop.requested or budget.spent(result.steps)
            if _agree(setup, want_stop):
                result.interrupted = stop.requested
                ended = True
        if ended or steps_in_epoch >= setup.steps_per_epoch:
            break
    if pending:
        epoch_losses.extend(torch.stack(pending).float().cpu().tolist())
    _synchronize(setup.device)
    seconds = time.perf_counter() - start
    rate = steps_in_epoch * setup.global_batch / max(seconds, 1e-9)
    mean_loss = sum(epoch_losses) / max(len(epoch_losses), 1)
    result.train_losses.append(mean_loss)
    result.epoch_samples_per_s.append(rate)
    say(f"Time taken for epoch {epoch} is {seconds} sec, avg {rate} samples/sec")
    say(f"  Avg train loss={mean_loss:f}")
    metrics.write(
        {
            "kind": "epoch",
            "epoch": epoch,
            "step": result.steps,
            "loss": mean_loss,
            "samples_per_s": rate,
            "iters_per_s": steps_in_epoch / max(seconds, 1e-9),
            "lr": lr,
            "seconds": seconds,
        }
    )
    return ended


def _validate(
    setup: TrainingSetup, epoch: int, result: TrainResult, metrics: MetricsSink, say: Log
) -> None:
    assert setup.val_loader is not None
    start = time.perf_counter()
    setup.raw_model.eval()
    total = torch.zeros((), device=setup.device, dtype=torch.float64)
    batches = 0
    with torch.no_grad():
        for inp, tar in setup.val_loader:
            inp, tar = setup.to_device(inp, tar)
            with setup.precision.autocast():
                loss = setup.loss_fn(setup.raw_model(inp), tar, setup.cfg.lambda_rho)
            total += loss.double()
            batches += 1
    mean = total / max(batches, 1)
    if setup.env.distributed:
        dist.all_reduce(mean)
        mean /= setup.env.world_size
    value = float(mean.item())
    seconds = time.perf_counter() - start
    result.val_losses.append(value)
    say(f"  Avg val loss={value:f}")
    say(f"  Total validation time: {seconds} sec")
    metrics.write(
        {"kind": "val", "epoch": epoch, "step": result.steps, "loss": value, "seconds": seconds}
    )
    setup.raw_model.train()


def parameter_checksum(setup: TrainingSetup) -> Tensor:
    """Sum and sum of squares of every weight, in float64: equal on ranks that agree."""
    with torch.no_grad():
        flat = [p.detach().double() for p in setup.raw_model.parameters()]
        total, squares = flat[0].sum(), (flat[0] * flat[0]).sum()
        for t in flat[1:]:  # in order, as Python's sum() added them
            total, squares = total + t.sum(), squares + (t * t).sum()
        return torch.stack([total, squares])


def _report_rank_sync(setup: TrainingSetup, say: Log) -> bool:
    """Compare the weights of every rank at the end: DDP ranks must hold the same model."""

    local = parameter_checksum(setup).to(setup.device)
    gathered = [torch.zeros_like(local) for _ in range(setup.env.world_size)]
    dist.all_gather(gathered, local)
    stacked = torch.stack(gathered).cpu()
    spread = float((stacked - stacked[0]).abs().max() / stacked[0].abs().max().clamp(min=1e-30))
    in_sync = spread <= 1e-9
    if setup.cfg.noddp:
        say(f"noddp: ranks trained without gradient exchange (weights differ by {spread:.3g})")
    else:
        state = "yes" if in_sync else "NO"
        say(f"Ranks in sync: {state} ({setup.env.world_size} ranks, relative spread {spread:.3g})")
    return in_sync


def stderr_log(message: str) -> None:
    print(message, file=sys.stderr, flush=True)
