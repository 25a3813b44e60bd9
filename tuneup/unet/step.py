"""One optimisation step, eager or replayed from a CUDA graph.

A step takes a device batch and returns the loss as a device tensor: reading it
back is left to the caller, so the loop synchronises only when it logs.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

import torch
from torch import Tensor, nn

from tuneup.unet.precision import Precision
from tuneup.unet.ranges import GRAPH, part

LossFn = Callable[[Tensor, Tensor, float], Tensor]


class EagerStep:
    """Forward, loss, backward and optimizer step, with AMP and its scaler when set."""

    def __init__(
        self,
        model: nn.Module,
        loss_fn: LossFn,
        optimizer: torch.optim.Optimizer,
        precision: Precision,
        lambda_rho: float,
    ) -> None:
        self.model = model
        self.loss_fn = loss_fn
        self.optimizer = optimizer
        self.precision = precision
        self.lambda_rho = lambda_rho
        self._overflows: Tensor | None = None  # on the device: counted without a sync
        # On the CPU the last step's loss, graph and all, lives until the next step has
        # computed its own, as in the tutorial's loop (`loss = ...` rebinds it a step later).
        # Dropping it at return instead let glibc trim the heap every step and page it back
        # in the next one: 10% slower on the CPU bench (bench/worker_vs_bare.py). On a GPU
        # the caching allocator keeps its blocks either way, and a graph kept alive holds the
        # parameters' AccumulateGrad nodes: a backward on another stream (CUDA graphs' warm-up
        # and capture) then warns that their streams do not match, which PyTorch says may
        # cost synchronisation or break the capture. So it is kept on the CPU only.
        self._previous_loss: Tensor | None = None

    @property
    def scaler_overflows(self) -> int:
        """Steps the fp16 scaler skipped (inf/NaN grads); reading it synchronises, once."""
        return 0 if self._overflows is None else int(self._overflows.item())

    def __call__(self, inp: Tensor, tar: Tensor) -> Tensor:
        with part("optimizer"):
            self.optimizer.zero_grad(set_to_none=True)
        with part("forward"), self.precision.autocast():
            loss = self.loss_fn(self.model(inp), tar, self.lambda_rho)
        scaler = self.precision.scaler
        if scaler is None:
            with part("backward"):
                loss.backward()
            with part("optimizer"):
                self.optimizer.step()
        else:
            scaled = scaler.scale(loss)  # creates the scale tensor on the first step
            before = _scale_tensor(scaler)
            before = None if before is None else before.clone()
            with part("backward"):
                scaled.backward()
            with part("optimizer"):
                scaler.step(self.optimizer)
                scaler.update()
            after = _scale_tensor(scaler)
            if before is not None and after is not None:
                # A lower scale after update() means this step was skipped. Compared on the
                # device: get_scale() would make the CPU wait for the GPU twice a step.
                dropped = (after < before).to(torch.int64)
                self._overflows = dropped if self._overflows is None else self._overflows + dropped
        self._previous_loss = loss if loss.device.type == "cpu" else None
        return loss.detach()


def _scale_tensor(scaler: Any) -> Tensor | None:
    """The scaler's live scale as a device tensor; None while the scaler is disabled.

    GradScaler has no public accessor that does not synchronise (get_scale() calls item()).
    """
    scale = getattr(scaler, "_scale", None)
    return scale if isinstance(scale, Tensor) else None


class GraphedStep:
    """The whole step captured once in a CUDA graph, then replayed per batch.

    Batches are copied into static input tensors before each replay. Warm-up
    steps run eagerly on a side stream first, as capture requires (DDP needs
    at least 11 of them); their updates are then undone, so a graphed run
    follows the same loss curve as an eager one.
    """

    def __init__(
        self,
        eager: EagerStep,
        sample_inp: Tensor,
        sample_tar: Tensor,
        warmup_steps: int = 3,
    ) -> None:
        if sample_inp.device.type != "cuda":
            raise RuntimeError("cuda_graphs needs CUDA tensors")
        if eager.precision.scaler is not None:
            raise RuntimeError("cuda_graphs cannot capture the fp16 GradScaler")
        self.eager = eager
        self.static_inp = sample_inp.clone()
        self.static_tar = sample_tar.clone()
        start_weights = [p.detach().clone() for p in eager.model.parameters()]
        side = torch.cuda.Stream()
        side.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(side):
            for _ in range(warmup_steps):
                eager(self.static_inp, self.static_tar)
        torch.cuda.current_stream().wait_stream(side)
        torch.cuda.synchronize()
        began = time.perf_counter()
        self.graph = torch.cuda.CUDAGraph()
        eager.optimizer.zero_grad(set_to_none=True)
        # thread_local: a DataLoader's pin-memory thread may call CUDA during the
        # capture; under the default (global) mode that call would break it.
        with torch.cuda.graph(self.graph, capture_error_mode="thread_local"):
            with eager.precision.autocast():
                out = eager.model(self.static_inp)
                self.static_loss = eager.loss_fn(out, self.static_tar, eager.lambda_rho)
            self.static_loss.backward()
            eager.optimizer.step()
        torch.cuda.synchronize()
        # The capture alone: warm-up steps (where torch.compile compiles and autotunes)
        # are a cost of their own, counted with the first steps.
        self.capture_s = time.perf_counter() - began
        self.warmup_steps = warmup_steps
        _rewind(eager, start_weights)

    @property
    def scaler_overflows(self) -> int:
        return 0

    def __call__(self, inp: Tensor, tar: Tensor) -> Tensor:
        self.static_inp.copy_(inp, non_blocking=True)
        self.static_tar.copy_(tar, non_blocking=True)
        with part(GRAPH):
            self.graph.replay()
        return self.static_loss.detach().clone()


def _rewind(eager: EagerStep, start_weights: list[Tensor]) -> None:
    """Undo the warm-up and capture updates in place, so replay 1 is the run's step 1.

    In place, because the graph holds the addresses of the weights and of
    Adam's state; fresh Adam state is all zeros (moments and step count).
    """
    with torch.no_grad():
        for param, saved in zip(eager.model.parameters(), start_weights, strict=True):
            param.copy_(saved)
        for state in eager.optimizer.state.values():
            for value in state.values():
                if isinstance(value, Tensor):
                    value.zero_()
