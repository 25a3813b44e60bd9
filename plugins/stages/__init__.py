"""tuneup's built-in probe stages: the tutorial's tuning path, one knob at a time.

Each stage is a module-level `Stage` value registered under the entry-point
group ``tuneup.stages`` (see pyproject.toml), exactly as a third-party package
would register its own. The search keeps a variant only when it beats the
incumbent by more than the noise margin, so a stage may propose a variant that
is expected to lose: it measures what a switch is worth. The stages live in a
module per phase they move (loaders, compute, batch, ddp); all are named here,
where the entry points find them.
"""

from __future__ import annotations

# Each stage declares the phase its knobs move (judged_on: IO for the loader, SYNTHETIC for
# the model's arithmetic, FULL for the batch and DDP, which move both) and the gain it
# typically brings (expected_gain), what a time budget keeps first. The gains are priors
# from the tutorial's A100 figures (unet-workload.md: 2 -> 8 workers +217%, DALI +44%,
# AMP +57% SYNTHETIC, fused Adam +4%, JIT +7% SYNTHETIC, DDP buffers and buckets +3.5%)
# and the first H200 run (channels_last +3.5% SYNTHETIC); TF32 off is measured for what
# TF32 is worth and is expected to lose. Each declares its place in the default ladder
# (order: the tutorial's order), so a preset that does not list stages runs them all.
from .batch import BATCH_SIZE, BatchSizeStage
from .compute import (
    AMP,
    CHANNELS_LAST,
    CUDA_GRAPHS,
    CUDNN_BENCHMARK,
    JIT,
    OPTIMIZER,
    TF32,
    AmpStage,
    CudaGraphsStage,
    CudaOnlyStage,
    JitStage,
    OptimizerStage,
)
from .ddp import BUCKET_SIZES_MB, DDP, NODDP, ONE_RANK, DdpStage, per_rank_batch
from .loaders import DATA, WORKERS, DataStage, WorkersStage
from .threads import THREADS, ThreadsStage

__all__ = [
    "AMP",
    "BATCH_SIZE",
    "BUCKET_SIZES_MB",
    "CHANNELS_LAST",
    "CUDA_GRAPHS",
    "CUDNN_BENCHMARK",
    "DATA",
    "DDP",
    "JIT",
    "NODDP",
    "ONE_RANK",
    "OPTIMIZER",
    "TF32",
    "THREADS",
    "WORKERS",
    "AmpStage",
    "BatchSizeStage",
    "CudaGraphsStage",
    "CudaOnlyStage",
    "DataStage",
    "DdpStage",
    "JitStage",
    "OptimizerStage",
    "ThreadsStage",
    "WorkersStage",
    "per_rank_batch",
]
