"""The measurement bound to a real training setup: the device timer and the three kinds of work.

:class:`DeviceTimer` and :class:`SetupWorkload` implement phases' two interfaces on a
:class:`~tuneup.unet.build.TrainingSetup`; torch is used only here.
"""

from __future__ import annotations

import time
from collections.abc import Iterable, Iterator
from typing import TYPE_CHECKING, Any

from tuneup.config import loader
from tuneup.errors import UsageError
from tuneup.unet.ranges import part

if TYPE_CHECKING:
    import torch

    from tuneup.config import TrainConfig
    from tuneup.unet.build import TrainingSetup
from tuneup.worker.trials import Timer

# ---- binding to a real training setup ----------------------------------------


class BatchStream:
    """A finite loader as an endless stream: when an epoch runs out, the next one starts.

    Restarting the iterator is what a new epoch of training does (fresh crops,
    workers restarted unless persistent), so the cost shows up where it would.
    """

    def __init__(self, loader: Iterable[Any]) -> None:
        self.loader = loader
        self.epochs = 0
        self._it: Iterator[Any] | None = None

    def __iter__(self) -> Iterator[Any]:
        while True:
            yield self.next()

    def next(self) -> Any:
        with part("data"):
            return self._next()

    def _next(self) -> Any:
        if self._it is not None:
            try:
                return next(self._it)
            except StopIteration:
                pass
        self._it = iter(self.loader)
        self.epochs += 1
        try:
            return next(self._it)
        except StopIteration:
            raise UsageError(
                "the training loader gives no batch: raise Nsamples or lower the batch size"
            ) from None


def prefetched_batches(cfg: TrainConfig) -> int:
    """Batches a loader holds ready ahead of the loop: workers x prefetch_factor, or DALI's."""
    if loader(cfg.data_loader_config).dali:
        return cfg.dali_prefetch
    if cfg.num_data_workers <= 0:
        return 0
    per_worker = cfg.prefetch_factor if cfg.prefetch_factor is not None else 2  # torch's default
    return cfg.num_data_workers * per_worker + (1 if cfg.pin_memory else 0)


class DeviceTimer:
    """``time.perf_counter`` and ``torch.cuda.synchronize`` on the setup's device."""

    def __init__(self, device: torch.device) -> None:
        self.device = device

    def now(self) -> float:
        return time.perf_counter()

    def sync(self) -> None:
        if self.device.type == "cuda":
            import torch  # torch: the worker imports this module before CUDA may start

            torch.cuda.synchronize(self.device)


class SetupWorkload:
    """The three kinds of work on a real TrainingSetup; the step count drives the LR schedule."""

    def __init__(self, setup: TrainingSetup, timer: Timer) -> None:
        if setup.train_loader is None:
            raise UsageError("the probe needs the training loader: build with with_loaders=True")
        self.setup = setup
        self.timer = timer
        self.stream = BatchStream(setup.train_loader)
        self._batches = setup.device_batches(self.stream)
        self.steps_done = 0
        self.graph_capture_s = 0.0
        self._graph_checked = False
        self._pending: list[torch.Tensor] = []
        self._cached: tuple[torch.Tensor, torch.Tensor] | None = None
        self._compiled_before = _compile_cache_counts() if setup.cfg.jit == "compile" else None

    @property
    def compile_cache(self) -> str:
        """ "warm" when torch.compile found every graph in its cache, "cold" when it compiled
        one, "" without torch.compile (read from its counters, since this setup was built)."""
        if self._compiled_before is None:
            return ""
        hits, misses = (
            now - before
            for now, before in zip(_compile_cache_counts(), self._compiled_before, strict=True)
        )
        return "cold" if misses else ("warm" if hits else "")

    @property
    def scaler_overflows(self) -> int:
        return self.setup.step.scaler_overflows

    def _device_batch(self) -> tuple[torch.Tensor, torch.Tensor]:
        return next(self._batches)

    def _ensure_graph(self, inp: torch.Tensor, tar: torch.Tensor) -> None:
        """Capture on the first batch; the capture's own time is a one-time cost of its own."""
        if self._graph_checked:
            return
        self._graph_checked = True
        if not self.setup.cfg.cuda_graphs:
            return
        self.setup.ensure_graph(inp, tar)
        self.graph_capture_s += getattr(self.setup.step, "capture_s", 0.0)

    def full(self, steps: int, keep_losses: int = 0) -> int:
        # torch: the worker imports this module before CUDA may start
        from tuneup.unet.optim import set_lr

        setup = self.setup
        for i in range(steps):
            inp, tar = self._device_batch()
            self._ensure_graph(inp, tar)
            self.steps_done += 1
            set_lr(setup.optimizer, setup.schedule(self.steps_done))
            loss = setup.step(inp, tar)
            if i < keep_losses:
                self._pending.append(loss)
        return steps

    def io(self, steps: int) -> int:
        for _ in range(steps):
            self._device_batch()
        return steps

    def prepare(self, phase: str) -> None:
        if phase == "synthetic" and self._cached is None:
            self._cached = self._device_batch()
            self.timer.sync()
        if phase == "io":
            # Batches the loader prepared while the model ran would make IO's first
            # trial a read of the queue: take them, untimed, so IO times the loader.
            for _ in range(prefetched_batches(self.setup.cfg)):
                self._device_batch()
            self.timer.sync()

    @property
    def cached_batch(self) -> tuple[torch.Tensor, torch.Tensor]:
        """The device batch SYNTHETIC steps on (taken from the loader on first use)."""
        self.prepare("synthetic")
        assert self._cached is not None
        return self._cached

    def synthetic(self, steps: int) -> int:
        self.prepare("synthetic")
        assert self._cached is not None
        inp, tar = self._cached
        for _ in range(steps):
            self.setup.step(inp, tar)
        return steps

    def read_losses(self) -> list[float]:
        # torch: the worker imports this module before CUDA may start
        import torch

        if not self._pending:
            return []
        values = torch.stack(self._pending).float().cpu().tolist()
        self._pending.clear()
        return values

    def mem_peak_mb(self) -> float | None:
        """The CUDA caching allocator's peak (tensors only: NVML's reading is larger)."""
        import torch

        if self.setup.device.type != "cuda":
            return None
        return torch.cuda.max_memory_allocated(self.setup.device) / 2**20


def _compile_cache_counts() -> tuple[int, int]:
    """Inductor's FX graph cache (hits, misses) in this process so far."""
    # torch: torch.compile is in use, so its dynamo is loaded already
    from torch._dynamo.utils import counters

    inductor = counters["inductor"]
    return int(inductor["fxgraph_cache_hit"]), int(inductor["fxgraph_cache_miss"])
